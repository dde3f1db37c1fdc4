"""The Hive Metastore calls the hive catalog makes, and the metastore's Table and Database objects,
over the generic Thrift codec (``hive_thrift``).

Field ids are those of the metastore's IDL (hive_metastore.thrift), stable since Hive 0.x for the
fields used here. Tables are fetched with ``get_table_req`` (Hive 2.3 and later; Hive 4 removed the
older ``get_table``, which is tried only when a server lacks the newer call), and written back
through ``alter_table_with_environment_context`` as the struct the server sent, with only the
fields tablekeeper owns changed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum

from tablekeeper.catalog.hive_thrift import (
    ApplicationError,
    ThriftConnection,
    TList,
    TransportError,
    TStruct,
    TType,
    Value,
    string_list,
    string_map,
    struct_of,
    text,
)


class TableField(IntEnum):
    NAME = 1
    DB = 2
    OWNER = 3
    CREATE_TIME = 4
    LAST_ACCESS_TIME = 5
    RETENTION = 6
    SD = 7
    PARTITION_KEYS = 8
    PARAMETERS = 9
    TABLE_TYPE = 12


class SdField(IntEnum):
    COLS = 1
    LOCATION = 2
    INPUT_FORMAT = 3
    OUTPUT_FORMAT = 4
    SERDE = 7


class LockState(IntEnum):
    ACQUIRED = 1
    WAITING = 2
    ABORT = 3
    NOT_ACQUIRED = 4


_LOCK_EXCLUSIVE = 3
_LOCK_LEVEL_TABLE = 2
_LIST_BATCH = 100  # table names per get_table_objects_by_name_req


class MetastoreError(Exception):
    """An exception the call declares (MetaException, InvalidOperationException, ...): the server
    ran the call and refused it."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


# Per call, the declared exceptions by result field id (field 0 is the answer).
_RAISES: Mapping[str, Mapping[int, str]] = {
    "get_table_req": {1: "MetaException", 2: "NoSuchObjectException"},
    "get_table": {1: "MetaException", 2: "NoSuchObjectException"},
    "get_database": {1: "NoSuchObjectException", 2: "MetaException"},
    "create_database": {1: "AlreadyExistsException", 2: "InvalidObjectException", 3: "MetaException"},
    "get_all_databases": {1: "MetaException"},
    "get_all_tables": {1: "MetaException"},
    "get_table_objects_by_name_req": {
        1: "MetaException",
        2: "InvalidOperationException",
        3: "UnknownDBException",
    },
    "create_table_with_environment_context": {
        1: "AlreadyExistsException",
        2: "InvalidObjectException",
        3: "MetaException",
        4: "NoSuchObjectException",
    },
    "alter_table_with_environment_context": {1: "InvalidOperationException", 2: "MetaException"},
    "lock": {1: "NoSuchTxnException", 2: "TxnAbortedException"},
    "check_lock": {1: "NoSuchTxnException", 2: "TxnAbortedException", 3: "NoSuchLockException"},
    "unlock": {1: "NoSuchLockException", 2: "TxnOpenException"},
    "show_locks": {},
}


@dataclass(frozen=True)
class Lock:
    id: int
    state: LockState


