"""The hive catalog's commit on a real Hive Metastore, no Spark: it waits for the table lock another
writer (Iceberg Java's lock) holds and gives up on it with nothing changed; a lost race is
CommitFailed and leaves nothing; of racing committers exactly one wins; every field of the Table
but those a commit owns comes back from the server as it was; a lost answer is settled by reading
the table or left unknown; tables of other formats are told apart, Delta ones found by name."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog.base import LoadedTable
from tablekeeper.catalog.hive import HiveCatalog
from tablekeeper.catalog.hive_metastore import LockState, MetastoreClient, MetastoreError, SdField, TableField
from tablekeeper.catalog.hive_thrift import (
    TList,
    TransportError,
    TStruct,
    TType,
    encode_struct,
    string_map,
    struct_of,
    text,
)
from tablekeeper.errors import CommitFailed, CommitStateUnknown, ConfigError, NotATableError, StorageError
from tablekeeper.iceberg.types import LONG, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata, set_properties, with_previous_metadata
from tests.support.db_servers import free_port
from tests.support.hive_metastore import MetastoreServer

SCHEMA = Schema(0, (NestedField(1, "id", LONG, required=True),))
T0 = 1_700_000_000_000


def catalog(server: MetastoreServer, tmp_path: Path, **props: str) -> HiveCatalog:
    return HiveCatalog("hms", server.uri, str(tmp_path / "wh"), props)


def create(cat: HiveCatalog) -> tuple[str, LoadedTable]:
    # A database of its own per test: the metastore lives for the session.
    ident = f"t{uuid.uuid4().hex[:8]}.events"
    meta = new_table_metadata(schema=SCHEMA, location=cat.default_table_location(ident), timestamp_ms=T0)
    return ident, cat.create_table(ident, meta)


def change(base: LoadedTable, value: str) -> Any:
    return set_properties(base.metadata, {"k": value}, timestamp_ms=T0 + 1)


def client(server: MetastoreServer) -> MetastoreClient:
    host, port = server.uri.removeprefix("thrift://").split(":")
    return MetastoreClient([(host, int(port))], 30)


def raw(server: MetastoreServer, ident: str) -> TStruct:
    db, name = ident.split(".")
    c = client(server)
    try:
        table = c.get_table(db, name)
    finally:
        c.close()
    assert table is not None
    return table


def metadata_files(loaded: LoadedTable) -> set[Path]:
    return set(Path(loaded.metadata_location.removeprefix("file:")).parent.iterdir())


def test_a_commit_keeps_every_field_the_server_holds_but_its_own(
    hive_metastore: MetastoreServer, tmp_path: Path
) -> None:
    cat = catalog(hive_metastore, tmp_path)
    ident, created = create(cat)
    assert cat.list_tables(ident.split(".")[0]) == [ident]
    table = raw(hive_metastore, ident)
    assert table.text(TableField.TABLE_TYPE) == "EXTERNAL_TABLE"
    before = {f.id: encode_struct(TStruct((f,))) for f in table.fields}
    committed = cat.commit(created, change(created, "1"))
    after_table = raw(hive_metastore, ident)
    after = {f.id: encode_struct(TStruct((f,))) for f in after_table.fields}
    assert set(after) == set(before)
    assert {i for i in before if before[i] != after[i]} == {TableField.PARAMETERS}
    params = after_table.string_map(TableField.PARAMETERS)
    assert params["metadata_location"] == committed.metadata_location
    assert params["previous_metadata_location"] == created.metadata_location
    assert params["table_type"] == "ICEBERG" and params["k"] == "1"
    # Another catalog object (another process) reads the same pointer.
    assert catalog(hive_metastore, tmp_path).load_table(ident).metadata.properties["k"] == "1"


def test_a_lost_race_is_commit_failed_and_leaves_nothing(
    hive_metastore: MetastoreServer, tmp_path: Path
) -> None:
    cat = catalog(hive_metastore, tmp_path)
    ident, base = create(cat)
    winner = cat.commit(base, change(base, "winner"))
    files = metadata_files(base)
    with pytest.raises(CommitFailed, match="changed by another writer"):
        cat.commit(base, change(base, "loser"))
    assert metadata_files(base) == files  # the loser's metadata file is gone
    assert cat.load_table(ident).metadata_location == winner.metadata_location


def test_racing_committers_exactly_one_wins(hive_metastore: MetastoreServer, tmp_path: Path) -> None:
    cat = catalog(hive_metastore, tmp_path)
    ident, base = create(cat)
    start = threading.Barrier(4)
    won: list[str] = []
    lost: list[BaseException] = []

    def commit(i: int) -> None:
        start.wait()
        try:
            won.append(cat.commit(base, change(base, str(i))).metadata_location)
        except CommitFailed as err:
            lost.append(err)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 3
    assert cat.load_table(ident).metadata_location == won[0]


def test_a_commit_waits_for_the_table_lock_another_writer_holds(
    hive_metastore: MetastoreServer, tmp_path: Path
) -> None:
    """The lock Iceberg Java's commit takes (EXCLUSIVE on the table) keeps ours out until it is
    released; held past the lock timeout, ours gives up with nothing changed."""
    cat = catalog(hive_metastore, tmp_path)
    ident, base = create(cat)
    db, name = ident.split(".")
    other = client(hive_metastore)
    held = other.lock(db, name, "iceberg", "elsewhere", f"Iceberg-{uuid.uuid4()}")
    assert held.state == LockState.ACQUIRED
    done: list[LoadedTable] = []
    thread = threading.Thread(target=lambda: done.append(cat.commit(base, change(base, "after"))))
    thread.start()
    time.sleep(1.5)
    assert not done and cat.load_table(ident).metadata_location == base.metadata_location
    other.unlock(held.id)
    thread.join(timeout=60)
    assert done and cat.load_table(ident).metadata_location == done[0].metadata_location

    held = other.lock(db, name, "iceberg", "elsewhere", f"Iceberg-{uuid.uuid4()}")
    impatient = catalog(hive_metastore, tmp_path, **{"lock-timeout-ms": "300"})
    files = metadata_files(base)
    try:
        with pytest.raises(CommitFailed, match="could not lock"):
            impatient.commit(done[0], change(done[0], "never"))
    finally:
        other.unlock(held.id)
        other.close()
    assert metadata_files(base) == files
    assert cat.load_table(ident).metadata_location == done[0].metadata_location


class _LostAnswer:
    """The alter's connection breaks after the request went out: ``applied`` says whether the
    server ran it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, applied: bool) -> None:
        real = MetastoreClient.alter_table

        def alter(self: MetastoreClient, *args: Any) -> None:
            if applied:
                real(self, *args)
            raise TransportError("connection reset by peer", sent=True)

        monkeypatch.setattr(MetastoreClient, "alter_table", alter)


