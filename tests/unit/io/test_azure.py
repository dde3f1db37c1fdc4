"""Azure settings: Iceberg's per-account property names, connection strings, what Hadoop needs."""

from __future__ import annotations

import pytest

from tablekeeper.errors import ConfigError
from tablekeeper.io import FileIO
from tablekeeper.io.azure import AzureAccount, _blob_base, account_settings, batch_delete
from tablekeeper.io.storage import storage_subset
from tablekeeper.io.stores import hadoop_settings
from tablekeeper.redact import redact, redacted_properties

KEY = "a2V5LWZvci11bml0LXRlc3RzLW9ubHk" + "x" * 57 + "=="
EMULATOR = (
    f"DefaultEndpointsProtocol=http;AccountName=acct;AccountKey={KEY};"
    "BlobEndpoint=http://127.0.0.1:10000/acct;"
)


@pytest.mark.parametrize("spelling", ["acct", "acct.dfs.core.windows.net", "acct.blob.core.windows.net"])
def test_a_connection_string_is_found_under_the_account_name_or_either_host(spelling: str) -> None:
    account = account_settings("acct.dfs.core.windows.net", {f"adls.connection-string.{spelling}": EMULATOR})
    assert account == AzureAccount(
        "acct",
        key=KEY,
        blob_authority="127.0.0.1:10000",
        dfs_authority="127.0.0.1:10000",
        blob_scheme="http",
        dfs_scheme="http",
    )
    assert KEY not in repr(account)


def test_sas_shared_key_and_sovereign_clouds() -> None:
    sas = "sv=2023-11-03&sp=rl&sig=c2lnbmF0dXJl%3D"
    assert account_settings("acct", {"adls.sas-token.acct": "?" + sas}).sas_token == sas
    shared = {
        "adls.auth.shared-key.account.name": "acct",
        "adls.auth.shared-key.account.key": KEY,
    }
    assert account_settings("acct.dfs.core.windows.net", shared).key == KEY
    assert account_settings("other.dfs.core.windows.net", shared).key is None  # another account's
    china = account_settings("acct.dfs.core.chinacloudapi.cn", {})
    assert (china.dfs_host, china.blob_host) == (
        "acct.dfs.core.chinacloudapi.cn",
        "acct.blob.core.chinacloudapi.cn",
    )
    # A SAS token's signature is masked on its own: a failed request's URL quotes it.
    assert "c2lnbmF0dXJl%3D" not in redact("GET /acct/c/x?sv=1&sig=c2lnbmF0dXJl%3D: 403")


@pytest.mark.parametrize(
    ("properties", "said"),
    [
        ({"adls.read.block-size-bytes": "1"}, "unsupported ADLS properties adls.read.block-size-bytes"),
        ({"adls.connection-string.acct": "not a connection string"}, "is not a connection string"),
        ({"adls.connection-string.acct": "AccountName=bob;AccountKey=k"}, "names another account"),
        ({"adls.blob-storage-scheme": "ftp"}, "use http or https"),
    ],
)
def test_settings_that_would_be_ignored_or_misread_are_refused(properties: dict[str, str], said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        account_settings("acct", properties)


def test_every_azure_scheme_is_served_by_one_account_bound_store() -> None:
    props = {"adls.connection-string.acct": EMULATOR}
    io = FileIO.for_location("abfss://c@acct.dfs.core.windows.net/t", props)
    assert repr(io) == "FileIO(abfs)" and io.batches_deletes  # the Blob Batch API
    for spelling in (
        "abfs://c@acct.dfs.core.windows.net/t/f",
        "wasbs://c@acct.blob.core.windows.net/t/f",
        "wasb://c@ACCT.blob.core.windows.net/t/f",
    ):
        assert io.fs_path(spelling) == "c/t/f"
    with pytest.raises(ConfigError, match="names no container"):
        io.fs_path("abfss://acct.dfs.core.windows.net/t/f")
    with pytest.raises(ConfigError, match="expected container@account"):
        FileIO.for_location("abfss://acct.dfs.core.windows.net/t", props)


def test_keys_travel_as_storage_settings_are_masked_and_reach_hadoop() -> None:
    props = {
        "adls.connection-string.acct": EMULATOR,
        "adls.sas-token.other.dfs.core.windows.net": "sv=1&sig=b3RoZXItc2ln",
        "adls.auth.shared-key.account.name": "third",
        "adls.auth.shared-key.account.key": KEY[::-1],
    }
    assert storage_subset({**props, "warehouse": "abfss://c@acct.dfs.core.windows.net/w"}) == props
    shown = redacted_properties(props)
    assert all(v == "***" for v in shown.values() if v != "third")
    conf = hadoop_settings(props)
    assert conf["fs.azure.account.key.acct.dfs.core.windows.net"] == KEY
    assert conf["fs.azure.account.key.acct.blob.core.windows.net"] == KEY
    assert conf["fs.azure.account.auth.type.acct.dfs.core.windows.net"] == "SharedKey"
    assert conf["fs.azure.account.auth.type.other.dfs.core.windows.net"] == "SAS"
    assert conf["fs.azure.sas.fixed.token.other.dfs.core.windows.net"] == "sv=1&sig=b3RoZXItc2ln"
    assert conf["fs.azure.account.key.third.dfs.core.windows.net"] == KEY[::-1]
    # The emulator's account: ABFS reaches it at its endpoint, over HTTP, on its Blob API only.
    assert conf["fs.azure.abfs.endpoint"] == "127.0.0.1:10000"
    assert conf["fs.azure.always.use.https"] == "false"
    assert conf["fs.azure.account.hns.enabled.acct.dfs.core.windows.net"] == "false"
    assert conf["fs.azure.fns.account.service.type.acct.dfs.core.windows.net"] == "BLOB"
    assert not any(k.endswith("other.dfs.core.windows.net") and "hns" in k for k in conf)
    # No account of ours: the cluster's settings stand. (A store another test registered for the
    # process, toy://, may add its own.)
    assert len([k for k in conf if k.startswith("fs.azure.")]) == 12
    assert not [k for k in hadoop_settings({}) if k.startswith("fs.azure.")]


def test_batch_deletes_need_a_key_or_a_sas_and_find_the_accounts_blob_endpoint() -> None:
    """The default credential chain lives in pyarrow's client only: no batch (and no request).
    An emulator at an IP address serves the account under /<account>; a real host is the account's."""
    assert batch_delete("c@acct.dfs.core.windows.net", {}, ["c/k"]) is None
    emulator = account_settings("acct", {"adls.connection-string.acct": EMULATOR})
    assert _blob_base(emulator) == "http://127.0.0.1:10000/acct"
    assert _blob_base(AzureAccount("acct")) == "https://acct.blob.core.windows.net"
