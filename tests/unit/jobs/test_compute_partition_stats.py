"""compute-stats --partition-stats-only without Spark: dry run, commit, a second run with nothing
to do, --recompute; the file is reachable for remove-orphans while registered, and expire-snapshots
deletes it with its snapshot. The command line refuses --columns with it."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.cli import main
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.content import DATA, DataFile
from tablekeeper.jobs.common.context import JobContext
from tablekeeper.jobs.compute_stats import ComputeStatsOptions, run_compute_stats
from tablekeeper.jobs.expire_snapshots import ExpireSnapshotsOptions, run_expire
from tablekeeper.jobs.health.iceberg import _statistics
from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, run_orphans
from tablekeeper.tables.partition_stats import compute_partition_stats, read_partition_stats
from tests.support.partitioned_tables import evolved_table
from tests.support.small_tables import CATALOGS_YAML, sql_table


def _no_spark() -> None:
    raise AssertionError("partition statistics alone need no Spark session")


def _run(catalog: SqlCatalog, **options: object) -> dict[str, object]:
    context = JobContext.__new__(JobContext)
    object.__setattr__(context, "spark", _no_spark)
    result = run_compute_stats(ComputeStatsOptions("db.t", **options), catalog, "db.t", context)  # type: ignore[arg-type]
    return dict(result.metrics)


def _orphans(catalog: SqlCatalog, location: str, out: Path) -> list[str]:
    # Everything under the table ten days old, so only reachability decides.
    old = time.time() - 10 * 86400
    for path in Path(location.removeprefix("file://")).rglob("*"):
        os.utime(path, (old, old))
    listed = out / "orphans.txt"
    options = RemoveOrphansOptions("db.t", dry_run=True, engine="driver", file_list=str(listed))
    run_orphans(options, catalog, "db.t")
    return listed.read_text().splitlines()


def test_partition_stats_only_commits_reruns_and_stays_reachable(tmp_path: Path) -> None:
    catalog, ids = evolved_table(tmp_path, 3)
    before = catalog.require("db.t")
    snapshot_id = before.metadata.current_snapshot_id
    assert snapshot_id == ids[-1]

    dry = _run(catalog, partition_stats_only=True, dry_run=True)
    assert dry == {
        "snapshot_id": snapshot_id,
        "replaced_partition_statistics_file": None,
        "partition_statistics_file": None,
        "partitions": 3,
    }
    assert catalog.require("db.t").metadata_location == before.metadata_location

    first = _run(catalog, partition_stats_only=True)
    path = first["partition_statistics_file"]
    assert isinstance(path, str)
    assert re.fullmatch(
        rf"{before.metadata.location}/metadata/partition-stats-{snapshot_id}-[0-9a-f-]{{36}}\.parquet", path
    )
    after = catalog.require("db.t")
    (entry,) = after.metadata.partition_statistics
    assert (entry.snapshot_id, entry.statistics_path) == (snapshot_id, path)
    assert entry.file_size_in_bytes == first["partition_statistics_file_size_in_bytes"] == after.io.size(path)
    assert after.metadata.statistics == ()  # no sketches asked for
    snapshot = after.metadata.current_snapshot()
    assert snapshot is not None
    assert read_partition_stats(after.io, after.metadata) == compute_partition_stats(
        after.io, after.metadata, snapshot
    )

    # health reports the file and the partitions with the most data files.
    metrics: dict[str, object] = {}
    notes: list[str] = []
    _statistics(metrics, after, "db.t", notes)
    assert notes == []
    assert metrics["partition_stats"] == {
        "file": path,
        "partitions": 3,
        "top_by_data_files": [
            {
                "spec_id": 1,  # as many files as the next, more bytes
                "partition": {"cat": "a", "id_bucket": 1},
                "data_files": 1,
                "data_records": 20,
                "data_bytes": 200,
                "delete_files": 1,
                "last_updated_at": after.metadata.snapshot(ids[2]).timestamp_ms,  # type: ignore[union-attr]
            },
            {
                "spec_id": 0,
                "partition": {"cat": "a", "id_bucket": None},
                "data_files": 1,
                "data_records": 10,
                "data_bytes": 100,
                "delete_files": 1,
                "last_updated_at": after.metadata.snapshot(ids[2]).timestamp_ms,  # type: ignore[union-attr]
            },
            {
                "spec_id": 0,
                "partition": {"cat": "b", "id_bucket": None},
                "data_files": 0,
                "data_records": 0,
                "data_bytes": 0,
                "delete_files": 0,
                "last_updated_at": after.metadata.snapshot(ids[3]).timestamp_ms,  # type: ignore[union-attr]
            },
        ],
    }
    _statistics(metrics, before, "db.t", notes)  # nothing registered yet
    assert metrics["partition_stats"] == {"file": None, "partitions": None, "top_by_data_files": []}

    again = _run(catalog, partition_stats_only=True)
    assert again["partition_statistics_file"] == path and "nothing to do" in str(again["note"])
    assert catalog.require("db.t").metadata_location == after.metadata_location

    redo = _run(catalog, partition_stats_only=True, recompute=True)
    assert redo["replaced_partition_statistics_file"] == path and redo["partition_statistics_file"] != path
    replaced = catalog.require("db.t")
    assert [p.statistics_path for p in replaced.metadata.partition_statistics] == [
        redo["partition_statistics_file"]
    ]

    # The registered file is reachable; the replaced one, no longer referenced, is an orphan.
    orphans = _orphans(catalog, before.metadata.location, tmp_path)
    assert path in orphans and redo["partition_statistics_file"] not in orphans

    # A registered file that is gone: health says so, and a run recomputes it.
    current = str(redo["partition_statistics_file"])
    saved = Path(current.removeprefix("file://")).read_bytes()
    Path(current.removeprefix("file://")).unlink()
    _statistics(metrics, catalog.require("db.t"), "db.t", notes)
    assert metrics["partition_stats"] == {"file": current, "partitions": None, "top_by_data_files": []}
    assert len(notes) == 1 and f"{current} of snapshot {snapshot_id} is missing" in notes[0]
    assert _run(catalog, partition_stats_only=True, dry_run=True)["note"] == (
        f"partition statistics file {current} is missing: recomputed"
    )
    Path(current.removeprefix("file://")).write_bytes(saved)

    # A new snapshot, then expiry of the old one deletes its partition statistics file too.
    location = before.metadata.location
    time.sleep(0.002)
    Committer(catalog, "db.t").commit_snapshot(
        SnapshotChange(
            "append",
            added_files=(DataFile(DATA, f"{location}/data/c.parquet", "PARQUET", ("c", 0), 1, 9, spec_id=1),),
        )
    )
    expired = run_expire(
        ExpireSnapshotsOptions("db.t", snapshot_ids=(snapshot_id,), engine="driver"), catalog, "db.t"
    )
    assert expired.metrics["deleted_statistics_files_count"] == 1
    assert catalog.require("db.t").metadata.partition_statistics == ()
    assert not Path(str(redo["partition_statistics_file"]).removeprefix("file://")).exists()


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evolved_table(tmp_path, 2)
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(CATALOGS_YAML)
    base = ["compute-stats", "--table", "db.t", "--conf-file", str(conf), "--warehouse", str(tmp_path)]
    assert main([*base, "--partition-stats-only", "--columns", "id"]) == 2
    assert "--partition-stats-only computes no sketches" in capsys.readouterr().err
    assert main([*base, "--partition-stats-only"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["status"] == "ok" and result["metrics"]["partitions"] == 3
    with pytest.raises(ConfigError, match="--partition-stats-only"):
        ComputeStatsOptions("db.t", columns=("id",), partition_stats_only=True)


def test_an_unpartitioned_table_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf, _ = sql_table(tmp_path, [("a.parquet", 1, 10)], format_version=2)
    before = SqlCatalog("c", f"sqlite:///{tmp_path}/c.db", str(tmp_path)).require("db.t").metadata_location
    argv = ["compute-stats", "--table", "db.t", "--conf-file", str(conf), "--warehouse", str(tmp_path)]
    assert main([*argv, "--partition-stats-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "db.t is unpartitioned" in err and "'Table must be partitioned'" in err
    assert err.endswith("leave out --partition-stats-only")
    assert (
        SqlCatalog("c", f"sqlite:///{tmp_path}/c.db", str(tmp_path)).require("db.t").metadata_location
        == before
    )
