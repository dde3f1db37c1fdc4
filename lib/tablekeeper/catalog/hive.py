"""The hive catalog: Iceberg tables in a Hive Metastore, shared with Iceberg Java's HiveCatalog.

A table is an EXTERNAL_TABLE whose parameters hold ``table_type=ICEBERG`` and its current
``metadata_location``. A commit follows Iceberg Java's HiveTableOperations so that it excludes a
concurrent Iceberg Java commit: take the metastore's EXCLUSIVE lock on the table, read the table
again under it, check that its ``metadata_location`` is still the base's (else CommitFailed,
nothing changed), then alter the table (the Table struct as the server sent it, only the fields a
commit owns changed) and unlock. The alter also carries the expected-parameter context with which
Hive 4 metastores check ``metadata_location`` themselves. A transport failure after the alter was
sent is settled by reading the table once: our location there is a success, anything else is an
unknown state, and nothing is cleaned up.

Namespaces are metastore databases (one level). The connection is plain Thrift (no SASL or
Kerberos: a secured metastore is refused at its first call).
"""

from __future__ import annotations

import getpass
import logging
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar
from urllib.parse import urlsplit

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
from tablekeeper.catalog.hive_metastore import LockState, MetastoreClient, MetastoreError, connected
from tablekeeper.catalog.hive_tables import (
    DO_NOT_UPDATE_STATS,
    EXPECTED_KEY,
    EXPECTED_VALUE,
    METADATA_LOCATION,
    committed_table,
    delta_location,
    is_iceberg,
    metadata_location,
    new_table,
    parameters,
)
from tablekeeper.catalog.hive_thrift import ApplicationError, ThriftProtocolError, TransportError, TStruct
from tablekeeper.catalog.registry import CatalogType, register_catalog_type
from tablekeeper.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConfigError,
    NotATableError,
    StorageError,
)
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.io import FileIO, location_to_path
from tablekeeper.redact import redact

log = logging.getLogger(__name__)
_T = TypeVar("_T")
# Every way a metastore call can fail.
_CALL_ERRORS = (TransportError, ApplicationError, MetastoreError, ThriftProtocolError)

URI_EXAMPLE = "thrift://host:9083"
_DEFAULT_PORT = 9083
# A metastore answers in milliseconds; a call that takes this long has a stuck server behind it.
_TIMEOUT_S = 120.0
# Iceberg Java's defaults for waiting on the table lock (iceberg.hive.lock-*).
_LOCK_TIMEOUT_MS = 3 * 60 * 1000
_LOCK_MIN_WAIT_S = 0.05
_LOCK_MAX_WAIT_S = 5.0
LOCK_TIMEOUT_PROPERTY = "lock-timeout-ms"
# What the metastore answers when the expected-parameter check of an alter fails (Hive 4).
_MODIFIED = "The table has been modified"
# Hive 4 on Derby cannot run the expected-parameter check (it compares CLOB values): the one
# failure after which the plain alter, made safe by the lock, is used instead.
_CANNOT_COMPARE = "Comparisons between 'CLOB"


def parse_uris(catalog: str, uri: str) -> list[tuple[str, int]]:
    """``thrift://host:port[,thrift://host2:port2]`` (Iceberg's and Hive's list form) -> addresses."""
    out = []
    for item in uri.split(","):
        parts = urlsplit(item.strip())
        try:
            port = parts.port or _DEFAULT_PORT
        except ValueError:
            port = -1
        if parts.scheme != "thrift" or not parts.hostname or port <= 0 or parts.path.strip("/"):
            shown = redact(item.strip())
            raise ConfigError(
                f"catalog {catalog!r}: uri {shown!r} is not a metastore address: use {URI_EXAMPLE}"
            )
        out.append((parts.hostname, port))
    return out


def _said(err: BaseException) -> str:
    """An error's first line, secrets masked: a metastore's messages can carry a stack trace."""
    lines = str(err).strip().splitlines()
    return redact(lines[0] if lines else type(err).__name__)


def _store_of(location: str) -> tuple[str, str]:
    scheme, authority, _ = location_to_path(location)
    return scheme, authority


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return "tablekeeper"


