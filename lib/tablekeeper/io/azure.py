"""Azure storage (``abfs[s]://container@account.dfs.core.windows.net/key``, ``wasb[s]://...blob...``).

Settings use Iceberg's FileIO property names: ``adls.connection-string.<account>``,
``adls.sas-token.<account>`` and ``adls.auth.shared-key.account.name``/``.key``, where
``<account>`` is the account's host (``acct.dfs.core.windows.net``) or its bare name. An emulator
(Azurite) is reached through a connection string's ``BlobEndpoint``, or PyIceberg's
``adls.blob-storage-authority``/``adls.blob-storage-scheme`` (and their ``dfs`` twins). With
nothing configured for an account, pyarrow's client walks Azure's default credential chain
(environment, workload and managed identity, the az CLI's login).

The Blob and Data Lake endpoints of one account serve the same files, and Hadoop's wasb/wasbs
spellings reach them too; one pyarrow filesystem per account serves all four schemes. It retries
408, 429, 500 and 503 answers with exponential backoff on its own (the Azure SDK's policy). Deletes
are one request per blob, sent concurrently by ``FileIO.delete_many``: the Blob Batch API needs
every sub-request signed on its own, which pyarrow does not offer.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import unquote, urlsplit

import pyarrow.fs as pafs

from tablekeeper.errors import ConfigError
from tablekeeper.io.azure_batch import BATCH_LIMIT, delete_blobs
from tablekeeper.io.stores import Store, StoreDeletes, register_store
from tablekeeper.redact import register_secret

PREFIX = "adls."
CONNECTION_STRING = "adls.connection-string."
SAS_TOKEN = "adls.sas-token."
SHARED_KEY_NAME = "adls.auth.shared-key.account.name"
SHARED_KEY_KEY = "adls.auth.shared-key.account.key"
ENDPOINT_PROPERTIES: tuple[str, ...] = (
    "adls.blob-storage-authority",
    "adls.blob-storage-scheme",
    "adls.dfs-storage-authority",
    "adls.dfs-storage-scheme",
)
SUPPORTED = (f"{CONNECTION_STRING}<account>", f"{SAS_TOKEN}<account>", SHARED_KEY_NAME, SHARED_KEY_KEY)
DEFAULT_SUFFIX = "core.windows.net"


@dataclass(frozen=True)
class AzureAccount:
    """How to reach one storage account. Secrets stay out of ``repr``."""

    name: str
    suffix: str = DEFAULT_SUFFIX  # the endpoints' domain: acct.blob.<suffix>, acct.dfs.<suffix>
    key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)
    blob_authority: str | None = None  # host:port of an emulator; None: acct.blob.<suffix>
    dfs_authority: str | None = None
    blob_scheme: str | None = None  # "http" for an emulator; None: https
    dfs_scheme: str | None = None

    @property
    def dfs_host(self) -> str:
        return f"{self.name}.dfs.{self.suffix}"

    @property
    def blob_host(self) -> str:
        return f"{self.name}.blob.{self.suffix}"


def split_account(host: str) -> tuple[str, str]:
    """(account name, endpoint suffix) of ``acct.dfs.core.windows.net`` or a bare ``acct``."""
    name, dot, rest = host.partition(".")
    if not dot:
        return name, DEFAULT_SUFFIX
    kind, _, suffix = rest.partition(".")
    if kind not in ("dfs", "blob") or not suffix:
        raise ConfigError(f"{host!r} is not an Azure storage host: expected acct.dfs.core.windows.net")
    return name, suffix


def _parse_connection_string(text: str, key: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(";"):
        if not item.strip():
            continue
        name, eq, value = item.partition("=")  # a key or a SAS holds '=' of its own: split once
        if not eq:
            raise ConfigError(f"{key} is not a connection string (Name=value;...)")
        out[name.strip().lower()] = value.strip()
    return out


def _secret(value: str | None) -> str | None:
    """Learn a key or SAS token as a secret, and a SAS's signature on its own (a service quotes
    a failed request's URL, whose query string carries it)."""
    if value:
        register_secret(value)
        for item in value.lstrip("?").split("&"):
            name, _, part = item.partition("=")
            if name.lower() == "sig":
                register_secret(part)  # as written (percent-encoded) and as a client decodes it
                register_secret(unquote(part))
    return value or None


def _with_endpoint(account: AzureAccount, url: str, key: str) -> AzureAccount:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{key}: endpoint {url!r} is not http://host:port or https://host")
    if parts.netloc.lower() in (account.blob_host, account.dfs_host):
        return account  # the account's own endpoint: nothing to override
    # An emulator serves the account under a path (host:port/acct): pyarrow adds that path itself.
    return replace(
        account,
        blob_authority=parts.netloc,
        dfs_authority=parts.netloc,
        blob_scheme=parts.scheme,
        dfs_scheme=parts.scheme,
    )


