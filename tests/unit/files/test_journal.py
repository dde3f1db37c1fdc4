"""Journals: their layout, how a dead owner is told from a live one, and finishing them against
the table as it is (the driver engine, no Spark)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from tablekeeper.catalog.filesystem import FileSystemCatalog
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.errors import CorruptMetadataError
from tablekeeper.files.finish import finish_journals, staged_files
from tablekeeper.files.journal import (
    HEADER,
    Header,
    JournalWriter,
    Owner,
    Staged,
    decode_rows,
    encode_rows,
    journals_location,
    list_journals,
    write_part,
)
from tablekeeper.files.local import LocalEngine
from tablekeeper.files.rules import PathRules
from tablekeeper.iceberg.types import NestedField, PrimitiveType, Schema
from tablekeeper.iceberg.updates import new_table_metadata
from tablekeeper.io import FileIO
from tests.support.iceberg_writer import write_rows

SCHEMA = Schema(
    0, (NestedField(1, "id", PrimitiveType("long")), NestedField(2, "s", PrimitiveType("string")))
)


def _table(tmp_path: Path, appends: int = 3) -> tuple[FileSystemCatalog, str]:
    catalog = FileSystemCatalog("fs", str(tmp_path / "wh"))
    meta = new_table_metadata(
        schema=SCHEMA, location=catalog.default_table_location("db.t"), timestamp_ms=int(time.time() * 1000)
    )
    catalog.create_table("db.t", meta)
    for i in range(appends):
        m = catalog.require("db.t").metadata
        files = write_rows(m, [{"id": i, "s": f"r{i}"}])
        Committer(catalog, "db.t").commit_snapshot(SnapshotChange("append", added_files=tuple(files)))
    return catalog, "db.t"


def _dead_owner() -> Owner:
    """The owner record of a process that has exited."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from tablekeeper.files.journal import Owner; o = Owner.current(); "
            "print(o.host, o.boot_id, o.pid, o.started)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return Owner(out[0], out[1], int(out[2]), int(out[3]))


def test_owner_states() -> None:
    me = Owner.current()
    assert me.state() == "alive"
    assert _dead_owner().state() == "dead"
    assert Owner("some-other-host", me.boot_id, me.pid, me.started).state() == "unknown"
    # The same pid after a reboot, or a pid reused by another process, is not the owner.
    assert Owner(me.host, "another-boot", me.pid, me.started).state() == "dead"
    assert Owner(me.host, me.boot_id, me.pid, me.started + 1).state() == "dead"
    # Another machine (or pid namespace) of the same host name: nothing can be told from here.
    if me.machine_id:
        assert (
            Owner(me.host, "another-boot", me.pid, me.started, me.pid_namespace, "other").state() == "unknown"
        )
    if me.pid_namespace:
        assert Owner(me.host, me.boot_id, me.pid, me.started, "pid:[1]", me.machine_id).state() == "unknown"


def test_a_dead_owners_commit_may_still_land_for_a_while(tmp_path: Path) -> None:
    """A REST server may apply a request whose client died: its journal waits that long."""
    location = str(tmp_path / "t")
    io = FileIO.for_location(location)
    writer = JournalWriter.start(io, location, job="compact", table="db.t", kind="stage", settle_ms=120_000)
    writer.release()
    dead = Header(**{**writer.header.__dict__, "owner": _dead_owner()})
    io.write(f"{writer.location}/{HEADER}", dead.to_bytes())
    (found,) = list_journals(io, location)
    now = int(time.time() * 1000)
    assert found.header is not None and found.header.settle_ms == 120_000
    assert not found.abandoned(now)
    assert found.abandoned(now + 121_000)


