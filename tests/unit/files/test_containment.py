"""Nothing outside the table, ever: hostile journals of every shape, links, and the paths a
destructive run is handed, against the table and the files beside it (driver engine, no Spark)."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from tablekeeper.catalog.filesystem import FileSystemCatalog
from tablekeeper.cli import main
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.commit.staged import staged_table
from tablekeeper.errors import CommitFailed, OutsideTable, SafetyRefusal
from tablekeeper.files.containment import Containment
from tablekeeper.files.deletes import delete_rows
from tablekeeper.files.finish import Finished, finish_journals
from tablekeeper.files.journal import (
    HEADER,
    READY,
    Header,
    JournalWriter,
    Owner,
    Staged,
    encode_rows,
    journals_location,
)
from tablekeeper.files.local import LocalEngine
from tablekeeper.files.rules import PathRules
from tablekeeper.io import FileIO
from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, run_orphans
from tests.support.iceberg_writer import write_rows
from tests.unit.files.test_journal import _table

DAY = 86_400


def _dead() -> Owner:
    """This process's record with another start time: a process that reused the pid, so dead."""
    me = Owner.current()
    return Owner(me.host, me.boot_id, me.pid, me.started + 1, me.pid_namespace, me.machine_id)


def _old(path: Path, data: bytes = b"x", days: float = 5) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stamp = time.time() - days * DAY
    os.utime(path, (stamp, stamp))
    return path


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() and "_tablekeeper" not in p.parts}


def _journal(
    location: str,
    name: str,
    *,
    kind: str = "delete",
    rows: list[tuple[str, str, str, int]] | None = None,
    part: str | None = None,
    staged: tuple[Staged, ...] = (),
    table: str = "db.t",
) -> Path:
    """A journal of a dead run, written by hand (as an attacker, or a broken writer, would)."""
    directory = f"{journals_location(location)}/{name}"
    io = FileIO.for_location(directory)
    header = Header("x", table, name, kind, 1, _dead(), None, PathRules(), staged)  # type: ignore[arg-type]
    io.write(f"{directory}/{HEADER}", header.to_bytes())
    if rows is not None:
        own = f"{directory}/part-00000.jsonl.gz"
        io.write(own, encode_rows([] if part else rows))
        if part is not None:  # the plan names a part elsewhere (same name, so it is not "lost")
            io.write(part, encode_rows(rows))
        body = {"parts": [part or own], "files": len(rows), "bytes": 0}
        io.write(f"{directory}/{READY}", orjson.dumps(body))
    return Path(directory)


def _finish(catalog: FileSystemCatalog, ident: str) -> Finished:
    location = catalog.require(ident).metadata.location
    return finish_journals(
        FileIO.for_location(location), location, lambda: catalog.require(ident), LocalEngine(), 4
    )


@pytest.fixture
def setup(tmp_path: Path) -> tuple[FileSystemCatalog, str, Path, Path]:
    """A table (three appends), and a directory beside it holding someone else's file."""
    catalog, ident = _table(tmp_path)
    location = Path(catalog.require(ident).metadata.location)
    outside = _old(location.parent.parent / "other" / "x.parquet", b"not the table's")
    return catalog, ident, location, outside


def _shapes(location: Path, outside: Path) -> dict[str, dict[str, object]]:
    row = (str(outside), str(outside), "data", 1)
    climb = f"{location}/data/../../../other/{outside.name}"
    return {
        "absolute-path-elsewhere": {"rows": [row]},
        "dot-dot-out-of-the-table": {"rows": [(climb, f"{location}/data/y.parquet", "data", 1)]},
        "file-uri-elsewhere": {"rows": [(f"file://{outside}", "k", "data", 1)]},
        "part-outside-the-journal": {"rows": [row], "part": str(outside.parent / "part-00000.jsonl.gz")},
        "header-of-another-table": {"rows": [row], "table": "db.other"},
        "stage-outside-without-token": {"kind": "stage", "staged": (Staged(str(outside.parent), ""),)},
        "stage-outside-with-token": {"kind": "stage", "staged": (Staged(str(outside.parent), "x"),)},
        "stage-inside-without-token": {"kind": "stage", "staged": (Staged(f"{location}/data", ""),)},
    }


