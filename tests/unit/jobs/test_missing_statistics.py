"""A statistics entry whose Puffin file is missing covers nothing: compute-stats recomputes it and
health reports it (no Spark)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tablekeeper.catalog import LoadedTable
from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.iceberg.metadata import BlobMetadata, StatisticsFile
from tablekeeper.iceberg.statistics import THETA_BLOB_TYPE
from tablekeeper.jobs.common.context import JobContext
from tablekeeper.jobs.compute_stats import ComputeStatsOptions, run_compute_stats
from tablekeeper.jobs.health.iceberg import _statistics
from tests.support.small_tables import sql_table


def with_statistics(tmp_path: Path, write_file: bool) -> tuple[SqlCatalog, LoadedTable, str]:
    sql_table(tmp_path, [("a.parquet", 1, 10)], format_version=2)
    catalog = SqlCatalog("c", f"sqlite:///{tmp_path}/c.db", str(tmp_path))
    loaded = catalog.load_table("db.t")
    snapshot = loaded.metadata.current_snapshot()
    assert snapshot is not None
    path = str(tmp_path / "stats" / f"{snapshot.snapshot_id}.stats")
    if write_file:
        Path(path).parent.mkdir(parents=True)
        Path(path).write_bytes(b"PFA1")
    blob = BlobMetadata(THETA_BLOB_TYPE, snapshot.snapshot_id, snapshot.sequence_number, (1,))
    entry = StatisticsFile(snapshot.snapshot_id, path, 4, 0, blob_metadata=(blob,))
    return catalog, replace(loaded, metadata=replace(loaded.metadata, statistics=(entry,))), path


def run_dry(tmp_path: Path, table: LoadedTable, catalog: SqlCatalog) -> dict[str, object]:
    catalog.require = lambda identifier: table  # type: ignore[method-assign]
    context = JobContext.__new__(JobContext)
    result = run_compute_stats(ComputeStatsOptions(table="db.t", dry_run=True), catalog, "db.t", context)
    return dict(result.metrics)


def test_compute_stats_recomputes_an_entry_whose_file_is_missing(tmp_path: Path) -> None:
    catalog, table, path = with_statistics(tmp_path, write_file=False)
    metrics = run_dry(tmp_path, table, catalog)
    assert metrics["note"] == f"statistics file {path} is missing: recomputed"
    assert metrics["replaced_statistics_file"] == path


def test_compute_stats_keeps_an_entry_whose_file_is_there(tmp_path: Path) -> None:
    catalog, table, path = with_statistics(tmp_path, write_file=True)
    metrics = run_dry(tmp_path, table, catalog)
    assert "nothing to do" in str(metrics["note"]) and metrics["statistics_file"] == path


def test_health_reports_a_missing_statistics_file(tmp_path: Path) -> None:
    _, table, path = with_statistics(tmp_path, write_file=False)
    metrics: dict[str, object] = {}
    notes: list[str] = []
    _statistics(metrics, table, "db.t", notes)
    assert metrics["missing_statistics_files"] == 1
    assert len(notes) == 1 and path in notes[0] and "compute-stats --table db.t --snapshot" in notes[0]
