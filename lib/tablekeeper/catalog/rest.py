"""The Iceberg REST catalog: the production path on object stores, where rename is not atomic.

Loading reads the server's current metadata; committing sends the transition from the loaded
metadata to the new one as requirements plus updates (``iceberg.table_changes``), so the server
checks and applies it atomically. A 409 means another writer won (retry on a fresh load); a 5xx,
a timeout or a broken connection during a commit means the outcome is unknown and nothing may be
deleted. Tokens and client secrets never reach logs, results or error messages.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tablekeeper.catalog.base import Catalog, LoadedTable, TableIdentifier
from tablekeeper.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConfigError,
    NotATableError,
    StorageError,
    UnsupportedFeatureError,
)
from tablekeeper.iceberg.metadata import TableMetadata, parse_table_metadata
from tablekeeper.iceberg.partitioning import partition_spec_to_json, sort_order_to_json
from tablekeeper.iceberg.table_changes import table_change
from tablekeeper.iceberg.types import schema_to_json
from tablekeeper.io import FileIO
from tablekeeper.io.storage import configure_storage, storage_subset
from tablekeeper.redact import redact, register_secret, register_secrets

log = logging.getLogger(__name__)

_TIMEOUT_S = 60.0


class RestCatalog(Catalog):
    def __init__(
        self, name: str, uri: str, warehouse: str, properties: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.uri = uri.rstrip("/")
        self.warehouse = warehouse
        self.properties = dict(properties or {})
        self._lock = threading.Lock()
        self._token: str | None = self.properties.get("token")
        self._prefix: str | None = None
        self._separator = "\x1f"
        register_secrets(self.properties)

    # -- HTTP ------------------------------------------------------------------------------------

    def _auth(self) -> dict[str, str]:
        credential = self.properties.get("credential")
        if self._token is None and credential:
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
            status, reply = self._send(
                "POST", url, body, {"Content-Type": "application/x-www-form-urlencoded"}
            )
            if status != 200 or not isinstance(reply, dict) or "access_token" not in reply:
                raise ConfigError(
                    f"catalog {self.name}: the OAuth2 token request to {url} failed ({status}): "
                    "check its credential"
                )
            self._token = str(reply["access_token"])
            register_secret(self._token)
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def _send(self, method: str, url: str, body: bytes | None, headers: Mapping[str, str]) -> tuple[int, Any]:
        request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
                data = response.read()
                return response.status, json.loads(data) if data else None
        except urllib.error.HTTPError as err:
            data = err.read()
            try:
                return err.code, json.loads(data) if data else None
            except ValueError:
                return err.code, None

    def _call(self, method: str, path: str, payload: Any = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json", **self._auth()}
        body = None if payload is None else json.dumps(payload).encode()
        try:
            return self._send(method, f"{self.uri}/v1/{self._path(path)}", body, headers)
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise StorageError(
                f"catalog {self.name}: {self.uri} did not answer ({redact(str(reason))}): "
                "check the catalog uri"
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
                status, reply = self._call("GET", query)
                if status != 200 or not isinstance(reply, dict):
                    raise ConfigError(f"catalog {self.name}: GET {self.uri}/v1/config answered {status}")
                merged = {**reply.get("defaults", {}), **self.properties, **reply.get("overrides", {})}
                self._prefix = str(merged.get("prefix", "")).strip("/")
                # Multi-level namespaces join with the server's separator (unit separator by default).
                self._separator = urllib.parse.unquote(str(merged.get("namespace-separator", "%1F")))
            return self._prefix

    @staticmethod
    def _error(reply: Any) -> str:
        err = reply.get("error", {}) if isinstance(reply, dict) else {}
        lines = str(err.get("message") or "").splitlines()
        return f"{err.get('type', 'error')}: {lines[0] if lines else ''}"

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
        vended = storage_subset({str(k): str(v) for k, v in (reply.get("config") or {}).items()})
        register_secrets(vended)
        io_props = {**storage_subset(self.properties), **vended}
        if vended:
            log.info("catalog %s vended storage settings for %s", self.name, identifier)
            configure_storage(io_props)
        return LoadedTable(identifier, location, meta, FileIO.for_location(meta.location, io_props))

    # -- Catalog ---------------------------------------------------------------------------------

    def default_table_location(self, identifier: str) -> str:
        ident = TableIdentifier.parse(identifier)
        return "/".join([self.warehouse.rstrip("/"), *ident.namespace, ident.name])

    def table_exists(self, identifier: str) -> bool:
        status, _ = self._call("GET", self._table_path(TableIdentifier.parse(identifier)))
        return status == 200

    def load_table(self, identifier: str) -> LoadedTable:
        status, reply = self._call("GET", self._table_path(TableIdentifier.parse(identifier)))
        if status == 404:
            raise NotATableError(
                f"table {identifier} not found in catalog {self.name} ({self.uri}): check the name"
            )
        if status != 200:
            raise StorageError(
                f"catalog {self.name}: loading {identifier} answered {status} ({self._error(reply)})"
            )
        return self._loaded(identifier, reply)

    def ensure_namespace(self, namespace: str) -> None:
        status, reply = self._call(
            "POST", "namespaces", {"namespace": namespace.split("."), "properties": {}}
        )
        if status not in (200, 409):
            raise StorageError(
                f"catalog {self.name}: creating namespace {namespace} answered {status} "
                f"({self._error(reply)})"
            )

    def create_table(self, identifier: str, metadata: TableMetadata) -> LoadedTable:
        ident = TableIdentifier.parse(identifier)
        self.ensure_namespace(".".join(ident.namespace))
        body = {
            "name": ident.name,
            "location": metadata.location,
            "schema": schema_to_json(metadata.schema()),
            "partition-spec": partition_spec_to_json(metadata.spec()),
            "write-order": sort_order_to_json(metadata.sort_order()),
            "properties": {**metadata.properties, "format-version": str(metadata.format_version)},
        }
        status, reply = self._call("POST", f"{self._namespace_path(ident.namespace)}/tables", body)
        if status == 409:
            raise ConfigError(f"table {identifier} already exists in catalog {self.name}")
        if status != 200:
            raise StorageError(
                f"catalog {self.name}: creating {identifier} answered {status} ({self._error(reply)})"
            )
        created = self._loaded(identifier, reply)
        return self._restore_ids(created, metadata)

    def _restore_ids(self, created: LoadedTable, wanted: TableMetadata) -> LoadedTable:
        """Give a just-created table our field ids back.

        Servers assign fresh column ids on create, but the data files a conversion registers carry
        the source's ids (Delta column mapping), which Iceberg readers resolve columns by. So the
        wanted schema, spec and sort order are added as new ones and made current: the table is
        still empty, and the server's renumbered versions are never used.
        """
        meta = created.metadata
        same_schema = meta.schema().fields == wanted.schema().fields
        same_spec = meta.spec().fields == wanted.spec().fields
        same_order = meta.sort_order().fields == wanted.sort_order().fields
        if same_schema and same_spec and same_order:
            return created
        schema_id = max(s.schema_id for s in meta.schemas) + 1
        spec_id = max(s.spec_id for s in meta.partition_specs) + 1
        order_id = max(o.order_id for o in meta.sort_orders) + 1
        desired = replace(
            meta,
            schemas=(*meta.schemas, replace(wanted.schema(), schema_id=schema_id)),
            current_schema_id=schema_id,
            last_column_id=max(meta.last_column_id, wanted.last_column_id),
            partition_specs=(*meta.partition_specs, replace(wanted.spec(), spec_id=spec_id)),
            default_spec_id=spec_id,
            last_partition_id=max(meta.last_partition_id, wanted.last_partition_id),
        )
        if not same_order:
            desired = replace(
                desired,
                sort_orders=(*meta.sort_orders, replace(wanted.sort_order(), order_id=order_id)),
                default_sort_order_id=order_id,
            )
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
        try:
            status, reply = self._call(
                "POST", self._table_path(ident), change.request(ident.namespace, ident.name)
            )
        except StorageError as err:
            raise CommitStateUnknown(
                f"catalog {self.name}: the commit of {base.identifier} got no answer ({err.message}); "
                "check the table's current snapshot before cleaning anything"
            ) from None
        if status == 200:
            log.info("committed %s -> %s", base.identifier, reply.get("metadata-location"))
            return self._loaded(base.identifier, reply)
        if status == 409:
            raise CommitFailed(f"{base.identifier} was changed by another writer since it was loaded")
        if status >= 500 or status in (408, 429):
            raise CommitStateUnknown(
                f"catalog {self.name}: the commit of {base.identifier} answered {status} "
                f"({self._error(reply)}); check the table's current snapshot before cleaning anything"
            )
        raise ConfigError(
            f"catalog {self.name} refused the commit of {base.identifier}: {status} {self._error(reply)}"
        )