SHAPES = list(_shapes(Path("/t"), Path("/o/x")))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_hostile_journal_deletes_nothing_and_is_left_for_a_person(
    setup: tuple[FileSystemCatalog, str, Path, Path], shape: str
) -> None:
    catalog, ident, location, outside = setup
    stray = _old(location / "data" / "someone-elses-in-flight.parquet")  # unreferenced, inside
    before = _files(location)
    journal = _journal(str(location), f"0000000000001-x-{shape}", **_shapes(location, outside)[shape])  # type: ignore[arg-type]
    done = _finish(catalog, ident)
    assert outside.exists(), shape
    assert _files(location) == before and stray.exists(), shape
    assert done.unreadable and journal.exists(), (shape, done)
    assert done.metric() is not None and done.metric()["unreadable"]  # type: ignore[index]
    # Still there, and still refused, on the next run: a person decides.
    assert _finish(catalog, ident).unreadable and outside.exists()


def test_a_row_key_is_derived_from_its_path(setup: tuple[FileSystemCatalog, str, Path, Path]) -> None:
    """A row pairing a referenced data file with a key nothing references: the file is kept."""
    catalog, ident, location, _ = setup
    live = next(iter((location / "data").rglob("*.parquet")))
    orphan = _old(location / "data" / "orphan.parquet")
    rows = [(str(live), "bogus-key", "data", 1), (str(orphan), str(orphan), "data", 1)]
    journal = _journal(str(location), "0000000000001-x-bogus", rows=rows)
    done = _finish(catalog, ident)
    assert live.exists() and not orphan.exists()
    assert not done.unreadable and not journal.exists()


def test_a_staged_location_through_a_link_is_refused(
    setup: tuple[FileSystemCatalog, str, Path, Path],
) -> None:
    catalog, ident, location, outside = setup
    (location / "data" / "link").symlink_to(outside.parent, target_is_directory=True)
    victim = _old(outside.parent / "tok-1.parquet")
    journal = _journal(
        str(location), "0000000000001-x-link", kind="stage", staged=(Staged(f"{location}/data/link", "tok"),)
    )
    done = _finish(catalog, ident)
    assert victim.exists() and outside.exists()
    assert done.unreadable and journal.exists()


def test_removing_a_journal_never_follows_a_link(setup: tuple[FileSystemCatalog, str, Path, Path]) -> None:
    catalog, ident, location, outside = setup
    journal = _journal(str(location), "0000000000001-x-done", kind="stage")  # nothing left to do
    (journal / "evil").symlink_to(outside.parent, target_is_directory=True)
    done = _finish(catalog, ident)
    assert outside.exists() and not done.unreadable
    assert not (journal / HEADER).exists()  # finished: its own files went, the link's target stayed


def test_an_unreadable_part_is_an_unreadable_journal_and_blocks_nothing_else(
    setup: tuple[FileSystemCatalog, str, Path, Path],
) -> None:
    catalog, ident, location, _ = setup
    orphan = _old(location / "data" / "orphan.parquet")
    bad = _journal(str(location), "0000000000001-x-bad", rows=[(str(orphan), "", "data", 1)])
    (bad / "part-00000.jsonl.gz").write_bytes(b"\x1f\x8b truncated")
    good = _journal(str(location), "0000000000002-x-good", rows=[(str(orphan), "", "data", 1)])
    done = _finish(catalog, ident)
    assert [p for p in done.unreadable if "x-bad" in p]
    assert bad.exists() and not good.exists() and not orphan.exists()