def account_settings(host: str, properties: Mapping[str, str], source: str = "storage") -> AzureAccount:
    """The settings of the account ``host`` names (``acct.dfs.core.windows.net`` or ``acct``)."""
    given = {k: str(v) for k, v in properties.items() if k.startswith(PREFIX)}
    known = {SHARED_KEY_NAME, SHARED_KEY_KEY, *ENDPOINT_PROPERTIES}
    unknown = sorted(k for k in given if k not in known and not k.startswith((CONNECTION_STRING, SAS_TOKEN)))
    if unknown:
        raise ConfigError(
            f"unsupported ADLS properties {', '.join(unknown)} in {source}: supported are "
            f"{', '.join((*SUPPORTED, *ENDPOINT_PROPERTIES))}"
        )
    for key, value in given.items():  # every secret is learnt, not only the account's at hand
        if key.startswith((CONNECTION_STRING, SAS_TOKEN)) or key == SHARED_KEY_KEY:
            _secret(value)
            if key.startswith(CONNECTION_STRING):
                parsed = _parse_connection_string(value, key)
                _secret(parsed.get("accountkey"))
                _secret(parsed.get("sharedaccesssignature"))
    name, suffix = split_account(host.lower())
    spellings = (f"{name}.dfs.{suffix}", f"{name}.blob.{suffix}", name)
    account = AzureAccount(name, suffix)
    connection = next((given[k] for s in spellings if (k := CONNECTION_STRING + s) in given), None)
    if connection is not None:
        parsed = _parse_connection_string(connection, f"{CONNECTION_STRING}{name}")
        if parsed.get("accountname", name).lower() != name:
            raise ConfigError(f"{CONNECTION_STRING}{name} names another account in {source}")
        suffix = parsed.get("endpointsuffix", suffix)
        shared, sas_part = parsed.get("accountkey") or None, parsed.get("sharedaccesssignature") or None
        account = AzureAccount(name, suffix, key=shared, sas_token=sas_part)
        endpoint = parsed.get("blobendpoint") or parsed.get("dfsendpoint")
        if endpoint:
            account = _with_endpoint(account, endpoint, f"{CONNECTION_STRING}{name}")
        elif parsed.get("defaultendpointsprotocol", "https").lower() == "http":
            account = replace(account, blob_scheme="http", dfs_scheme="http")
    sas = next((given[k] for s in spellings if (k := SAS_TOKEN + s) in given), None)
    if sas:
        account = replace(account, sas_token=sas.lstrip("?"), key=None)
    elif not account.key and not account.sas_token and given.get(SHARED_KEY_NAME, "").lower() == name:
        account = replace(account, key=given.get(SHARED_KEY_KEY) or None)
    if account.key and account.sas_token:
        account = replace(account, sas_token=None)  # pyarrow takes one: the key
    overrides: dict[str, str] = {}
    for prop in ENDPOINT_PROPERTIES:  # adls.blob-storage-authority -> blob_authority
        setting = given.get(prop)
        if not setting:
            continue
        if prop.endswith("scheme") and setting not in ("http", "https"):
            raise ConfigError(f"{prop}={setting!r} in {source}: use http or https")
        overrides[prop[len(PREFIX) :].replace("-storage-", "_")] = setting
    if overrides:
        account = replace(account, **overrides)
    return account


@functools.lru_cache(maxsize=32)
def azure_filesystem(account: AzureAccount) -> pafs.AzureFileSystem:
    """One pyarrow filesystem per account and settings (it holds a connection pool)."""
    return pafs.AzureFileSystem(
        account.name,
        account_key=account.key,
        # pyarrow appends the token to its URLs as given: without its "?" it became a path segment.
        sas_token=None if not account.sas_token else "?" + account.sas_token,
        blob_storage_authority=account.blob_authority or f".blob.{account.suffix}",
        dfs_storage_authority=account.dfs_authority or f".dfs.{account.suffix}",
        blob_storage_scheme=account.blob_scheme,
        dfs_storage_scheme=account.dfs_scheme,
    )


def _open(authority: str, settings: Mapping[str, str]) -> pafs.FileSystem:
    container, at, host = authority.partition("@")
    if not at or not container or not host:
        raise ConfigError(
            f"Azure location authority {authority!r}: expected container@account.dfs.core.windows.net"
        )
    return azure_filesystem(account_settings(host, settings))