class HiveCatalog(Catalog):
    # A commit whose sender died may still be applied while the metastore finishes its request.
    commit_settle_ms = int(4 * _TIMEOUT_S * 1000)

    def __init__(
        self, name: str, uri: str, warehouse: str, properties: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.uri = uri
        self.uris = parse_uris(name, uri)
        self.warehouse = warehouse.rstrip("/")
        self.properties = dict(properties or {})
        # False once the metastore failed to run the expected-parameter check of an alter.
        self._server_checks = True
        self.io = FileIO.for_location(warehouse) if warehouse else None
        try:
            self.lock_timeout_s = int(self.properties.get(LOCK_TIMEOUT_PROPERTY, _LOCK_TIMEOUT_MS)) / 1000
        except ValueError:
            raise ConfigError(
                f"catalog {name!r}: {LOCK_TIMEOUT_PROPERTY} must be a number of milliseconds"
            ) from None

    # -- connection ------------------------------------------------------------------------------

    @contextmanager
    def _client(self) -> Iterator[MetastoreClient]:
        with connected(self.uris, _TIMEOUT_S) as client:
            yield client

    def _failed(self, what: str, err: BaseException) -> StorageError:
        if isinstance(err, TransportError) and not err.sent:
            return StorageError(
                f"catalog {self.name}: the metastore at {redact(self.uri)} did not answer "
                f"({_said(err)}): check the catalog uri and that the metastore is up"
            )
        return StorageError(f"catalog {self.name}: {what} failed ({_said(err)})")

    def _ask(self, what: str, run: Callable[[MetastoreClient], _T]) -> _T:
        """A call that changes nothing: any failure is a one-line StorageError."""
        try:
            with self._client() as client:
                return run(client)
        except _CALL_ERRORS as err:
            raise self._failed(what, err) from None

    @staticmethod
    def _split(identifier: str) -> tuple[str, str]:
        ident = TableIdentifier.parse(identifier)
        if len(ident.namespace) != 1:
            raise ConfigError(
                f"table {identifier}: a metastore has one level of databases: name it like db.table"
            )
        return ident.namespace[0], ident.name

    # -- reading ---------------------------------------------------------------------------------

    def _hms_table(self, identifier: str) -> TStruct | None:
        db, name = self._split(identifier)
        return self._ask(f"looking up {identifier}", lambda c: c.get_table(db, name))

    def _iceberg_location(self, identifier: str, table: TStruct | None) -> str:
        if table is None:
            raise NotATableError(f"table {identifier} not found in catalog {self.name}: check the name")
        if not is_iceberg(table):
            kind = parameters(table).get("table_type") or parameters(table).get("spark.sql.sources.provider")
            raise NotATableError(
                f"{identifier} in catalog {self.name} is not an Iceberg table"
                + (f" (it is {kind})" if kind else "")
            )
        location = metadata_location(table)
        if location is None:
            raise NotATableError(f"{identifier} in catalog {self.name} has no {METADATA_LOCATION}")
        return location

    def _io(self, location: str) -> FileIO:
        """The warehouse's FileIO for tables in its store; another for a table a database placed
        elsewhere (a database's location is its own)."""
        if self.io is not None and _store_of(location) == _store_of(self.warehouse):
            return self.io
        return FileIO.for_location(location)

    def load_table(self, identifier: str) -> LoadedTable:
        location = self._iceberg_location(identifier, self._hms_table(identifier))
        io = self._io(location)
        return LoadedTable(identifier, location, read_metadata(io, location), io)

    def table_exists(self, identifier: str) -> bool:
        table = self._hms_table(identifier)
        return table is not None and is_iceberg(table) and metadata_location(table) is not None

    def default_table_location(self, identifier: str) -> str:
        """As Iceberg Java's HiveCatalog: under the database's location when it has one, else
        ``<warehouse>/<db>.db/<table>``."""
        db, name = self._split(identifier)
        database = self._ask(f"looking up database {db}", lambda c: c.get_database(db))
        base = database.text(3) if database is not None else None
        if base:
            return f"{base.rstrip('/')}/{name}"
        return f"{self.warehouse}/{db}.db/{name}" if self.warehouse else ""

    def list_namespaces(self) -> list[str]:
        return sorted(self._ask("listing databases", lambda c: c.all_databases()))

    def _tables(self, namespace: str) -> list[TStruct]:
        def run(client: MetastoreClient) -> list[TStruct]:
            return client.tables(namespace, client.all_tables(namespace))

        return self._ask(f"listing the tables of {namespace}", run)

    def list_tables(self, namespace: str) -> list[str]:
        found = self._tables(namespace)
        return sorted(f"{namespace}.{t.text(1)}" for t in found if is_iceberg(t) and metadata_location(t))

    def delta_tables(self, namespace: str) -> list[str]:
        """Locations of the Delta tables Spark registered in the database (provider ``delta``)."""
        return sorted({loc for t in self._tables(namespace) if (loc := delta_location(t))})

    def delta_table_location(self, identifier: str) -> str:
        """Where the Delta table ``identifier`` registered in the metastore lives."""
        table = self._hms_table(identifier)
        location = delta_location(table) if table is not None else None
        if location is None:
            raise NotATableError(f"{identifier} in catalog {self.name} is not a registered Delta table")
        return location

    def ensure_namespace(self, namespace: str) -> None:
        """The database, created as Iceberg Java's HiveCatalog creates it when it is missing."""
        location = f"{self.warehouse}/{namespace}.db" if self.warehouse else None

        def run(client: MetastoreClient) -> None:
            if client.get_database(namespace) is not None:
                return
            try:
                client.create_database(namespace, location, _user())
            except MetastoreError as err:
                if err.kind != "AlreadyExistsException":  # another writer made it meanwhile
                    raise

        self._ask(f"creating database {namespace}", run)

    # -- the table lock ----------------------------------------------------------------------------

    @contextmanager
    def _locked(self, client: MetastoreClient, db: str, name: str) -> Iterator[None]:
        """Hold the metastore's EXCLUSIVE lock on the table (the one Iceberg Java takes). Waiting
        past the lock timeout, or losing the lock call's answer, is a CommitFailed: nothing was
        changed."""
        agent = f"tablekeeper-{uuid.uuid4()}"
        try:
            lock = client.lock(db, name, _user(), socket.gethostname(), agent)
        except TransportError as err:
            if not err.sent:
                raise  # no metastore reached: the caller's StorageError
            self._release_lost(db, name, agent)
            raise CommitFailed(f"catalog {self.name}: locking {db}.{name} failed ({_said(err)})") from None
        try:
            deadline = time.monotonic() + self.lock_timeout_s
            wait = _LOCK_MIN_WAIT_S
            while lock.state == LockState.WAITING and time.monotonic() < deadline:
                time.sleep(min(wait, max(0.0, deadline - time.monotonic())))
                wait = min(wait * 1.5, _LOCK_MAX_WAIT_S)
                lock = client.check_lock(lock.id)
            if lock.state != LockState.ACQUIRED:
                raise CommitFailed(
                    f"catalog {self.name}: could not lock {db}.{name} ({lock.state.name.lower()} after "
                    f"{self.lock_timeout_s:.0f} s): another writer holds it"
                )
            yield
        finally:
            self._unlock(client, db, name, lock.id)

    def _unlock(self, client: MetastoreClient, db: str, name: str, lock_id: int) -> None:
        """Release the lock, on a new connection when the old one broke. A lock left behind
        expires on the metastore's transaction timeout (hive.txn.timeout)."""
        for attempt in (client, None):
            try:
                if attempt is not None:
                    attempt.unlock(lock_id)
                else:
                    with self._client() as fresh:
                        fresh.unlock(lock_id)
                return
            except MetastoreError as err:
                if err.kind == "NoSuchLockException":
                    return  # timed out and reaped: nothing held
                log.warning("catalog %s: unlocking %s.%s failed: %s", self.name, db, name, _said(err))
                return
            except (TransportError, ApplicationError, ThriftProtocolError) as err:
                log.warning("catalog %s: unlocking %s.%s failed: %s", self.name, db, name, _said(err))

    def _release_lost(self, db: str, name: str, agent: str) -> None:
        """A lock request whose answer was lost may have been granted: find it by its agent
        string (as Iceberg Java does) and release it."""
        try:
            with self._client() as client:
                for lock_id in client.locks_of(db, name, agent):
                    client.unlock(lock_id)
        except _CALL_ERRORS as err:
            log.warning(
                "catalog %s: could not release a lost lock on %s.%s: %s",
                self.name,
                db,
                name,
                _said(err),
            )

    # -- writing ---------------------------------------------------------------------------------

    def _settled(self, identifier: str, location: str, io: FileIO, old: str | None) -> bool | None:
        """After a failed answer: did ``location`` land? True when the table points at it, or at a
        later metadata file whose log names it (the lock was released before we look, so another
        writer may have committed on top of ours); False when the table is gone, still at ``old``
        or at another writer's state without ours; None when the metastore or that file cannot
        tell us."""
        try:
            table = self._hms_table(identifier)
        except StorageError:
            return None
        current = metadata_location(table) if table is not None else None
        if current is None or current == old:
            return False
        return landed(io, current, location, old)

    def create_table(self, identifier: str, metadata: TableMetadata) -> LoadedTable:
        db, name = self._split(identifier)
        self.ensure_namespace(db)
        io = self._io(metadata.location)
        location = write_next_metadata(io, metadata, None)
        faults.kill_point("commit.metadata-written")
        exists = ConfigError(f"table {identifier} already exists in catalog {self.name}")
        sent = False
        try:
            with self._client() as client, self._locked(client, db, name):
                if client.get_table(db, name) is not None:
                    raise exists
                table = new_table(db, name, _user(), metadata, location)
                sent = True
                client.create_table(table, {DO_NOT_UPDATE_STATS: "true"})
        except (ConfigError, CommitFailed):
            io.delete(location)
            raise
        except _CALL_ERRORS as err:
            if isinstance(err, MetastoreError) and err.kind == "AlreadyExistsException":
                io.delete(location)
                raise exists from None
            self._settle(identifier, location, io, err, sent, "creating", None)
        faults.kill_point("commit.swapped")
        log.info("created %s -> %s", identifier, location)
        return LoadedTable(identifier, location, metadata, io)

    def commit(self, base: LoadedTable, new_metadata: TableMetadata) -> LoadedTable:
        db, name = self._split(base.identifier)
        location = write_next_metadata(base.io, new_metadata, base.metadata_location)
        faults.kill_point("commit.metadata-written")
        moved = CommitFailed(f"{base.identifier} was changed by another writer since it was loaded")
        sent = False
        try:
            with self._client() as client, self._locked(client, db, name):
                current = client.get_table(db, name)
                if current is None or metadata_location(current) != base.metadata_location:
                    raise moved
                changed = committed_table(
                    current, base.metadata, new_metadata, location, base.metadata_location
                )
                sent = True
                self._alter(client, db, name, changed, base.metadata_location)
        except CommitFailed:
            base.io.delete(location)
            raise
        except _CALL_ERRORS as err:
            # The server's own check of metadata_location refused it (Hive 4): nothing changed,
            # unless our commit had landed and a retried request met it.
            modified = isinstance(err, MetastoreError) and _MODIFIED in err.message and sent
            old = base.metadata_location
            if modified and self._settled(base.identifier, location, base.io, old) is False:
                base.io.delete(location)
                raise moved from None
            self._settle(base.identifier, location, base.io, err, sent, "the commit of", old)
        # After the unlock: the swap is the alter and the release together. A writer killed between
        # the two leaves the lock until the metastore's transaction timeout expires it (as Iceberg
        # Java's would).
        faults.kill_point("commit.swapped")
        log.info("committed %s -> %s", base.identifier, location)
        return LoadedTable(base.identifier, location, new_metadata, base.io)

    def _alter(self, client: MetastoreClient, db: str, name: str, table: TStruct, expected: str) -> None:
        """Alter the table (our lock held), asking the metastore to check ``metadata_location``
        itself as well. A metastore that cannot run that check (Hive 4 on Derby fails comparing
        its CLOB values; older ones ignore the keys) gets the plain alter, which the lock makes
        just as safe, once the table is seen unchanged."""
        context = {DO_NOT_UPDATE_STATS: "true"}
        if self._server_checks:
            try:
                client.alter_table(
                    db, name, table, {**context, EXPECTED_KEY: METADATA_LOCATION, EXPECTED_VALUE: expected}
                )
                return
            except MetastoreError as err:
                if _CANNOT_COMPARE not in err.message:
                    raise  # refused (modified), or failed: never retried without the check
                current = client.get_table(db, name)
                if current is None or metadata_location(current) != expected:
                    raise
                log.info("catalog %s: the metastore cannot check parameters (%s)", self.name, _said(err))
                self._server_checks = False
        client.alter_table(db, name, table, context)

    def _settle(
        self,
        identifier: str,
        location: str,
        io: FileIO,
        err: BaseException,
        sent: bool,
        what: str,
        old: str | None,
    ) -> None:
        """Decide a failed create or commit. Before the change was sent nothing changed. After it,
        the table is read once: our location there is a success (returns); otherwise an answer
        the server declared (it rolled its transaction back) is a refusal, and no answer, or an
        undeclared failure, leaves the outcome unknown (nothing is cleaned up)."""
        if not sent:
            io.delete(location)
            raise self._failed(f"{what} {identifier}", err) from None
        settled = self._settled(identifier, location, io, old)
        if settled:
            log.info("catalog %s: %s is current after %s", self.name, location, type(err).__name__)
            return
        if isinstance(err, MetastoreError) and settled is False:
            io.delete(location)
            raise StorageError(f"catalog {self.name} refused {what} {identifier}: {_said(err)}") from None
        raise CommitStateUnknown(
            f"catalog {self.name} failed during {what} {identifier} ({_said(err)}); check whether "
            f"{location} is current before cleaning anything"
        ) from None


def _open(config: CatalogConfig) -> Catalog:
    assert config.uri is not None  # the type requires one
    return HiveCatalog(config.name, config.uri, config.warehouse, config.properties)


def _spark(config: CatalogConfig) -> dict[str, str]:
    assert config.uri is not None
    return {"type": "hive", "uri": config.uri}


CATALOG_TYPE = register_catalog_type(CatalogType("hive", _open, _spark, uri_example=URI_EXAMPLE))
