"""The sql catalog on real PostgreSQL and MariaDB servers: Iceberg JdbcCatalog's tables, created as
Java creates them, and its compare-and-swap (one winner among racing committers, a lost race is
CommitFailed, a lost answer is settled by reading the row or left unknown). Passwords never show."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import SqlCatalog
from tablekeeper.catalog.base import LoadedTable
from tablekeeper.errors import CommitFailed, CommitStateUnknown, ConfigError, StorageError
from tablekeeper.iceberg.types import LONG, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata, set_properties, with_previous_metadata
from tests.support.append_worker import run_worker
from tests.support.db_servers import DbServer, free_port

IDENT = "db.events"
SCHEMA = Schema(0, (NestedField(1, "id", LONG, required=True),))
T0 = 1_700_000_000_000


def catalog(server: DbServer, tmp_path: Path, name: str | None = None) -> SqlCatalog:
    # A catalog name of its own per test: the servers (and their tables) live for the session.
    return SqlCatalog(name or f"c{uuid.uuid4().hex[:10]}", server.uri(), str(tmp_path / "wh"))


def create(cat: SqlCatalog) -> LoadedTable:
    meta = new_table_metadata(schema=SCHEMA, location=cat.default_table_location(IDENT), timestamp_ms=T0)
    return cat.create_table(IDENT, meta)


def change(base: LoadedTable, value: str) -> Any:
    return set_properties(base.metadata, {"k": value}, timestamp_ms=T0 + 1)


def row(server: DbServer, cat: SqlCatalog) -> tuple[Any, ...]:
    conn = server.connect()
    try:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT metadata_location, previous_metadata_location, iceberg_type FROM iceberg_tables "
            "WHERE catalog_name = %s AND table_namespace = 'db' AND table_name = 'events'",
            (cat.name,),
        )
        return tuple(cursor.fetchone())
    finally:
        conn.close()


def test_create_load_commit_as_iceberg_java_records_them(db_server: DbServer, tmp_path: Path) -> None:
    cat = catalog(db_server, tmp_path)
    created = create(cat)
    assert row(db_server, cat) == (created.metadata_location, None, "TABLE")
    assert cat.list_namespaces() == ["db"] and cat.list_tables("db") == [IDENT]
    loaded = cat.load_table(IDENT)
    assert loaded.metadata_location == created.metadata_location
    committed = cat.commit(loaded, change(loaded, "1"))
    assert row(db_server, cat) == (committed.metadata_location, created.metadata_location, "TABLE")
    assert cat.load_table(IDENT).metadata.properties["k"] == "1"
    # A second catalog object (another process) finds the tables made and reads the same row.
    assert (
        catalog(db_server, tmp_path, cat.name).load_table(IDENT).metadata_location
        == committed.metadata_location
    )


def test_a_second_create_is_refused_and_leaves_nothing(db_server: DbServer, tmp_path: Path) -> None:
    cat = catalog(db_server, tmp_path)
    first = create(cat)
    other = catalog(db_server, tmp_path / "other", cat.name)  # its own warehouse: its own files
    with pytest.raises(ConfigError, match="already exists"):
        create(other)
    assert not any((tmp_path / "other").rglob("*.metadata.json"))
    assert row(db_server, cat)[0] == first.metadata_location


def test_a_lost_race_is_commit_failed_and_leaves_nothing(db_server: DbServer, tmp_path: Path) -> None:
    cat = catalog(db_server, tmp_path)
    base = create(cat)
    winner = cat.commit(base, change(base, "winner"))
    metadata_dir = Path(base.metadata_location).parent
    before = set(metadata_dir.iterdir())
    with pytest.raises(CommitFailed, match="changed by another writer"):
        cat.commit(base, change(base, "loser"))
    assert set(metadata_dir.iterdir()) == before  # the loser's metadata file is gone
    assert row(db_server, cat)[0] == winner.metadata_location


def test_racing_committers_exactly_one_wins(db_server: DbServer, tmp_path: Path) -> None:
    cat = catalog(db_server, tmp_path)
    base = create(cat)
    start = threading.Barrier(6)
    won: list[str] = []
    lost: list[BaseException] = []

    def commit(i: int) -> None:
        start.wait()
        try:
            won.append(cat.commit(base, change(base, str(i))).metadata_location)
        except CommitFailed as err:
            lost.append(err)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 5
    assert row(db_server, cat)[0] == won[0]


class _LostAnswer:
    """The swap's connection breaks after the statement was sent: ``applied`` says whether the
    server had run it."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        cat: SqlCatalog,
        applied: bool,
        on_top: Callable[[], object] | None = None,
    ) -> None:
        real = cat._run
        error = cat.db.errors()[0]

        def run(conn: Any, statement: str, params: Any = ()) -> Any:
            if statement.startswith("UPDATE iceberg_tables"):
                if applied:
                    real(conn, statement, params)
                    if on_top is not None:
                        on_top()  # another writer commits on top of ours before we look
                raise error("server closed the connection unexpectedly")
            return real(conn, statement, params)

        monkeypatch.setattr(cat, "_run", run)