def _blob_base(account: AzureAccount) -> str:
    """The account's Blob endpoint URL: an emulator at an IP address or localhost serves it under
    ``/<account>`` (as pyarrow reaches it), any other host is the account's own."""
    scheme = account.blob_scheme or "https"
    authority = account.blob_authority or account.blob_host
    host = authority.rpartition(":")[0] if authority.count(":") == 1 else authority
    try:
        ipaddress.ip_address(host.strip("[]"))
        path_style = True
    except ValueError:
        path_style = host == "localhost"
    return f"{scheme}://{authority}/{account.name}" if path_style else f"{scheme}://{authority}"


# Credentials (account, key, SAS) whose batch requests were refused: not sent again.
_REFUSED: set[tuple[str, str, str]] = set()


def batch_delete(
    authority: str | None, settings: Mapping[str, str], paths: Sequence[str]
) -> StoreDeletes | None:
    """Delete blobs (``container/blob`` of the account ``authority`` names) with the Blob Batch
    API, one request per container (``azure_batch``); None for an account reached through Azure's
    default credential chain, which only pyarrow's client holds."""
    host = (authority or "").partition("@")[2]
    if not host:
        return None
    account = account_settings(host, settings)
    if not account.key and not account.sas_token:
        return None
    by_container: dict[str, list[str]] = {}
    for path in paths:
        container, _, blob = path.partition("/")
        by_container.setdefault(container, []).append(blob)
    credentials = (account.name, account.key or "", account.sas_token or "")
    if credentials in _REFUSED:
        return None
    outcomes = [
        delete_blobs(account.name, _blob_base(account), c, blobs, key=account.key, sas=account.sas_token)
        for c, blobs in by_container.items()
    ]
    if any(o.refused for o in outcomes):
        # pyarrow's deletes, one blob at a time (a FileIO's paths share one container, and a
        # refusal counts only before any call ran); from now on for credentials that may not
        # batch (a SAS scoped to a container or a directory, where the request is the account's).
        if any(o.refused_with in (401, 403) for o in outcomes):
            _REFUSED.add(credentials)
        return None
    return StoreDeletes(
        tuple(p for o in outcomes for p in o.deleted),
        tuple(p for o in outcomes for p in o.missing),
        tuple(f for o in outcomes for f in o.failures),
    )


def _accounts(settings: Mapping[str, str]) -> set[str]:
    names = {SHARED_KEY_NAME: settings.get(SHARED_KEY_NAME, "")}
    for key in settings:
        for prefix in (CONNECTION_STRING, SAS_TOKEN):
            if key.startswith(prefix):
                names[key] = key[len(prefix) :]
    return {v.lower() for v in names.values() if v}


def hadoop_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """What Hadoop's ABFS and WASB drivers (hadoop-azure) need for every account configured, from
    the same ``adls.*`` settings: its shared key (``fs.azure.account.key.<host>``, both hosts) or
    its fixed SAS token (ABFS's ``fs.azure.sas.fixed.token.<host>``). Nothing when no account is
    configured here (the drivers register their schemes themselves; the cluster's own settings,
    a managed identity say, then stand).

    An account behind an endpoint of its own (an emulator: a connection string's
    ``BlobEndpoint``, ``adls.blob-storage-authority``) is reached the way ABFS reaches one:
    ``fs.azure.abfs.endpoint`` (host:port, the account then served under ``/<account>``), over
    plain HTTP when the endpoint is, and through its Blob endpoint as a flat-namespace account,
    since an emulator serves the Blob API only (Azurite has no Data Lake endpoint)."""
    out: dict[str, str] = {}
    for host in sorted(_accounts(settings)):
        account = account_settings(host, settings)
        if account.key:
            out[f"fs.azure.account.auth.type.{account.dfs_host}"] = "SharedKey"
            out[f"fs.azure.account.key.{account.dfs_host}"] = account.key
            out[f"fs.azure.account.key.{account.blob_host}"] = account.key
        elif account.sas_token:
            out[f"fs.azure.account.auth.type.{account.dfs_host}"] = "SAS"
            out[f"fs.azure.sas.fixed.token.{account.dfs_host}"] = account.sas_token
        if account.blob_authority:
            out["fs.azure.abfs.endpoint"] = account.blob_authority
            if (account.blob_scheme or "https") == "http":
                out["fs.azure.always.use.https"] = "false"
            out[f"fs.azure.account.hns.enabled.{account.dfs_host}"] = "false"
            out[f"fs.azure.fns.account.service.type.{account.dfs_host}"] = "BLOB"
    return out


STORE = register_store(
    Store(
        "azure",
        frozenset({"abfs", "abfss", "wasb", "wasbs"}),
        _open,
        layout="container",
        prefixes=(PREFIX,),
        hadoop=hadoop_settings,
        directories=False,
        batch_delete=batch_delete,
        batch_size=BATCH_LIMIT,
        batch_single_deletes=True,
    )
)