def test_delete_rows_refuses_every_path_outside(tmp_path: Path) -> None:
    """The one check both engines' deletes pass: links, '..', other stores and relative paths."""
    table = tmp_path / "t"
    victim = _old(tmp_path / "o" / "v.parquet")
    (table / "data").mkdir(parents=True)
    (table / "data" / "link").symlink_to(tmp_path / "o", target_is_directory=True)
    own = _old(table / "data" / "mine.parquet")
    containment = Containment.of([str(table)])
    paths = [
        str(victim),
        f"{table}/data/link/v.parquet",
        f"{table}/data/../../o/v.parquet",
        f"file://{victim}",
        f"s3://bucket{table}/data/mine.parquet",
        "o/v.parquet",
        f"{table}-sibling/v.parquet",
    ]
    outcome = delete_rows([(p, p, "data", 1) for p in [*paths, str(own)]], containment)
    assert victim.exists() and not own.exists()
    assert outcome.total == 1 and not outcome.failures
    assert sorted(p for p, _ in outcome.refused) == sorted(paths)
    with pytest.raises(OutsideTable):
        containment.check_directory(f"{table}/data/link", "--location")
    # A table (or its write.data.path) at the root of a disk or bucket would reach everything.
    for root in ("/", "file:///", "s3://bucket", "s3://bucket/", "relative/t", f"{table}/../o"):
        with pytest.raises(SafetyRefusal, match="plain absolute location"):
            Containment.of([str(table), root])


def _orphans(catalog: FileSystemCatalog, ident: str, **kw: object) -> dict[str, object]:
    options = RemoveOrphansOptions(
        table=ident, older_than="1s", force_short_retention=True, engine="driver", **kw
    )  # type: ignore[arg-type]
    return dict(run_orphans(options, catalog, ident).metrics)


def test_remove_orphans_never_follows_a_linked_directory(
    setup: tuple[FileSystemCatalog, str, Path, Path],
) -> None:
    catalog, ident, location, outside = setup
    victims = [_old(outside.parent / f"v{i}.parquet") for i in range(4)]
    (location / "data" / "link").symlink_to(outside.parent, target_is_directory=True)
    orphan = _old(location / "data" / "orphan.parquet")
    metrics = _orphans(catalog, ident)
    assert all(v.exists() for v in victims) and outside.exists()
    assert not orphan.exists() and metrics["deleted_files_count"] == 1
    with pytest.raises(OutsideTable):
        _orphans(catalog, ident, location=f"{location}/data/link")
    with pytest.raises(SafetyRefusal):
        _orphans(catalog, ident, location=f"{location}/data/../../other")
    assert all(v.exists() for v in victims)


def test_remove_orphans_keeps_what_a_live_staging_run_wrote_whatever_the_retention(
    setup: tuple[FileSystemCatalog, str, Path, Path],
) -> None:
    """A compact in flight: its journal names its directories by token. A remove-orphans with a
    short retention beside it deletes none of them (then the compact's commit finds them)."""
    catalog, ident, location, _ = setup
    table = catalog.require(ident)
    io = FileIO.for_location(str(location))
    staged = (
        Staged(f"{location}/data", "compact-tok-", directories=True),
        Staged(f"{location}/metadata", "tok"),
    )
    with JournalWriter.start(io, str(location), job="compact", table=ident, kind="stage", staged=staged) as j:
        written = [
            _old(location / "data" / "compact-tok-0" / "part-0.parquet"),
            _old(location / "data" / "compact-tok-1" / "a=1" / "part-1.parquet"),
            _old(location / "metadata" / "tok-m0.avro"),
        ]
        orphan = _old(location / "data" / "orphan.parquet")
        metrics = _orphans(catalog, ident)
        assert all(p.exists() for p in written) and not orphan.exists()
        assert metrics["deleted_files_count"] == 1
        j.remove()
    assert catalog.require(ident).metadata_location == table.metadata_location


def test_a_staged_commit_checks_its_files_still_exist(
    setup: tuple[FileSystemCatalog, str, Path, Path],
) -> None:
    """A staged run whose manifest list something deleted meanwhile commits nothing."""
    catalog, ident, _, _ = setup
    base = catalog.require(ident)
    with pytest.raises(CommitFailed, match="are gone"), staged_table(catalog, ident, base, "test") as run:
        Committer(run.table, ident, file_prefix=run.token).commit_snapshot(
            SnapshotChange("append", added_files=())
        )
        current = run.table.current
        assert current is not None and current.current_snapshot() is not None
        listed = current.current_snapshot().manifest_list  # type: ignore[union-attr]
        assert listed
        FileIO.for_location(listed).delete(listed)
    assert catalog.require(ident).metadata_location == base.metadata_location


