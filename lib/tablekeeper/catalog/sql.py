"""The sql catalog: Iceberg's JDBC catalog tables, shared with Iceberg Java and PyIceberg, in a
sqlite file, PostgreSQL or MySQL/MariaDB (``sql_db`` holds what differs between them).

``iceberg_tables(catalog_name, table_namespace, table_name, metadata_location,
previous_metadata_location[, iceberg_type])``; a commit is one UPDATE guarded by the expected
``metadata_location``, so whichever writer swaps first wins and the others see zero rows updated.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from tablekeeper import faults
from tablekeeper.catalog.base import (
    Catalog,
    LoadedTable,
    TableIdentifier,
    landed,
    read_metadata,
    write_next_metadata,
)
from tablekeeper.catalog.config import CatalogConfig
from tablekeeper.catalog.registry import CatalogType, register_catalog_type
from tablekeeper.catalog.sql_db import SETTLE_MS, SUPPORTED, Database, Outcome
from tablekeeper.errors import CommitFailed, CommitStateUnknown, ConfigError, NotATableError, StorageError
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.io import FileIO
from tablekeeper.redact import redact

log = logging.getLogger(__name__)

# Iceberg Java's JdbcUtil schema, its V1 ``iceberg_type`` column included (Java adds that column to
# a V0 table it finds; PyIceberg's rows leave it NULL). The same DDL serves all three databases.
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
    def __init__(
        self,
        name: str,
        uri: str,
        warehouse: str,
        io: FileIO | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.db = Database.parse(name, uri, dict(properties or {}))
        if self.db.kind != "sqlite":  # a server may finish a dead client's statement (sql_db)
            self.commit_settle_ms = SETTLE_MS
        self.warehouse = warehouse.rstrip("/")
        self.io = io or FileIO.for_location(warehouse)
        if self.db.path is not None:
            self.db.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            for create in (_CREATE_TABLES, _CREATE_NAMESPACES):
                try:
                    self._run(conn, create)
                except self.db.errors() as err:
                    # Two processes creating the tables at once: PostgreSQL's IF NOT EXISTS can
                    # still collide on its own system rows; the other process made the table.
                    if self.db.outcome(err) is not Outcome.DUPLICATE:
                        raise StorageError(
                            f"catalog {name}: {self.shown} could not create Iceberg's catalog tables "
                            f"({redact(str(err))}): grant CREATE or create them as Iceberg's JdbcCatalog does"
                        ) from None
            self._typed = "iceberg_type" in self.db.columns(conn, "iceberg_tables")

    @property
    def shown(self) -> str:
        """Where the catalog lives, fit to print."""
        return str(self.db.path) if self.db.path is not None else self.db.shown

    @contextmanager
    def _connect(self) -> Iterator[Any]:
        conn = self.db.connect(self.name)
        try:
            yield conn
        finally:
            try:
                conn.close()
            except self.db.errors():
                pass  # a broken connection is closed already

    def _run(self, conn: Any, statement: str, params: tuple[Any, ...] | list[Any] = ()) -> Any:
        cursor = conn.cursor()
        cursor.execute(self.db.sql(statement), tuple(params))
        return cursor

    def _query(self, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """The rows of a read (or an idempotent write); a database error is a one-line StorageError."""
        try:
            with self._connect() as conn:
                cursor = self._run(conn, statement, params)
                return list(cursor.fetchall()) if cursor.description else []
        except self.db.errors() as err:
            raise StorageError(f"catalog {self.name}: {self.shown} failed ({redact(str(err))})") from None

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
        rows = self._query(f"SELECT metadata_location FROM iceberg_tables WHERE {clause}", params)
        return str(rows[0][0]) if rows else None

    def table_exists(self, identifier: str) -> bool:
        return self.current_location(identifier) is not None

    def load_table(self, identifier: str) -> LoadedTable:
        location = self.current_location(identifier)
        if location is None:
            raise NotATableError(
                f"table {identifier} not found in catalog {self.name} ({self.shown}): check the name"
            )
        return LoadedTable(identifier, location, read_metadata(self.io, location), self.io)

    def list_namespaces(self) -> list[str]:
        rows = self._query(
            "SELECT table_namespace FROM iceberg_tables WHERE catalog_name = ? UNION "
            "SELECT namespace FROM iceberg_namespace_properties WHERE catalog_name = ?",
            (self.name, self.name),
        )
        return sorted({str(r[0]) for r in rows})

    def list_tables(self, namespace: str) -> list[str]:
        clause = "catalog_name = ? AND table_namespace = ?"
        if self._typed:
            clause += f" AND {_IS_TABLE}"
        rows = self._query(f"SELECT table_name FROM iceberg_tables WHERE {clause}", (self.name, namespace))
        return sorted(f"{namespace}.{r[0]}" for r in rows)

    def ensure_namespace(self, namespace: str) -> None:
        statement = self.db.insert_ignoring_present("iceberg_namespace_properties", "?, ?, 'exists', 'true'")
        self._query(statement, (self.name, namespace))

    def create_table(self, identifier: str, metadata: TableMetadata) -> LoadedTable:
        ident = TableIdentifier.parse(identifier)
        location = write_next_metadata(self.io, metadata, None)
        faults.kill_point("commit.metadata-written")
        try:
            self.ensure_namespace(".".join(ident.namespace))
        except StorageError:
            self.io.delete(location)  # no connection: nothing was created
            raise
        columns = "catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location"
        values = [self.name, ".".join(ident.namespace), ident.name, location, None]
        if self._typed:
            columns += ", iceberg_type"
            values.append("TABLE")
        insert = f"INSERT INTO iceberg_tables ({columns}) VALUES ({', '.join('?' * len(values))})"
        try:
            with self._connect() as conn:
                try:
                    self._run(conn, insert, values)
                except self.db.errors() as err:
                    outcome = self.db.outcome(err)
                    if outcome is Outcome.DUPLICATE:
                        self.io.delete(location)
                        raise ConfigError(
                            f"table {identifier} already exists in catalog {self.name}"
                        ) from None
                    if outcome is Outcome.REFUSED:
                        # The statement was rolled back: no table, the metadata file is unused.
                        self.io.delete(location)
                        raise CommitFailed(
                            f"catalog {self.name} refused the insert ({redact(str(err))}); nothing created"
                        ) from None
                    raise
        except StorageError:
            self.io.delete(location)  # no connection: nothing was sent
            raise
        except self.db.errors() as err:
            held = self._holds(ident, location)
            if held is True:
                faults.kill_point("commit.swapped")
                return LoadedTable(identifier, location, metadata, self.io)
            if held is False:  # another writer's table is there: ours can never be
                self.io.delete(location)
                raise ConfigError(f"table {identifier} already exists in catalog {self.name}") from None
            raise CommitStateUnknown(
                f"catalog {self.name} failed while creating {identifier} ({redact(str(err))}); check whether "
                "it exists before cleaning anything"
            ) from None
        faults.kill_point("commit.swapped")
        return LoadedTable(identifier, location, metadata, self.io)

    def commit(self, base: LoadedTable, new_metadata: TableMetadata) -> LoadedTable:
        ident = TableIdentifier.parse(base.identifier)
        location = write_next_metadata(self.io, new_metadata, base.metadata_location)
        faults.kill_point("commit.metadata-written")
        clause, params = self._where(ident)
        swap = (
            "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? "
            f"WHERE {clause} AND metadata_location = ?"
        )
        try:
            with self._connect() as conn:
                try:
                    updated = self._run(
                        conn, swap, (location, base.metadata_location, *params, base.metadata_location)
                    ).rowcount
                except self.db.errors() as err:
                    if self.db.outcome(err) is not Outcome.REFUSED:
                        raise
                    # The server rolled the statement back (busy, lock timeout, deadlock): nothing
                    # changed, the new file is unused.
                    self.io.delete(location)
                    raise CommitFailed(f"catalog {self.name} busy ({redact(str(err))}); retrying") from None
        except StorageError:
            self.io.delete(location)  # no connection: the swap was never sent
            raise
        except self.db.errors() as err:
            updated = self._settle(base, location, err)
        if updated != 1:
            self.io.delete(location)
            raise CommitFailed(f"{base.identifier} was changed by another writer since it was loaded")
        faults.kill_point("commit.swapped")
        log.info("committed %s -> %s", base.identifier, location)
        return LoadedTable(base.identifier, location, new_metadata, self.io)

    def _settle(self, base: LoadedTable, location: str, err: BaseException) -> int:
        """The swap's answer was lost: read the row again. Ours there, or named in the log of the
        metadata there (another writer committed on top of ours), means it was applied (1); a third
        writer's state without ours means it never can be (0: its WHERE no longer matches); the old
        one, or no answer, leaves it unknown (the server may still be applying it)."""
        ident = TableIdentifier.parse(base.identifier)
        current = self._holds(ident, location, base.metadata_location)
        if current is True:
            log.info("catalog %s: the lost answer was a success: %s is applied", self.name, location)
            return 1
        if current is False:
            return 0
        raise CommitStateUnknown(
            f"catalog {self.name} failed during the commit of {base.identifier} ({redact(str(err))}); "
            f"check whether {location} is current before cleaning anything"
        ) from None

    def _holds(self, ident: TableIdentifier, location: str, old: str | None = None) -> bool | None:
        """Whether ``location`` landed (True: the row holds it, or a later metadata file's log
        names it), did not (False: another writer's state without it), or cannot be told (None:
        unreachable, still ``old``, or no row)."""
        try:
            current = self.current_location(str(ident))
        except StorageError:
            return None
        return landed(self.io, current, location, old)


def _open(config: CatalogConfig) -> Catalog:
    assert config.uri is not None  # the type requires one
    return SqlCatalog(config.name, config.uri, config.warehouse, properties=config.properties)


def _spark(config: CatalogConfig) -> dict[str, str]:
    # V1 is the schema that also records views; Iceberg Java reads rows PyIceberg wrote either way.
    return {**jdbc_settings(config), "type": "jdbc", "jdbc.schema-version": "V1"}


def jdbc_settings(catalog: CatalogConfig) -> dict[str, str]:
    """How Iceberg Java reaches the same database: its JDBC ``uri`` (``jdbc-uri`` if set) and, for
    a server, ``jdbc.user`` / ``jdbc.password`` from the catalog's uri."""
    assert catalog.uri is not None  # the type requires one
    settings = Database.parse(catalog.name, catalog.uri, dict(catalog.properties)).jdbc()
    explicit = catalog.properties.get("jdbc-uri")
    if explicit:
        settings["uri"] = explicit
    return settings


CATALOG_TYPE = register_catalog_type(CatalogType("sql", _open, _spark, uri_example=SUPPORTED))
