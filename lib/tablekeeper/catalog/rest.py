"""The Iceberg REST catalog: the production path on object stores, where rename is not atomic.

Loading reads the server's current metadata; committing sends the transition from the loaded
metadata to the new one as requirements plus updates (``iceberg.table_changes``), so the server
checks and applies it atomically. A 409 means another writer won (retry on a fresh load); a 5xx,
a timeout or a broken connection during a commit means the outcome is unknown and nothing may be
deleted. Tokens and client secrets never reach logs, results or error messages.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tablekeeper import faults
from tablekeeper.catalog.base import Catalog, LoadedTable, TableIdentifier
from tablekeeper.catalog.config import CatalogConfig
from tablekeeper.catalog.registry import CatalogType, register_catalog_type
from tablekeeper.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConfigError,
    NotATableError,
    StorageError,
    TablekeeperError,
    UnsupportedFeatureError,
)
from tablekeeper.iceberg.metadata import TableMetadata, parse_table_metadata
from tablekeeper.iceberg.partitioning import partition_spec_to_json, sort_order_to_json
from tablekeeper.iceberg.table_changes import TableChange, creation_change, table_change
from tablekeeper.iceberg.types import schema_to_json
from tablekeeper.io import FileIO
from tablekeeper.io.storage import configure_storage, storage_subset
from tablekeeper.io.stores import with_vended
from tablekeeper.redact import redact, register_secret, register_secrets

log = logging.getLogger(__name__)

_TIMEOUT_S = 60.0
# Statuses that mean a commit was certainly not applied (the spec's 400, 401, 403, 404, 406 and
# 419, plus 409 for a lost race). Any other answer, or none, leaves the outcome unknown.
_NOT_APPLIED = frozenset({400, 401, 403, 404, 406, 419})
_DELEGATION = {"X-Iceberg-Access-Delegation": "vended-credentials"}
# Keys a server may vend that change nothing for tablekeeper (expiry hints); remote signing is
# refused because tablekeeper cannot sign requests through the server.
_VENDED_INFORMATIONAL = ("s3.session-token-expires-at-ms",)
_TOKEN_MARGIN_S = 60.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are refused: urllib would turn a redirected commit POST into a GET (a load,
    answering 200 with the unchanged table) and forward the bearer token to another host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class _NoAnswer(Exception):
    """The request may have reached the server, but no complete answer came back."""


def _created_differently(sent: TableMetadata, got: TableMetadata) -> str | None:
    """What a server changed in a table created from ``sent`` (None: nothing that matters).

    Everything the new files are read by goes by id: schemas and specs by the ids manifests and
    snapshots name, snapshots and refs by theirs, row ids from ``next-row-id``. The snapshot log
    is the server's business: Iceberg keeps only the current snapshot in it when one request adds
    several (time travel by id reaches them all, by timestamp only from the current one)."""
    checks = {
        "schemas": (
            {s.schema_id: s.fields for s in sent.schemas},
            {s.schema_id: s.fields for s in got.schemas},
        ),
        "partition specs": (
            {p.spec_id: p.fields for p in sent.partition_specs},
            {p.spec_id: p.fields for p in got.partition_specs},
        ),
        "current ids": (
            (sent.current_schema_id, sent.default_spec_id, sent.current_snapshot_id),
            (got.current_schema_id, got.default_spec_id, got.current_snapshot_id),
        ),
        "snapshots": (
            {x.snapshot_id: (x.manifest_list, x.schema_id, x.first_row_id) for x in sent.snapshots},
            {x.snapshot_id: (x.manifest_list, x.schema_id, x.first_row_id) for x in got.snapshots},
        ),
        "refs": (dict(sent.refs), dict(got.refs)),
        "row ids": (sent.next_row_id, got.next_row_id),
    }
    return next((name for name, (a, b) in checks.items() if a != b), None)


class RestCatalog(Catalog):
    # A commit request's client may die while the server still applies it: past any timeout.
    commit_settle_ms = int(4 * _TIMEOUT_S * 1000)

    def __init__(
        self, name: str, uri: str, warehouse: str, properties: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.uri = uri.rstrip("/")
        self.warehouse = warehouse
        self.properties = dict(properties or {})
        self._lock = threading.Lock()
        self._token: str | None = self.properties.get("token")
        self._token_expires: float | None = None
        self._prefix: str | None = None
        self._separator = "\x1f"
        register_secrets(self.properties)

    # -- HTTP ------------------------------------------------------------------------------------

    def _auth(self) -> dict[str, str]:
        credential = self.properties.get("credential")
        stale = self._token_expires is not None and time.monotonic() > self._token_expires
        if credential and (self._token is None or stale):
            self._token = self._fetch_token(credential)
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def _fetch_token(self, credential: str) -> str:
        client_id, _, secret = credential.partition(":") if ":" in credential else ("", "", credential)
        form = {
            "grant_type": "client_credentials",
            "client_secret": secret,
            "scope": self.properties.get("scope", "catalog"),
        }
        if client_id:
            form["client_id"] = client_id
        url = self.properties.get("oauth2-server-uri") or f"{self.uri}/v1/oauth/tokens"
        body = urllib.parse.urlencode(form).encode()
        try:
            status, reply = self._send(
                "POST", url, body, {"Content-Type": "application/x-www-form-urlencoded"}
            )
        except _NoAnswer as err:
            raise StorageError(
                f"catalog {self.name}: the OAuth2 token endpoint {url} did not answer ({redact(str(err))})"
            ) from None
        if status != 200 or not isinstance(reply, dict) or "access_token" not in reply:
            raise ConfigError(
                f"catalog {self.name}: the OAuth2 token request to {url} failed ({status}): "
                "check its credential"
            )
        token = str(reply["access_token"])
        register_secret(token)
        expires_in = reply.get("expires_in")
        self._token_expires = (
            time.monotonic() + max(0.0, float(expires_in) - _TOKEN_MARGIN_S)
            if isinstance(expires_in, (int, float))
            else None
        )
        return token

    @staticmethod
    def _send(method: str, url: str, body: bytes | None, headers: Mapping[str, str]) -> tuple[int, Any]:
        """(status, parsed JSON body or None). Raises _NoAnswer when no complete answer came."""
        request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
        try:
            with _OPENER.open(request, timeout=_TIMEOUT_S) as response:
                status, data = int(response.status), response.read()
        except urllib.error.HTTPError as err:
            status = int(err.code)
            try:
                data = err.read()
            except (OSError, http.client.HTTPException):
                data = b""
        except (OSError, http.client.HTTPException, ValueError) as err:  # URLError is an OSError
            raise _NoAnswer(str(getattr(err, "reason", err)) or type(err).__name__) from None
        try:
            return status, json.loads(data) if data else None
        except ValueError:
            return status, None

    def _call(
        self, method: str, path: str, payload: Any = None, headers: Mapping[str, str] | None = None
    ) -> tuple[int, Any]:
        """One request; a 401 with client credentials fetches a new token and tries once more
        (a 401 was certainly not applied). No answer at all raises ``_NoAnswer``."""
        url = f"{self.uri}/v1/{self._path(path)}"
        body = None if payload is None else json.dumps(payload).encode()
        for attempt in (0, 1):
            sent = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}
            sent.update(self._auth())
            status, reply = self._send(method, url, body, sent)
            if status in (401, 419) and attempt == 0 and self.properties.get("credential"):
                log.info("catalog %s: token refused (%d); fetching a new one", self.name, status)
                self._token = None
                continue
            return status, reply
        raise AssertionError("unreachable")

    def _ask(
        self, method: str, path: str, payload: Any = None, headers: Mapping[str, str] | None = None
    ) -> tuple[int, Any]:
        """``_call`` for requests that change nothing: no answer is a storage error."""
        try:
            return self._call(method, path, payload, headers)
        except _NoAnswer as err:
            raise StorageError(
                f"catalog {self.name}: {self.uri} did not answer ({redact(str(err))}): check the catalog uri"
            ) from None

    def _path(self, path: str) -> str:
        prefix = self._config_prefix() if not path.startswith("config") else ""
        return f"{prefix}/{path}" if prefix else path

    def _config_prefix(self) -> str:
        with self._lock:
            if self._prefix is None:
                query = (
                    f"config?warehouse={urllib.parse.quote(self.warehouse)}" if self.warehouse else "config"
                )
                status, reply = self._ask("GET", query)
                if status != 200 or not isinstance(reply, dict):
                    raise ConfigError(f"catalog {self.name}: GET {self.uri}/v1/config answered {status}")
                merged = {**reply.get("defaults", {}), **self.properties, **reply.get("overrides", {})}
                self._prefix = str(merged.get("prefix", "")).strip("/")
                # Multi-level namespaces join with the server's separator (unit separator by default).
                self._separator = urllib.parse.unquote(str(merged.get("namespace-separator", "%1F")))
            return self._prefix

    @staticmethod
    def _error(reply: Any) -> str:
        err = reply.get("error") if isinstance(reply, dict) else None
        if not isinstance(err, dict):
            return "no error details"
        lines = str(err.get("message") or "").splitlines()  # servers may append a stack trace
        return redact(f"{err.get('type', 'error')}: {lines[0] if lines else ''}")

    def _namespace_path(self, namespace: tuple[str, ...]) -> str:
        self._config_prefix()  # learns the separator
        return f"namespaces/{urllib.parse.quote(self._separator.join(namespace), safe='')}"

    def _table_path(self, ident: TableIdentifier) -> str:
        return f"{self._namespace_path(ident.namespace)}/tables/{urllib.parse.quote(ident.name, safe='')}"

    def _loaded(self, identifier: str, reply: Any) -> LoadedTable:
        location = str(reply["metadata-location"])
        meta = parse_table_metadata(json.dumps(reply["metadata"]), source=location)
        # Credentials the server vends for this table (and any storage settings it sends) take
        # precedence, and become the process's: executors and other FileIOs must use them too.
        vended = self._vended(reply, meta.location, identifier)
        io_props = with_vended(storage_subset(self.properties), vended)
        if vended:
            log.info("catalog %s vended storage settings for %s", self.name, identifier)
            configure_storage(io_props)
        return LoadedTable(identifier, location, meta, FileIO.for_location(meta.location, io_props))

    def _vended(self, reply: Mapping[str, Any], table_location: str, identifier: str) -> dict[str, str]:
        """The storage settings of a load answer: its ``config``, then the ``storage-credentials``
        entry with the longest prefix of the table's location."""
        config = {str(k): str(v) for k, v in (reply.get("config") or {}).items()}
        credentials = [c for c in reply.get("storage-credentials") or () if isinstance(c, dict)]
        matching = [c for c in credentials if table_location.startswith(str(c.get("prefix", "")))]
        if matching:
            best = max(matching, key=lambda c: len(str(c.get("prefix", ""))))
            config.update({str(k): str(v) for k, v in (best.get("config") or {}).items()})
        vended = storage_subset(config)
        register_secrets(vended)
        if vended.pop("s3.remote-signing-enabled", "false").lower() == "true":
            raise UnsupportedFeatureError(
                f"catalog {self.name} asks to sign S3 requests for {identifier} itself (remote signing): "
                "tablekeeper needs vended credentials or its own keys"
            )
        return {
            k: v
            for k, v in vended.items()
            if k not in _VENDED_INFORMATIONAL and not k.startswith("s3.signer")
        }

    # -- Catalog ---------------------------------------------------------------------------------

    def default_table_location(self, identifier: str) -> str:
        """Under the warehouse when it is a location; otherwise "" and the server decides (for
        Polaris, Unity and the like the warehouse is a catalog's name, not a path)."""
        if "://" not in self.warehouse:
            return ""
        ident = TableIdentifier.parse(identifier)
        return "/".join([self.warehouse.rstrip("/"), *ident.namespace, ident.name])

    def table_exists(self, identifier: str) -> bool:
        status, reply = self._ask("GET", self._table_path(TableIdentifier.parse(identifier)))
        if status in (200, 404):
            return status == 200
        raise StorageError(
            f"catalog {self.name}: looking up {identifier} answered {status} ({self._error(reply)})"
        )

    def load_table(self, identifier: str) -> LoadedTable:
        path = self._table_path(TableIdentifier.parse(identifier))
        status, reply = self._ask("GET", path, headers=_DELEGATION)
        if status == 404:
            raise NotATableError(
                f"table {identifier} not found in catalog {self.name} ({self.uri}): check the name"
            )
        if status != 200 or not isinstance(reply, dict):
            raise StorageError(
                f"catalog {self.name}: loading {identifier} answered {status} ({self._error(reply)})"
            )
        return self._loaded(identifier, reply)

    def _pages(self, path: str, key: str) -> list[Any]:
        """Every item of a listing, following the spec's page tokens."""
        items: list[Any] = []
        token: str | None = None
        while True:
            query = f"{path}?pageToken={urllib.parse.quote(token)}" if token else path
            status, reply = self._ask("GET", query)
            if status != 200 or not isinstance(reply, dict):
                raise StorageError(
                    f"catalog {self.name}: GET {path} answered {status} ({self._error(reply)})"
                )
            items.extend(reply.get(key) or [])
            token = reply.get("next-page-token")
            if not token:
                return items

    def list_namespaces(self) -> list[str]:
        return sorted(".".join(ns) for ns in self._pages("namespaces", "namespaces"))

    def list_tables(self, namespace: str) -> list[str]:
        path = f"{self._namespace_path(tuple(namespace.split('.')))}/tables"
        return sorted(".".join([*i["namespace"], i["name"]]) for i in self._pages(path, "identifiers"))

    def ensure_namespace(self, namespace: str) -> None:
        # Asked first: a principal may use a namespace it has no right to create.
        status, reply = self._ask("GET", self._namespace_path(tuple(namespace.split("."))))
        if status == 200:
            return
        status, reply = self._ask("POST", "namespaces", {"namespace": namespace.split("."), "properties": {}})
        if status not in (200, 409):
            raise StorageError(
                f"catalog {self.name}: creating namespace {namespace} answered {status} "
                f"({self._error(reply)})"
            )

    def new_table_location(self, identifier: str) -> str:
        """Under the warehouse when it is a location; otherwise where the server would put the
        table, asked with a staged create (which creates nothing)."""
        location = self.default_table_location(identifier)
        if location:
            return location
        ident = TableIdentifier.parse(identifier)
        self.ensure_namespace(".".join(ident.namespace))
        body = {"name": ident.name, "schema": {"type": "struct", "fields": []}, "stage-create": True}
        path = f"{self._namespace_path(ident.namespace)}/tables"
        status, reply = self._ask("POST", path, body, _DELEGATION)
        if status == 409:
            raise ConfigError(f"table {identifier} already exists in catalog {self.name}")
        try:
            if status != 200:
                raise ValueError(status)
            location = str(reply["metadata"]["location"])
        except (ValueError, KeyError, TypeError):
            raise StorageError(
                f"catalog {self.name}: staging {identifier} answered {status} ({self._error(reply)})"
            ) from None
        vended = self._vended(reply, location, identifier)
        if vended:  # the files staged before the create go there with these
            configure_storage(with_vended(storage_subset(self.properties), vended))
        return location

    def create_table(self, identifier: str, metadata: TableMetadata) -> LoadedTable:
        ident = TableIdentifier.parse(identifier)
        self.ensure_namespace(".".join(ident.namespace))
        if metadata.snapshots:
            return self._create_with_history(ident, identifier, metadata)
        body: dict[str, Any] = {
            "name": ident.name,
            "schema": schema_to_json(metadata.schema()),
            "partition-spec": partition_spec_to_json(metadata.spec()),
            "write-order": sort_order_to_json(metadata.sort_order()),
            "properties": {**metadata.properties, "format-version": str(metadata.format_version)},
        }
        if metadata.location:
            body["location"] = metadata.location
        status, reply = self._ask(
            "POST", f"{self._namespace_path(ident.namespace)}/tables", body, _DELEGATION
        )
        if status == 409:
            raise ConfigError(f"table {identifier} already exists in catalog {self.name}")
        if status != 200 or not isinstance(reply, dict):
            raise StorageError(
                f"catalog {self.name}: creating {identifier} answered {status} ({self._error(reply)})"
            )
        created = self._loaded(identifier, reply)
        try:
            return self._restore_ids(created, metadata)
        except (CommitFailed, ConfigError, UnsupportedFeatureError):
            # Certainly not restored: the empty table with the server's ids must not stay behind.
            self._ask("DELETE", self._table_path(ident))
            raise

    def _post_change(
        self,
        ident: TableIdentifier,
        change: TableChange,
        *,
        unknown: str,
        conflict: TablekeeperError,
        what: str,
    ) -> tuple[str, TableMetadata]:
        """Send one change; the metadata location and metadata the server answers with. A 409 is
        ``conflict``; statuses that say nothing was applied are refusals; every other outcome (no
        answer, any other status, an unreadable 200) is an unknown state (``unknown`` says so)."""
        faults.kill_point("commit.metadata-written")
        try:
            status, reply = self._call(
                "POST", self._table_path(ident), change.request(ident.namespace, ident.name)
            )
        except _NoAnswer as err:
            raise CommitStateUnknown(unknown.format(f"no answer: {redact(str(err))}")) from None
        if status == 409:
            raise conflict
        if status in _NOT_APPLIED:
            raise ConfigError(f"catalog {self.name} refused {what}: {status} {self._error(reply)}")
        if status != 200:
            raise CommitStateUnknown(unknown.format(f"answered {status} {self._error(reply)}"))
        try:
            location = str(reply["metadata-location"])
            return location, parse_table_metadata(json.dumps(reply["metadata"]), source=location)
        except Exception as err:  # any unreadable 200: the change may well be live
            raise CommitStateUnknown(unknown.format(f"unreadable answer: {type(err).__name__}")) from None

    def _create_with_history(
        self, ident: TableIdentifier, identifier: str, metadata: TableMetadata
    ) -> LoadedTable:
        """A create transaction: the whole metadata, snapshots and all, in one request that the
        server applies to empty metadata (so our ids stay as they are)."""
        change = creation_change(metadata)
        unknown = (
            f"catalog {self.name}: the outcome of creating {identifier} is unknown ({{}}); check whether "
            "it exists before cleaning anything"
        )
        location, got = self._post_change(
            ident,
            change,
            unknown=unknown,
            conflict=ConfigError(f"table {identifier} already exists in catalog {self.name}"),
            what=f"the creation of {identifier}",
        )
        faults.kill_point("commit.swapped")
        differs = _created_differently(metadata, got)
        if differs:
            # Fresh and unusable: readers would resolve manifests by the wrong ids. Drop it again.
            status, _ = self._ask("DELETE", self._table_path(ident))
            if status not in (200, 204, 404):
                raise CommitStateUnknown(
                    unknown.format(f"created with other {differs}, and dropping it answered {status}")
                )
            raise UnsupportedFeatureError(
                f"catalog {self.name} created {identifier} with other {differs} than sent, so it was "
                "dropped again: tablekeeper cannot convert into that catalog"
            )
        # A commit answer carries no storage settings: those of the staged create still hold.
        return LoadedTable(identifier, location, got, FileIO.for_location(got.location))

    def _restore_ids(self, created: LoadedTable, wanted: TableMetadata) -> LoadedTable:
        """Give a just-created table our field ids back.

        Servers assign fresh column ids on create, but the data files a conversion registers carry
        the source's ids (Delta column mapping), which Iceberg readers resolve columns by. So the
        wanted schema, spec and sort order are added as new ones and made current wherever they
        differ: the table is still empty, and the server's renumbered versions are never used.
        """
        meta = created.metadata
        desired = meta
        if meta.schema().fields != wanted.schema().fields:
            schema_id = max(s.schema_id for s in meta.schemas) + 1
            desired = replace(
                desired,
                schemas=(*meta.schemas, replace(wanted.schema(), schema_id=schema_id)),
                current_schema_id=schema_id,
                last_column_id=max(meta.last_column_id, wanted.last_column_id),
            )
        if meta.spec().fields != wanted.spec().fields:
            spec_id = max(s.spec_id for s in meta.partition_specs) + 1
            desired = replace(
                desired,
                partition_specs=(*meta.partition_specs, replace(wanted.spec(), spec_id=spec_id)),
                default_spec_id=spec_id,
                last_partition_id=max(meta.last_partition_id, wanted.last_partition_id),
            )
        if meta.sort_order().fields != wanted.sort_order().fields:
            order_id = max(o.order_id for o in meta.sort_orders) + 1
            desired = replace(
                desired,
                sort_orders=(*meta.sort_orders, replace(wanted.sort_order(), order_id=order_id)),
                default_sort_order_id=order_id,
            )
        if desired is meta:
            return created
        restored = self.commit(created, desired)
        if restored.metadata.schema().fields != wanted.schema().fields:
            raise UnsupportedFeatureError(
                f"catalog {self.name} renumbered the columns of {created.identifier} and kept them "
                "renumbered: tablekeeper cannot write that table there"
            )
        return restored

    def commit(self, base: LoadedTable, new_metadata: TableMetadata) -> LoadedTable:
        ident = TableIdentifier.parse(base.identifier)
        change = table_change(base.metadata, new_metadata)
        if not change.updates:
            return base
        unknown = (
            f"catalog {self.name}: the outcome of the commit to {base.identifier} is unknown "
            "({}); check the table's current snapshot before cleaning anything"
        )
        location, meta = self._post_change(
            ident,
            change,
            unknown=unknown,
            conflict=CommitFailed(f"{base.identifier} was changed by another writer since it was loaded"),
            what=f"the commit of {base.identifier}",
        )
        if location == base.metadata_location or meta.current_snapshot_id != new_metadata.current_snapshot_id:
            raise CommitStateUnknown(unknown.format("the answer does not show the change"))
        faults.kill_point("commit.swapped")
        log.info("committed %s -> %s", base.identifier, location)
        # A commit answer carries no storage settings: the loaded table's (vended) ones still hold.
        return LoadedTable(base.identifier, location, meta, base.io)


def _open(config: CatalogConfig) -> Catalog:
    assert config.uri is not None  # the type requires one
    return RestCatalog(config.name, config.uri, config.warehouse, config.properties)


def _spark(config: CatalogConfig) -> dict[str, str]:
    assert config.uri is not None
    return {"type": "rest", "uri": config.uri}


CATALOG_TYPE = register_catalog_type(
    CatalogType("rest", _open, _spark, uri_example="https://host/api/catalog", warehouse_required=False)
)