COPIED: list[tuple[str, list[str]]] = [
    ("expire-snapshots", ["--older-than", "{future}", "--retain-last", "1", "--engine", "driver"]),
    ("remove-orphans", ["--engine", "driver"]),
    ("compact", []),
    ("rewrite-manifests", []),
    ("rewrite-position-deletes", []),
    ("compute-stats", []),
    ("backfill-row-lineage", []),
]


@pytest.mark.parametrize(("job", "extra"), COPIED, ids=[c[0] for c in COPIED])
def test_a_table_copied_as_files_is_refused_by_every_job(
    setup: tuple[FileSystemCatalog, str, Path, Path],
    tmp_path: Path,
    job: str,
    extra: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The copy's metadata still names the original's location: whatever a job wrote or deleted
    there would land in the original. Refused before anything is read beyond the metadata."""
    _, _, location, outside = setup
    copy = tmp_path / "copy"
    shutil.copytree(location, copy)
    for p in [*location.rglob("*"), *copy.rglob("*")]:
        stamp = time.time() - 5 * DAY
        os.utime(p, (stamp, stamp))
    before = {p: p.stat().st_mtime_ns for p in _files(location) | _files(copy)}
    future = str(int(time.time() * 1000) + 3_600_000)
    code = main([job, "--table", str(copy), *[a.format(future=future) for a in extra]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and err and "copied or moved" in err[-1], (job, err[-3:])
    assert {p: p.stat().st_mtime_ns for p in _files(location) | _files(copy)} == before
    assert outside.exists()


def test_a_journals_directory_linked_elsewhere_is_refused(
    setup: tuple[FileSystemCatalog, str, Path, Path],
) -> None:
    """The journals directory itself a link: finishing would remove the files of whatever
    journal-shaped directories it reaches. Refused by name; nothing there is touched."""
    catalog, ident, location, outside = setup
    fake = outside.parent / "journals"
    _journal(str(outside.parent / "t"), "0000000000001-x-run", kind="stage")  # a journal-shaped dir
    journal_dir = next((outside.parent / "t").rglob(HEADER)).parent
    fake.symlink_to(journal_dir.parent, target_is_directory=True)
    (location / "metadata" / "_tablekeeper").mkdir(parents=True)
    (location / "metadata" / "_tablekeeper" / "journals").symlink_to(fake, target_is_directory=True)
    with pytest.raises(OutsideTable, match="journals directory"):
        _finish(catalog, ident)
    assert (journal_dir / HEADER).exists() and outside.exists()


def test_expire_keeps_a_file_outside_the_table_and_no_journal_for_it(
    setup: tuple[FileSystemCatalog, str, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A file an expired snapshot reached outside the table (imported, or a converted table's
    source) is never deleted and is reported; since no run will ever delete it, no journal waits
    for it: the next run finds nothing to finish."""
    catalog, ident, location, _ = setup
    (written,) = write_rows(catalog.require(ident).metadata, [{"id": 9, "s": "imported"}])
    imported = location.parent.parent / "imported" / "x.parquet"
    imported.parent.mkdir()
    shutil.move(written.file_path, imported)
    outside = replace(written, file_path=str(imported))
    Committer(catalog, ident).commit_snapshot(SnapshotChange("append", added_files=(outside,)))
    Committer(catalog, ident).commit_snapshot(
        SnapshotChange("delete", removed_paths=frozenset({str(imported)}))
    )
    future = str(int(time.time() * 1000) + 3_600_000)
    args = ["--table", str(location), "--older-than", future, "--retain-last", "1", "--engine", "driver"]
    assert main(["expire-snapshots", *args]) == 0
    result = orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])
    metrics = result["metrics"]
    assert imported.exists()
    assert metrics["kept_outside_table_count"] == 1 and metrics["failed_deletes_count"] == 0
    assert metrics["kept_outside_table"][0].startswith(str(imported))
    assert not list(Path(journals_location(str(location))).glob("*"))
