"""FileIO on Google Cloud Storage and Azure Blob emulators: every spelling of a location reaches
the same object, deletes report what they did, secrets stay out of errors, and a store answering
503 to one request in ten slows the work down without losing any of it."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import pytest

from tablekeeper.errors import AlreadyExists, FileNotFound, StorageError, TablekeeperError
from tablekeeper.io import FileIO
from tests.support.cloud_stores import (
    AZURE_CONTAINER,
    GCS_BUCKET,
    AzureEndpoint,
    GcsEndpoint,
    Proxy,
    service_account,
    throttling_proxy,
)

MANY = 60  # enough for concurrent writes and deletes; listing pages hold 1,000 (GCS) or 5,000 (Azure)


def _round_trip(io: FileIO, base: str, other_spellings: tuple[str, ...], many: int = MANY) -> None:
    io.write(f"{base}/rt/a.txt", b"hello")
    for other in other_spellings:
        assert io.read(f"{other}/rt/a.txt") == b"hello"
    assert io.size(f"{base}/rt/a.txt") == 5 and io.exists(f"{base}/rt/a.txt")
    with pytest.raises(AlreadyExists):
        io.create_if_absent(f"{other_spellings[0]}/rt/a.txt", b"other")
    io.create_if_absent(f"{base}/rt/b.txt", b"bee")
    with io.open_input(f"{base}/rt/b.txt") as stream:
        assert stream.read_at(2, 1) == b"ee"
    with pytest.raises(FileNotFound):
        io.read(f"{base}/rt/missing.txt")

    def put(i: int) -> None:
        io.write(f"{base}/rt/many/{i:05d}.bin", b"x")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(many)))
    listed = list(io.list(f"{other_spellings[0]}/rt/many"))
    assert len(listed) == many
    assert all(f.location.startswith(f"{other_spellings[0]}/rt/many/") for f in listed)
    assert all(f.size == 1 and f.mtime_ms > 0 for f in listed)
    files, dirs = io.list_dir(f"{base}/rt")
    assert sorted(f.location for f in files) == [f"{base}/rt/a.txt", f"{base}/rt/b.txt"]
    assert dirs == (f"{base}/rt/many",)

    # Deletes carry on past what is already gone; every file listed goes.
    report = io.delete_many([f.location for f in listed] + [f"{base}/rt/never-there.bin"], max_workers=16)
    assert (report.deleted, report.missing, report.failures) == (many, 1, ())
    assert list(io.list(f"{base}/rt/many")) == []
    assert io.delete(f"{base}/rt/a.txt") and not io.delete(f"{base}/rt/a.txt", missing_ok=True)


def test_gcs_fileio_round_trip_under_gs_and_gcs(gcs_server: GcsEndpoint) -> None:
    io = FileIO.for_location(f"gs://{GCS_BUCKET}/", gcs_server.properties())
    assert repr(io) == "FileIO(gcs)" and not io.atomic_create
    _round_trip(io, f"gs://{GCS_BUCKET}/fileio", (f"gcs://{GCS_BUCKET}/fileio",))
    io.mkdirs(f"gs://{GCS_BUCKET}/fileio/empty")  # object stores: no marker object is made
    assert not io.exists(f"gs://{GCS_BUCKET}/fileio/empty")


def test_azure_fileio_round_trip_under_every_scheme_and_endpoint(azure_server: AzureEndpoint) -> None:
    account = azure_server.account
    dfs = f"abfss://{AZURE_CONTAINER}@{account}.dfs.core.windows.net/fileio"
    io = FileIO.for_location(dfs, azure_server.properties())
    assert repr(io) == "FileIO(abfs)" and not io.atomic_create
    others = (
        f"wasbs://{AZURE_CONTAINER}@{account}.blob.core.windows.net/fileio",
        f"abfs://{AZURE_CONTAINER}@{account}.dfs.core.windows.net/fileio",
        f"wasb://{AZURE_CONTAINER}@{account}.blob.core.windows.net/fileio",
    )
    _round_trip(io, dfs, others)
    # Deleting a directory's last file leaves nothing: no lease, and no marker blob for the
    # directory, as pyarrow's own delete writes (every journal removed would leave one behind).
    io.delete(f"{dfs}/rt/b.txt")
    files, dirs = io.list_dir(dfs)
    assert (files, dirs) == ((), ()), (files, dirs)
    # One filesystem is bound to its account: another account's location is refused by name.
    with pytest.raises(StorageError, match="not on"):
        io.read(f"abfss://{AZURE_CONTAINER}@someoneelse.dfs.core.windows.net/x")


def _no_secret(err: BaseException, secrets: tuple[str, ...]) -> str:
    text = f"{err} {err!r} {getattr(err, 'message', '')}"
    for secret in secrets:
        assert secret not in text
    return text


def test_azure_keys_and_sas_tokens_stay_out_of_errors_and_logs(
    azure_server: AzureEndpoint, caplog: pytest.LogCaptureFixture
) -> None:
    account = azure_server.account
    location = f"abfss://{AZURE_CONTAINER}@{account}.dfs.core.windows.net/secrets/a.txt"
    wrong_key = azure_server.key[:-8] + "AAAAAAA="
    sig = "c2lnbmF0dXJlLW5vdC12YWxpZA%3D%3D"
    sas = f"sv=2023-11-03&ss=b&srt=sco&sp=rwdl&se=2099-01-01T00:00:00Z&sig={sig}"
    with caplog.at_level(logging.DEBUG):
        wrong: Mapping[str, str] = {
            f"adls.connection-string.{account}": azure_server.connection_string().replace(
                azure_server.key, wrong_key
            )
        }
        with pytest.raises(TablekeeperError) as refused:
            FileIO.for_location(location, wrong).write(location, b"x")
        said = _no_secret(refused.value, (wrong_key, azure_server.key))
        assert "403" in said or "authenticat" in said.lower() or "signature" in said.lower()
        url = azure_server.url
        with_sas = {
            f"adls.sas-token.{account}": sas,
            "adls.blob-storage-authority": url.partition("://")[2],
            "adls.blob-storage-scheme": "http",
            "adls.dfs-storage-authority": url.partition("://")[2],
            "adls.dfs-storage-scheme": "http",
        }
        with pytest.raises(TablekeeperError) as refused:
            FileIO.for_location(location, with_sas).read(location)
        _no_secret(refused.value, (sas, sig))
    assert wrong_key not in caplog.text and sig not in caplog.text and sas not in caplog.text


def test_a_gcs_token_stays_out_of_errors(gcs_server: GcsEndpoint) -> None:
    token = "ya29.test-token-" + "s3cr3t" * 4
    props = {"gcs.service.host": gcs_server.url, "gcs.oauth2.token": token, "gcs.user-project": "p"}
    with pytest.raises(TablekeeperError, match=r"unsupported GCS properties gcs\.user-project") as refused:
        FileIO.for_location(f"gs://{GCS_BUCKET}/x", props)
    _no_secret(refused.value, (token,))
    del props["gcs.user-project"]
    io = FileIO.for_location(f"gs://{GCS_BUCKET}/x", props)  # the emulator takes any token
    with pytest.raises(FileNotFound) as missing:
        io.read(f"gs://{GCS_BUCKET}/secrets/none")
    _no_secret(missing.value, (token,))


def _survives_throttling(io: FileIO, base: str, proxy: Proxy, count: int) -> None:

    def put(i: int) -> None:
        io.write(f"{base}/throttled/{i:03d}.bin", str(i).encode())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(count)))
    listed = sorted(f.location for f in io.list(f"{base}/throttled"))
    assert listed == [f"{base}/throttled/{i:03d}.bin" for i in range(count)]
    assert [io.read(loc) for loc in listed] == [str(i).encode() for i in range(count)]
    report = io.delete_many(listed, max_workers=8)
    assert (report.deleted + report.missing, report.failures) == (count, ())
    assert list(io.list(f"{base}/throttled")) == []
    seen, refused = proxy.counts()
    assert refused == seen // 10 and refused >= count // 10  # the store refused; the clients retried


def test_gcs_answering_503_to_one_request_in_ten_loses_nothing(gcs_server: GcsEndpoint) -> None:
    with throttling_proxy(gcs_server.url) as proxy:
        base = f"gs://{GCS_BUCKET}/slow"
        io = FileIO.for_location(base, {**gcs_server.properties(), "gcs.service.host": proxy.url})
        # google-cloud-cpp waits a second or more before each retry: fewer files keep this short.
        _survives_throttling(io, base, proxy, 10)
        # Deletes went through the JSON batch endpoint (tablekeeper's retries), none one by one.
        methods = [(s["method"], s["path"].partition("?")[0]) for s in proxy.stats()["seen"]]
        assert ("POST", "/batch/storage/v1") in methods
        assert not [m for m in methods if m[0] == "DELETE"]


def test_azure_answering_503_to_one_request_in_ten_loses_nothing(azure_server: AzureEndpoint) -> None:
    with throttling_proxy(azure_server.url) as proxy:
        base = f"abfss://{AZURE_CONTAINER}@{azure_server.host}/slow"
        io = FileIO.for_location(base, azure_server.properties(proxy.url))
        _survives_throttling(io, base, proxy, 60)
        # Deletes went through the Blob Batch API (tablekeeper's retries), none one by one.
        methods = [(s["method"], s["path"]) for s in proxy.stats()["seen"]]
        assert any(m == "POST" and "comp=batch" in p for m, p in methods)
        assert not [m for m in methods if m[0] == "DELETE"]


def test_a_gcs_service_account_key_mints_tokens_and_renews_them_before_they_expire(
    gcs_server: GcsEndpoint, caplog: pytest.LogCaptureFixture
) -> None:
    # Tokens good for 301 s are renewed 300 s before they expire: each use a second apart renews.
    with service_account(lifetime_s=301) as (key, minted):
        props = {"gcs.service.host": gcs_server.url, "gcs.credentials-json": key}
        io = FileIO.for_location(f"gs://{GCS_BUCKET}/sa", props)
        io.write(f"gs://{GCS_BUCKET}/sa/a.txt", b"signed")
        assert minted == ["minted-1"]
        time.sleep(1.1)
        assert io.read(f"gs://{GCS_BUCKET}/sa/a.txt") == b"signed"  # the same FileIO, a new token
        assert minted == ["minted-1", "minted-2"]
        assert io.delete(f"gs://{GCS_BUCKET}/sa/a.txt")
        private_key = json.loads(key)["private_key"]
        # Another account's key is refused by the endpoint: the error names the account, not the key.
        other = json.loads(key) | {"client_email": "x@test.iam.gserviceaccount.com"}
        forged = other | {"private_key": private_key.replace(private_key[100:140], private_key[140:180])}
        with caplog.at_level(logging.DEBUG), pytest.raises(TablekeeperError) as refused:
            bad = {"gcs.service.host": gcs_server.url, "gcs.credentials-json": json.dumps(forged)}
            FileIO.for_location(f"gs://{GCS_BUCKET}/sa", bad).read(f"gs://{GCS_BUCKET}/sa/a.txt")
        said = _no_secret(refused.value, (private_key[40:120], forged["private_key"][40:120], "minted-"))
        assert "x@test.iam.gserviceaccount.com" in said or "private_key" in said
        assert private_key[40:120] not in caplog.text


def test_azure_sas_of_one_container_deletes_without_the_batch_api(azure_server: AzureEndpoint) -> None:
    """A SAS scoped to a container may delete its blobs but not send the account's batch request:
    deletes, one or many, go through pyarrow's client instead of failing."""
    host = azure_server.url.partition("://")[2]
    props = {
        f"adls.sas-token.{azure_server.account}": azure_server.container_sas(AZURE_CONTAINER),
        "adls.blob-storage-authority": host,
        "adls.blob-storage-scheme": "http",
        "adls.dfs-storage-authority": host,
        "adls.dfs-storage-scheme": "http",
    }
    base = f"abfss://{AZURE_CONTAINER}@{azure_server.host}/scoped"
    io = FileIO.for_location(base, props)
    names = [f"{base}/f{i}.bin" for i in range(2)]
    for name in names:
        io.write(name, b"x")
    # One at a time, and none already gone: pyarrow's deletes in one directory wait on each
    # other's leases, and on the last one's when the blob is gone.
    report = io.delete_many(names[1:])
    assert (report.deleted, report.missing, report.failures) == (1, 0, ())
    assert io.delete(names[0])
    assert list(io.list(base)) == []