def test_a_lost_answer_is_settled_by_reading_the_row(
    db_server: DbServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat = catalog(db_server, tmp_path)
    base = create(cat)
    _LostAnswer(monkeypatch, cat, applied=True)
    committed = cat.commit(base, change(base, "1"))  # our location is in the row: it was applied
    assert row(db_server, cat)[0] == committed.metadata_location
    monkeypatch.undo()

    _LostAnswer(monkeypatch, cat, applied=False)
    with pytest.raises(CommitStateUnknown, match="check whether"):
        cat.commit(committed, change(committed, "2"))  # the old row: it may still land
    monkeypatch.undo()

    other = cat.commit(committed, change(committed, "other"))  # a third writer moves the row
    _LostAnswer(monkeypatch, cat, applied=False)
    with pytest.raises(CommitFailed):
        cat.commit(committed, change(committed, "3"))  # its WHERE can never match again
    assert row(db_server, cat)[0] == other.metadata_location


def test_a_lost_answer_under_another_writers_later_commit_is_a_success(
    db_server: DbServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ours landed and another writer committed on top before the row was read again: the row
    holds the other's location, whose metadata log names ours. Taking that for a lost race would
    delete the metadata file the table's history (and the other's snapshot) stands on."""
    cat = catalog(db_server, tmp_path)
    base = create(cat)
    other = SqlCatalog(cat.name, db_server.uri(), str(tmp_path / "wh"))
    on_top: list[LoadedTable] = []

    def commit_on_top() -> None:
        current = other.load_table(IDENT)
        on_top.append(other.commit(current, logged(current, change(current, "on top"))))

    _LostAnswer(monkeypatch, cat, applied=True, on_top=commit_on_top)
    committed = cat.commit(base, change(base, "ours"))
    assert row(db_server, cat)[0] == on_top[0].metadata_location
    assert row(db_server, cat)[1] == committed.metadata_location  # ours, under the other's
    assert Path(committed.metadata_location.removeprefix("file:")).exists()
    assert cat.load_table(IDENT).metadata.properties["k"] == "on top"


def test_connection_errors_name_the_database_never_the_password(db_server: DbServer, tmp_path: Path) -> None:
    wrong = "Wr0ng-Pa55word"
    with pytest.raises(StorageError) as refused:
        SqlCatalog("c", db_server.uri(password=wrong), str(tmp_path))
    down = DbServer(db_server.kind, free_port(), db_server.password)
    with pytest.raises(StorageError) as unreachable:
        SqlCatalog("c", down.uri(), str(tmp_path))
    for err, secret in ((refused.value, wrong), (unreachable.value, db_server.password)):
        message = str(err)
        assert "did not answer" in message and "\n" not in message
        assert secret not in message and "***" in message


def test_a_writer_killed_at_the_swap_leaves_a_readable_table_and_the_rerun_converges(
    db_server: DbServer, tmp_path: Path
) -> None:
    cat = catalog(db_server, tmp_path)
    create(cat)
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(
        f"catalogs:\n  {cat.name}:\n    type: sql\n"
        f"    uri: {db_server.uri()}\n    warehouse: {tmp_path / 'wh'}\n"
    )

    def appended() -> int:
        loaded = cat.load_table(IDENT)  # the pointer names a complete metadata file
        snapshot = loaded.metadata.current_snapshot()
        return 0 if snapshot is None else len(loaded.metadata.ancestors(snapshot.snapshot_id))

    run_worker(conf, cat.name, IDENT, 1, 3, kill_at="commit.swapped@2")  # SIGKILL right after the swap
    assert appended() == 2  # the new state
    run_worker(conf, cat.name, IDENT, 2, 1, kill_at="commit.metadata-written")  # SIGKILL before it
    assert appended() == 2  # the old state
    run_worker(conf, cat.name, IDENT, 3, 2)  # the next writer goes on from there
    assert appended() == 4


def logged(base: LoadedTable, new: Any) -> Any:
    """``new`` as a writer commits it: the file it replaces recorded in its metadata log."""
    return with_previous_metadata(new, base.metadata, base.metadata_location)
