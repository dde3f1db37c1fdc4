"""Nothing outside the table on the Spark engine: its listing tasks never follow a linked
directory, and its delete tasks refuse a hostile journal's paths (the driver engine's cases are
in tests/unit/files/test_containment.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tablekeeper import faults
from tablekeeper.files.containment import Containment
from tablekeeper.files.finish import finish_journals
from tablekeeper.files.journal import JournalWriter, Staged
from tablekeeper.io import FileIO
from tablekeeper.jobs.compact import CompactOptions, run_compact
from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, run_orphans
from tablekeeper.spark.maintenance import SparkEngine
from tablekeeper.tables.iceberg import iter_live_entries, load_manifests
from tests.unit.files.test_containment import _journal, _old
from tests.unit.files.test_journal import _table

pytestmark = pytest.mark.spark


def test_spark_engine_stays_inside_the_table(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    catalog, ident = _table(tmp_path, appends=1)
    location = Path(catalog.require(ident).metadata.location)
    elsewhere = tmp_path / "elsewhere"
    victims = [_old(elsewhere / f"v{i}.parquet") for i in range(4)]
    # Links at the depth the driver lists and deeper, where the listing tasks list.
    (location / "data" / "link").symlink_to(elsewhere, target_is_directory=True)
    (location / "data" / "a=1" / "b=2").mkdir(parents=True)
    (location / "data" / "a=1" / "b=2" / "link").symlink_to(elsewhere, target_is_directory=True)
    orphan = _old(location / "data" / "a=1" / "b=2" / "orphan.parquet")
    # A staging run in flight beside a short retention: what its journal names is never an orphan.
    staged = (Staged(f"{location}/data", "compact-tok-", directories=True),)
    io = FileIO.for_location(str(location))
    live = JournalWriter.start(io, str(location), job="compact", table=ident, kind="stage", staged=staged)
    written = _old(location / "data" / "compact-tok-0" / "part-0.parquet")
    options = RemoveOrphansOptions(table=ident, older_than="1s", force_short_retention=True, engine="spark")
    metrics = run_orphans(options, catalog, ident, spark).metrics
    assert metrics["engine"] == "spark" and metrics["deleted_files_count"] == 1
    assert all(v.exists() for v in victims) and not orphan.exists() and written.exists()
    live.remove()

    # A dead run's journal naming a file elsewhere, finished by the Spark engine: left alone.
    journal = _journal(str(location), "0000000000001-x-hostile", rows=[(str(victims[0]), "k", "data", 1)])
    engine = SparkEngine(spark, "test")
    done = finish_journals(
        FileIO.for_location(str(location)), str(location), lambda: catalog.require(ident), engine, 2
    )
    assert done.unreadable and journal.exists() and victims[0].exists()
    # And the delete tasks themselves refuse it, whatever hands them the rows.
    rows = [(str(v), "k", "data", 1) for v in victims] + [
        (f"{location}/data/link/v1.parquet", "k", "data", 1)
    ]
    outcome = engine.delete(rows, None, 2, Containment.of([str(location)]))
    assert outcome.total == 0 and not outcome.failures and len(outcome.refused) == 5
    assert all(v.exists() for v in victims)


def test_a_short_retention_remove_orphans_during_a_compact_deletes_none_of_its_files(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """remove-orphans runs (its retention forced short, every file made old) right before the
    compact commits: the files compact staged are named by its live journal, so none goes, and
    the compact commits a table whose every file is there."""
    catalog, ident = _table(tmp_path, appends=6)
    location = Path(catalog.require(ident).metadata.location)
    orphan = _old(location / "data" / "orphan.parquet")
    ran: list[dict[str, object]] = []

    def beside(phase: str) -> None:
        if phase != "stage.written" or ran:
            return
        for p in location.rglob("*"):
            if p.is_file() and "_tablekeeper" not in p.parts:
                os.utime(p, (time.time() - 5 * 86_400,) * 2)
        options = RemoveOrphansOptions(
            table=ident, older_than="1s", force_short_retention=True, engine="driver"
        )
        ran.append(dict(run_orphans(options, catalog, ident).metrics))

    monkeypatch.setattr(faults, "kill_point", beside)
    result = run_compact(CompactOptions(table=ident, min_input_files=2), catalog, ident, spark)
    assert ran and ran[0]["deleted_files_count"] == 1 and not orphan.exists(), ran
    assert result.status == "ok" and result.metrics["rewritten_data_files_count"] == 6, result.metrics
    table = catalog.require(ident)
    snapshot = table.metadata.current_snapshot()
    assert snapshot is not None and snapshot.manifest_list is not None
    referenced = [snapshot.manifest_list]
    for manifest in load_manifests(table.io, snapshot):
        referenced.append(manifest.manifest_path)
    referenced += [e.data_file.file_path for e in iter_live_entries(table.io, table.metadata, snapshot)]
    assert [p for p in referenced if not Path(p).exists()] == []