def test_a_lost_answer_is_settled_by_reading_the_table(
    hive_metastore: MetastoreServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat = catalog(hive_metastore, tmp_path)
    ident, base = create(cat)
    _LostAnswer(monkeypatch, applied=True)
    committed = cat.commit(base, change(base, "1"))  # our location is current: it was applied
    assert cat.load_table(ident).metadata_location == committed.metadata_location
    monkeypatch.undo()

    _LostAnswer(monkeypatch, applied=False)
    with pytest.raises(CommitStateUnknown, match="check whether"):
        cat.commit(committed, change(committed, "2"))
    monkeypatch.undo()
    assert cat.load_table(ident).metadata_location == committed.metadata_location
    # The lock was released on the way out: the next commit goes through at once.
    assert cat.commit(committed, change(committed, "3")).metadata.properties["k"] == "3"


def test_a_lost_answer_under_another_writers_later_commit_is_a_success(
    hive_metastore: MetastoreServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ours landed, the answer was lost, and the lock was released before the table was read again:
    another writer committed on top in between. Its metadata log names ours, so ours landed;
    taking it for a refusal would delete a metadata file the table's history stands on."""
    cat = catalog(hive_metastore, tmp_path)
    ident, base = create(cat)
    other = catalog(hive_metastore, tmp_path)
    _LostAnswer(monkeypatch, applied=True)
    real = cat._hms_table
    on_top: list[Any] = []

    def read_after_another_commit(identifier: str) -> Any:
        if not on_top:
            current = other.load_table(ident)
            on_top.append(other.commit(current, logged(current, change(current, "on top"))))
        return real(identifier)

    monkeypatch.setattr(cat, "_hms_table", read_after_another_commit)
    committed = cat.commit(base, change(base, "ours"))
    monkeypatch.undo()
    loaded = cat.load_table(ident)
    assert loaded.metadata_location == on_top[0].metadata_location
    assert committed.metadata_location in {e.metadata_file for e in loaded.metadata.metadata_log}
    assert Path(committed.metadata_location.removeprefix("file:")).exists()


def test_the_metastores_own_check_refuses_a_stale_alter_and_one_that_cannot_run_it_gets_the_plain_one(
    hive_metastore: MetastoreServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hive 4 checks ``expected_parameter_value`` against ``metadata_location`` in the alter's own
    transaction; on Derby it cannot compare the values and fails. The metastore of the tests
    (Hive 3) ignores the keys, so both answers are given here by the alter call."""
    cat = catalog(hive_metastore, tmp_path)
    ident, base = create(cat)
    real = MetastoreClient.alter_table
    contexts: list[dict[str, str]] = []

    def answer(message: str) -> Any:
        def alter(self: MetastoreClient, db: str, name: str, table: TStruct, context: dict[str, str]) -> None:
            contexts.append(dict(context))
            if "expected_parameter_value" in context:
                raise MetastoreError("MetaException", message)
            real(self, db, name, table, context)

        return alter

    files = metadata_files(base)
    monkeypatch.setattr(
        MetastoreClient,
        "alter_table",
        answer("The table has been modified. The parameter value for key 'metadata_location' is x"),
    )
    with pytest.raises(CommitFailed, match="changed by another writer"):
        cat.commit(base, change(base, "1"))
    assert (
        metadata_files(base) == files and contexts[-1]["expected_parameter_value"] == base.metadata_location
    )
    # Any other failure of the checked alter is a failure, never a reason to alter unchecked: a
    # Hive 4 writer that takes no lock could commit between our read and a plain alter.
    failing = answer("MetaException: the backing database timed out")
    monkeypatch.setattr(MetastoreClient, "alter_table", failing)
    with pytest.raises(StorageError, match="refused"):
        cat.commit(base, change(base, "2"))
    assert cat.load_table(ident).metadata_location == base.metadata_location
    assert "expected_parameter_value" in contexts[-1] and metadata_files(base) == files
    contexts.clear()
    monkeypatch.setattr(
        MetastoreClient,
        "alter_table",
        answer("JDODataStoreException: Comparisons between 'CLOB' and 'CLOB' are not supported"),
    )
    committed = cat.commit(base, change(base, "2"))
    assert cat.load_table(ident).metadata_location == committed.metadata_location
    assert "expected_parameter_value" not in contexts[-1]
    cat.commit(committed, change(committed, "3"))  # not asked again of this metastore
    assert [("expected_parameter_value" in c) for c in contexts] == [True, False, False]


def test_other_formats_are_told_apart_and_delta_tables_found_by_name(
    hive_metastore: MetastoreServer, tmp_path: Path
) -> None:
    cat = catalog(hive_metastore, tmp_path)
    ident, _ = create(cat)
    db = ident.split(".")[0]
    c = client(hive_metastore)
    try:
        for name, params, serde in (
            ("plain", {"EXTERNAL": "TRUE"}, {}),
            ("delta_events", {"spark.sql.sources.provider": "DELTA"}, {"path": "file:/lake/delta_events"}),
        ):
            sd = struct_of(
                (SdField.COLS, TType.LIST, TList(TType.STRUCT)),
                (SdField.LOCATION, TType.STRING, text(f"file:/lake/{name}")),
                (SdField.SERDE, TType.STRUCT, struct_of((3, TType.MAP, string_map(serde)))),
            )
            table = struct_of(
                (TableField.NAME, TType.STRING, text(name)),
                (TableField.DB, TType.STRING, text(db)),
                (TableField.SD, TType.STRUCT, sd),
                (TableField.PARAMETERS, TType.MAP, string_map(params)),
                (TableField.TABLE_TYPE, TType.STRING, text("EXTERNAL_TABLE")),
            )
            c.create_table(table, {})
    finally:
        c.close()
    assert cat.list_tables(db) == [ident]
    assert cat.delta_tables(db) == ["file:/lake/delta_events"]
    assert cat.delta_table_location(f"{db}.delta_events") == "file:/lake/delta_events"
    with pytest.raises(NotATableError, match="is not an Iceberg table"):
        cat.load_table(f"{db}.plain")
    with pytest.raises(NotATableError, match="is not an Iceberg table \\(it is DELTA\\)"):
        cat.load_table(f"{db}.delta_events")
    assert not cat.table_exists(f"{db}.plain") and not cat.table_exists(f"{db}.missing")
    with pytest.raises(NotATableError, match="not found"):
        cat.load_table(f"{db}.missing")
    with pytest.raises(ConfigError, match="already exists"):
        cat.create_table(
            ident, new_table_metadata(schema=SCHEMA, location=str(tmp_path / "x"), timestamp_ms=T0)
        )
    assert not any((tmp_path / "x").rglob("*.metadata.json"))  # the refused create left no file
    with pytest.raises(ConfigError, match="one level of databases"):
        cat.load_table("a.b.c")


def test_an_unreachable_metastore_fails_in_one_line_naming_it(
    hive_metastore: MetastoreServer, tmp_path: Path
) -> None:
    _, base = create(catalog(hive_metastore, tmp_path))
    down = HiveCatalog("hms", f"thrift://127.0.0.1:{free_port()}", str(tmp_path / "wh"))
    with pytest.raises(StorageError) as load:
        down.load_table("db.events")
    files = metadata_files(base)
    with pytest.raises(StorageError) as commit:  # not a lost race: nothing to retry
        down.commit(base, change(base, "1"))
    assert metadata_files(base) == files
    for err in (load.value, commit.value):
        assert "did not answer" in str(err) and "check the catalog uri" in str(err)
        assert "\n" not in str(err)


def logged(base: LoadedTable, new: Any) -> Any:
    """``new`` as a writer commits it: the file it replaces recorded in its metadata log."""
    return with_previous_metadata(new, base.metadata, base.metadata_location)