class MetastoreClient:
    """One connection to the first metastore of ``uris`` that answers. Not for sharing between
    threads (a Thrift connection carries one call at a time)."""

    def __init__(self, uris: Sequence[tuple[str, int]], timeout_s: float) -> None:
        self.uris = tuple(uris)
        self.timeout_s = timeout_s
        self._conn: ThriftConnection | None = None

    def _connection(self) -> ThriftConnection:
        if self._conn is None:
            failures = []
            for host, port in self.uris:
                conn = ThriftConnection(host, port, self.timeout_s)
                try:
                    conn._socket()  # connect now: the next uri is tried only for a refused connect
                except TransportError as err:
                    failures.append(str(err))
                    continue
                self._conn = conn
                break
            else:
                raise TransportError("; ".join(failures) or "no metastore uri", sent=False)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def call(self, method: str, *args: tuple[int, TType, Value | None]) -> Value | None:
        """``method(args)``'s answer (None for a void call); a declared exception is raised as a
        MetastoreError. A transport failure closes the connection (the next call reconnects)."""
        conn = self._connection()
        try:
            result = conn.call(method, struct_of(*args))
        except TransportError:
            self._conn = None  # the connection closed itself
            raise
        raises = _RAISES.get(method, {})
        for f in result.fields:
            if f.id != 0 and isinstance(f.value, TStruct):
                kind = raises.get(f.id, f"exception {f.id}")
                raise MetastoreError(kind, f.value.text(1) or "no message")
        return result.get(0)

    # -- tables and databases ------------------------------------------------------------------

    def get_table(self, db: str, name: str) -> TStruct | None:
        """The table as the server stores it, or None when there is none."""
        try:
            try:
                answer = self.call(
                    "get_table_req",
                    (1, TType.STRUCT, struct_of((1, TType.STRING, text(db)), (2, TType.STRING, text(name)))),
                )
                table = answer.struct(1) if isinstance(answer, TStruct) else None
            except ApplicationError as err:
                if err.kind != ApplicationError.UNKNOWN_METHOD:
                    raise
                # A metastore older than Hive 2.3.
                found = self.call("get_table", (1, TType.STRING, text(db)), (2, TType.STRING, text(name)))
                table = found if isinstance(found, TStruct) else None
        except MetastoreError as err:
            if err.kind == "NoSuchObjectException":
                return None
            raise
        return table

    def get_database(self, name: str) -> TStruct | None:
        try:
            found = self.call("get_database", (1, TType.STRING, text(name)))
        except MetastoreError as err:
            if err.kind == "NoSuchObjectException":
                return None
            raise
        return found if isinstance(found, TStruct) else None

    def create_database(self, name: str, location: str | None, owner: str) -> None:
        database = struct_of(
            (1, TType.STRING, text(name)),
            (3, TType.STRING, text(location) if location else None),
            (4, TType.MAP, string_map({})),
            (6, TType.STRING, text(owner)),
            (7, TType.I32, 1),  # PrincipalType.USER
        )
        self.call("create_database", (1, TType.STRUCT, database))

    def all_databases(self) -> list[str]:
        found = self.call("get_all_databases")
        return _strings(found)

    def all_tables(self, db: str) -> list[str]:
        return _strings(self.call("get_all_tables", (1, TType.STRING, text(db))))

    def tables(self, db: str, names: Sequence[str]) -> list[TStruct]:
        """The Table objects of ``names`` in ``db`` (tables dropped meanwhile are left out)."""
        out: list[TStruct] = []
        for start in range(0, len(names), _LIST_BATCH):
            batch = names[start : start + _LIST_BATCH]
            request = struct_of((1, TType.STRING, text(db)), (2, TType.LIST, string_list(batch)))
            answer = self.call("get_table_objects_by_name_req", (1, TType.STRUCT, request))
            found = answer.get(1) if isinstance(answer, TStruct) else None
            if isinstance(found, TList):
                out.extend(t for t in found.items if isinstance(t, TStruct))
        return out

    def create_table(self, table: TStruct, context: Mapping[str, str]) -> None:
        self.call(
            "create_table_with_environment_context",
            (1, TType.STRUCT, table),
            (2, TType.STRUCT, struct_of((1, TType.MAP, string_map(context)))),
        )

    def alter_table(self, db: str, name: str, table: TStruct, context: Mapping[str, str]) -> None:
        self.call(
            "alter_table_with_environment_context",
            (1, TType.STRING, text(db)),
            (2, TType.STRING, text(name)),
            (3, TType.STRUCT, table),
            (4, TType.STRUCT, struct_of((1, TType.MAP, string_map(context)))),
        )

    # -- locks (the metastore's lock manager, as Iceberg Java's HiveTableOperations uses it) ----

    def lock(self, db: str, table: str, user: str, host: str, agent: str) -> Lock:
        """Ask for an EXCLUSIVE lock on the table, outside any transaction."""
        component = struct_of(
            (1, TType.I32, _LOCK_EXCLUSIVE),
            (2, TType.I32, _LOCK_LEVEL_TABLE),
            (3, TType.STRING, text(db)),
            (4, TType.STRING, text(table)),
        )
        request = struct_of(
            (1, TType.LIST, TList(TType.STRUCT, (component,))),
            (3, TType.STRING, text(user)),
            (4, TType.STRING, text(host)),
            (5, TType.STRING, text(agent)),
        )
        return _lock(self.call("lock", (1, TType.STRUCT, request)))

    def check_lock(self, lock_id: int) -> Lock:
        return _lock(self.call("check_lock", (1, TType.STRUCT, struct_of((1, TType.I64, lock_id)))))

    def unlock(self, lock_id: int) -> None:
        self.call("unlock", (1, TType.STRUCT, struct_of((1, TType.I64, lock_id))))

    def locks_of(self, db: str, table: str, agent: str) -> list[int]:
        """The ids of the table's locks asked for by ``agent`` (a lock whose answer was lost)."""
        # The metastore stores a lock's names lowercased but filters show_locks by the names as
        # sent: a table named with capitals would find none of its own locks.
        request = struct_of((1, TType.STRING, text(db.lower())), (2, TType.STRING, text(table.lower())))
        answer = self.call("show_locks", (1, TType.STRUCT, request))
        found = answer.get(1) if isinstance(answer, TStruct) else None
        if not isinstance(found, TList):
            return []
        return [
            lock_id
            for item in found.items
            if isinstance(item, TStruct)
            and item.text(13) == agent
            and (lock_id := item.integer(1)) is not None
        ]


def _strings(value: Value | None) -> list[str]:
    if not isinstance(value, TList):
        return []
    return [v.decode("utf-8", "replace") for v in value.items if isinstance(v, bytes)]


def _lock(answer: Value | None) -> Lock:
    if not isinstance(answer, TStruct) or answer.integer(1) is None:
        raise MetastoreError("LockResponse", "the answer names no lock")
    state = answer.integer(2) or 0
    try:
        return Lock(answer.integer(1) or 0, LockState(state))
    except ValueError:
        raise MetastoreError("LockResponse", f"unknown lock state {state}") from None


@contextmanager
def connected(uris: Sequence[tuple[str, int]], timeout_s: float) -> Iterator[MetastoreClient]:
    client = MetastoreClient(uris, timeout_s)
    try:
        yield client
    finally:
        client.close()