def test_header_round_trip_and_corruption() -> None:
    header = Header(
        job="expire-snapshots",
        table="db.t",
        run_id="abc",
        kind="stage",
        created_ms=1,
        owner=Owner.current(),
        base_metadata="/x/metadata/v3.metadata.json",
        rules=PathRules({"s3a": "s3"}, {"a": "b"}),
        staged=(Staged("/x/data", "tok", directories=True),),
    )
    assert Header.from_bytes(header.to_bytes(), "j") == header
    with pytest.raises(CorruptMetadataError, match="journal j is not readable"):
        Header.from_bytes(header.to_bytes()[:40], "j")
    with pytest.raises(CorruptMetadataError, match="format"):
        Header.from_bytes(header.to_bytes().replace(b'"format": 1', b'"format": 9'), "j")


def test_rows_round_trip_and_truncation() -> None:
    rows = [("/t/data/a.parquet", "/t/data/a.parquet", "data", 10), ("/t/m.avro", "/t/m.avro", "manifest", 5)]
    assert decode_rows(encode_rows(rows), "p") == rows
    with pytest.raises(CorruptMetadataError, match="journal part p"):
        decode_rows(encode_rows(rows)[:-8], "p")


def test_layout_states_and_removal(tmp_path: Path) -> None:
    location = str(tmp_path / "t")
    io = FileIO.for_location(location)
    writer = JournalWriter.start(io, location, job="remove-orphans", table="db.t", kind="delete")
    assert writer.location.startswith(journals_location(location) + "/")
    (found,) = list_journals(io, location)
    assert found.header == writer.header and found.ready is None and found.problem is None
    assert not found.abandoned(int(time.time() * 1000))  # this process owns it
    part = write_part(writer.location, 0, [("/t/x", "/t/x", "orphan", 3)])
    writer.ready([part])
    writer.committed("/t/metadata/v2.metadata.json")
    (found,) = list_journals(io, location)
    assert found.ready is not None and found.ready.files == 1 and found.ready.bytes == 3
    assert found.committed == "/t/metadata/v2.metadata.json"
    # A part lost after ready.json makes the journal unfinishable, not silently empty.
    Path(part[0]).unlink()
    (found,) = list_journals(io, location)
    assert found.problem is not None and "lost its part" in found.problem
    writer.remove()
    assert list_journals(io, location) == []
    assert not (tmp_path / "t" / "metadata" / "_tablekeeper").exists()


def _journal_of_dead_run(io: FileIO, location: str, **fields: object) -> JournalWriter:
    writer = JournalWriter.start(io, location, **fields)  # type: ignore[arg-type]
    dead = Header(**{**writer.header.__dict__, "owner": _dead_owner()})
    io.write(f"{writer.location}/{HEADER}", dead.to_bytes())
    writer.header = dead
    return writer


def test_finishing_rechecks_against_the_table(tmp_path: Path) -> None:
    catalog, ident = _table(tmp_path)
    table = catalog.require(ident)
    location = table.metadata.location
    live = next(iter(Path(location, "data").iterdir()))
    stray = Path(location, "data", "stray.parquet")
    stray.write_bytes(b"x" * 7)
    rules = PathRules()
    rows = [(str(p), rules.key(str(p)), "data", p.stat().st_size) for p in (live, stray)]
    writer = _journal_of_dead_run(table.io, location, job="expire-snapshots", table=ident, kind="delete")
    writer.ready([write_part(writer.location, 0, rows)])
    done = finish_journals(table.io, location, lambda: catalog.require(ident), LocalEngine(), 4)
    metric = done.metric()
    assert metric is not None
    assert metric["deleted_files_count"] == 1 and metric["kept_files_count"] == 1
    assert live.exists() and not stray.exists()  # the table still references ``live``
    assert list_journals(table.io, location) == []


def test_a_plan_never_completed_deletes_nothing(tmp_path: Path) -> None:
    catalog, ident = _table(tmp_path)
    table = catalog.require(ident)
    location = table.metadata.location
    stray = Path(location, "data", "stray.parquet")
    stray.write_bytes(b"x")
    writer = _journal_of_dead_run(table.io, location, job="expire-snapshots", table=ident, kind="delete")
    write_part(writer.location, 0, [(str(stray), str(stray), "data", 1)])  # no ready.json
    finish_journals(table.io, location, lambda: catalog.require(ident), LocalEngine(), 4)
    assert stray.exists()
    assert list_journals(table.io, location) == []


