"""The sql catalog: Iceberg's JDBC catalog tables on sqlite, shared with Iceberg Java and PyIceberg.

``iceberg_tables(catalog_name, table_namespace, table_name, metadata_location,
previous_metadata_location[, iceberg_type])``; a commit is one UPDATE guarded by the expected
``metadata_location``, so whichever writer swaps first wins and the others see zero rows updated.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tablekeeper import faults
from tablekeeper.catalog.base import (
    Catalog,
    LoadedTable,
    TableIdentifier,
    metadata_version,
    new_metadata_location,
    read_metadata,
    write_new_metadata,
)
from tablekeeper.catalog.config import CatalogConfig
from tablekeeper.catalog.registry import CatalogType, register_catalog_type
from tablekeeper.errors import CommitFailed, CommitStateUnknown, ConfigError, NotATableError
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.io import FileIO

log = logging.getLogger(__name__)

_CREATE_TABLES = """
CREATE TABLE IF NOT EXISTS iceberg_tables (
    catalog_name VARCHAR(255) NOT NULL,
    table_namespace VARCHAR(255) NOT NULL,
    table_name VARCHAR(255) NOT NULL,
    metadata_location VARCHAR(1000),
    previous_metadata_location VARCHAR(1000),
    iceberg_type VARCHAR(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name)
)
"""
_CREATE_NAMESPACES = """
CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
    catalog_name VARCHAR(255) NOT NULL,
    namespace VARCHAR(255) NOT NULL,
    property_key VARCHAR(255),
    property_value VARCHAR(1000),
    PRIMARY KEY (catalog_name, namespace, property_key)
)
"""
# Rows PyIceberg writes have no type; Java's V1 schema marks tables 'TABLE' and views 'VIEW'.
_IS_TABLE = "(iceberg_type = 'TABLE' OR iceberg_type IS NULL)"


class SqlCatalog(Catalog):
    def __init__(self, name: str, uri: str, warehouse: str, io: FileIO | None = None) -> None:
        if not uri.startswith("sqlite:///"):
            raise ConfigError(f"catalog {name!r}: only sqlite:/// URIs are supported, got {uri!r}")
        self.name = name
        self.path = Path(uri[len("sqlite:///") :])
        self.warehouse = warehouse.rstrip("/")
        self.io = io or FileIO.for_location(warehouse)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.execute(_CREATE_TABLES)
            conn.execute(_CREATE_NAMESPACES)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(iceberg_tables)")}
            self._typed = "iceberg_type" in columns

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # A generous busy timeout: Spark's JDBC catalog and other processes share the file.
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()

    def _where(self, ident: TableIdentifier) -> tuple[str, tuple[str, str, str]]:
        clause = "catalog_name = ? AND table_namespace = ? AND table_name = ?"
        if self._typed:
            clause += f" AND {_IS_TABLE}"
        return clause, (self.name, ".".join(ident.namespace), ident.name)

    def default_table_location(self, identifier: str) -> str:
        ident = TableIdentifier.parse(identifier)
        return "/".join((self.warehouse, *ident.namespace, ident.name))

    def current_location(self, identifier: str) -> str | None:
        clause, params = self._where(TableIdentifier.parse(identifier))
        with self._connect() as conn:
            row = conn.execute(
                f"SELECT metadata_location FROM iceberg_tables WHERE {clause}", params
            ).fetchone()
        return None if row is None else str(row[0])

    def table_exists(self, identifier: str) -> bool:
        return self.current_location(identifier) is not None

    def load_table(self, identifier: str) -> LoadedTable:
        location = self.current_location(identifier)
        if location is None:
            raise NotATableError(
                f"table {identifier} not found in catalog {self.name} ({self.path}): check the name"
            )
        return LoadedTable(identifier, location, read_metadata(self.io, location), self.io)

    def list_namespaces(self) -> list[str]:
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT table_namespace FROM iceberg_tables WHERE catalog_name = ? UNION "
                "SELECT namespace FROM iceberg_namespace_properties WHERE catalog_name = ?",
                (self.name, self.name),
            ).fetchall()
        return sorted({str(r[0]) for r in rows})

    def list_tables(self, namespace: str) -> list[str]:
        clause = "catalog_name = ? AND table_namespace = ?"
        if self._typed:
            clause += f" AND {_IS_TABLE}"
        with self._connect() as conn:
            rows = conn.execute(
                f"SELECT table_name FROM iceberg_tables WHERE {clause}", (self.name, namespace)
            ).fetchall()
        return sorted(f"{namespace}.{r[0]}" for r in rows)

    def ensure_namespace(self, namespace: str) -> None:
        with self._connect() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO iceberg_namespace_properties VALUES (?, ?, 'exists', 'true')",
                (self.name, namespace),
            )

    def create_table(self, identifier: str, metadata: TableMetadata) -> LoadedTable:
        ident = TableIdentifier.parse(identifier)
        location = new_metadata_location(metadata.location, 0)
        write_new_metadata(self.io, location, metadata)
        faults.kill_point("commit.metadata-written")
        self.ensure_namespace(".".join(ident.namespace))
        columns = "catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location"
        values = [self.name, ".".join(ident.namespace), ident.name, location, None]
        if self._typed:
            columns += ", iceberg_type"
            values.append("TABLE")
        try:
            with self._connect() as conn:
                conn.execute(
                    f"INSERT INTO iceberg_tables ({columns}) VALUES ({', '.join('?' * len(values))})", values
                )
        except sqlite3.IntegrityError:
            self.io.delete(location)
            raise ConfigError(f"table {identifier} already exists in catalog {self.name}") from None
        except sqlite3.OperationalError as err:
            # sqlite rolls a failed statement back: no table, the metadata file is unused.
            self.io.delete(location)
            raise CommitFailed(f"catalog {self.name} busy ({err}); nothing created") from err
        except sqlite3.DatabaseError as err:
            raise CommitStateUnknown(
                f"catalog {self.name} failed while creating {identifier} ({err}); check whether it exists "
                "before cleaning anything"
            ) from err
        faults.kill_point("commit.swapped")
        return LoadedTable(identifier, location, metadata, self.io)

    def commit(self, base: LoadedTable, new_metadata: TableMetadata) -> LoadedTable:
        ident = TableIdentifier.parse(base.identifier)
        version = (metadata_version(base.metadata_location) or 0) + 1
        gzip_codec = new_metadata.properties.get("write.metadata.compression-codec", "none").lower() == "gzip"
        location = new_metadata_location(new_metadata.location, version, gzip_codec)
        write_new_metadata(self.io, location, new_metadata)
        faults.kill_point("commit.metadata-written")
        clause, params = self._where(ident)
        try:
            with self._connect() as conn:
                cursor = conn.execute(
                    "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? "
                    f"WHERE {clause} AND metadata_location = ?",
                    (location, base.metadata_location, *params, base.metadata_location),
                )
                updated = cursor.rowcount
        except sqlite3.OperationalError as err:
            # sqlite rolls a failed statement back, so nothing changed; the new file is unused.
            self.io.delete(location)
            raise CommitFailed(f"catalog {self.name} busy ({err}); retrying") from err
        except sqlite3.DatabaseError as err:
            raise CommitStateUnknown(
                f"catalog {self.name} failed during the commit of {base.identifier} ({err}); "
                f"check whether {location} is current before cleaning anything"
            ) from err
        if updated != 1:
            self.io.delete(location)
            raise CommitFailed(f"{base.identifier} was changed by another writer since it was loaded")
        faults.kill_point("commit.swapped")
        log.info("committed %s -> %s", base.identifier, location)
        return LoadedTable(base.identifier, location, new_metadata, self.io)


def _open(config: CatalogConfig) -> Catalog:
    assert config.uri is not None  # the type requires one
    return SqlCatalog(config.name, config.uri, config.warehouse)


def _spark(config: CatalogConfig) -> dict[str, str]:
    # V1 is the schema that also records views; Iceberg Java reads rows PyIceberg wrote either way.
    return {"type": "jdbc", "uri": jdbc_uri(config), "jdbc.schema-version": "V1"}


def jdbc_uri(catalog: CatalogConfig) -> str:
    """The JDBC URL Iceberg Java reaches the same database with: ``jdbc-uri`` if set, else the
    sqlite file's."""
    explicit = catalog.properties.get("jdbc-uri")
    if explicit:
        return explicit
    path = catalog.sqlite_path
    if path is None:
        raise ConfigError(
            f"catalog {catalog.name!r}: only sqlite:/// URIs map to JDBC automatically; set 'jdbc-uri'"
        )
    return f"jdbc:sqlite:{path}"


CATALOG_TYPE = register_catalog_type(CatalogType("sql", _open, _spark, uri_example="sqlite:///path"))