def test_live_owners_and_unreadable_journals_are_left_alone(tmp_path: Path) -> None:
    catalog, ident = _table(tmp_path)
    table = catalog.require(ident)
    location = table.metadata.location
    stray = Path(location, "data", "stray.parquet")
    stray.write_bytes(b"x")
    mine = JournalWriter.start(table.io, location, job="compact", table=ident, kind="delete")
    mine.ready([write_part(mine.location, 0, [(str(stray), str(stray), "data", 1)])])
    broken = _journal_of_dead_run(table.io, location, job="compact", table=ident, kind="delete")
    Path(broken.location, HEADER).write_bytes(b"{not json")
    done = finish_journals(table.io, location, lambda: catalog.require(ident), LocalEngine(), 4)
    metric = done.metric()
    assert metric is not None
    assert metric["left_to_running_owners"] == [mine.location]
    assert len(metric["unreadable"]) == 1
    assert stray.exists() and len(list_journals(table.io, location)) == 2


def test_other_hosts_are_presumed_alive_until_the_journal_goes_quiet(tmp_path: Path) -> None:
    location = str(tmp_path / "t")
    io = FileIO.for_location(location)
    writer = JournalWriter.start(io, location, job="compact", table="db.t", kind="stage")
    elsewhere = Owner("another-" + socket.gethostname(), "", 1, 1)
    io.write(
        f"{writer.location}/{HEADER}", Header(**{**writer.header.__dict__, "owner": elsewhere}).to_bytes()
    )
    (found,) = list_journals(io, location)
    now = int(time.time() * 1000)
    assert not found.abandoned(now)
    assert found.abandoned(now + 2 * 3_600_000)
    old = time.time() - 3 * 3600
    os.utime(Path(writer.location, HEADER), (old, old))
    (found,) = list_journals(io, location)
    assert found.abandoned(now)


def test_staged_files_are_found_by_token(tmp_path: Path) -> None:
    root = tmp_path / "t"
    (root / "metadata").mkdir(parents=True)
    (root / "data" / "compact-tok-g0-1").mkdir(parents=True)
    (root / "data" / "compact-other-g0-1").mkdir(parents=True)
    (root / "metadata" / "tok-1-m0.avro").write_bytes(b"a")
    (root / "metadata" / "other-m0.avro").write_bytes(b"b")
    (root / "data" / "compact-tok-g0-1" / "f.parquet").write_bytes(b"c")
    (root / "data" / "compact-other-g0-1" / "f.parquet").write_bytes(b"d")
    rules = PathRules()
    files = staged_files(Staged(str(root / "metadata"), "tok"), rules)
    assert [Path(r[0]).name for r in files] == ["tok-1-m0.avro"]
    dirs = staged_files(Staged(str(root / "data"), "compact-tok-", directories=True), rules)
    assert [r[0] for r in dirs] == [str(root / "data" / "compact-tok-g0-1" / "f.parquet")]


def test_a_quarantine_journal_is_a_format_older_readers_refuse() -> None:
    """A reader that knows only format 1 must not finish a quarantine run's journal by deleting:
    such a journal says format 2, which that reader refuses (and leaves for a person)."""
    from tablekeeper.files.journal import FORMAT, QUARANTINE_FORMAT, Header, Owner

    owner = Owner("h", "b", 1, 1)
    plain = Header("expire-snapshots", "db.t", "r", "delete", 1, owner)
    aside = replace(plain, quarantine="0000000000001-expire-snapshots-r")
    assert orjson.loads(plain.to_bytes())["format"] == FORMAT == 1
    assert orjson.loads(aside.to_bytes())["format"] == QUARANTINE_FORMAT == 2
    assert Header.from_bytes(aside.to_bytes(), "x") == aside
    hostile = orjson.loads(aside.to_bytes()) | {"quarantine": "../../data"}
    with pytest.raises(CorruptMetadataError):
        Header.from_bytes(orjson.dumps(hostile), "x")
