"""remove-orphans and expire-snapshots on Delta paths: delta-spark's VACUUM and log cleanup."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tablekeeper.cli import main
from tablekeeper.jobs.common.delta_maintenance import LISTING_PARALLELISM

pytestmark = pytest.mark.spark


def _delta(spark, path: Path) -> None:  # type: ignore[no-untyped-def]
    for i in range(3):
        spark.range(i * 10, i * 10 + 10).selectExpr("id", "id % 3 AS g").write.format("delta").mode(
            "append"
        ).save(str(path))
    spark.range(100, 105).selectExpr("id", "id % 3 AS g").write.format("delta").mode("overwrite").save(
        str(path)
    )
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 101")


def _result(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    out = capsys.readouterr().out.strip().splitlines()
    return json.loads(out[-1])  # type: ignore[no-any-return]


def test_vacuum_dry_run_matches_delta_and_real_run_keeps_the_table(spark, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t"
    _delta(spark, path)
    before = sorted(tuple(r) for r in spark.read.format("delta").load(str(path)).collect())
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    # Local sessions list with a few tasks (conf/spark-defaults.conf), not Spark's 10,000.
    listing = spark.conf.get(LISTING_PARALLELISM, None)
    spark.conf.set(LISTING_PARALLELISM, "8")
    try:
        theirs = sorted(
            str(r[0]) for r in spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS DRY RUN").collect()
        )
    finally:
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "true")
        if listing is None:
            spark.conf.unset(LISTING_PARALLELISM)
        else:
            spark.conf.set(LISTING_PARALLELISM, listing)
    assert theirs, "overwrite and delete left no removed files: the scenario is too weak"

    args = ["remove-orphans", "--table", str(path), "--older-than", "0s", "--force-short-retention"]
    assert main([*args, "--dry-run"]) == 0
    dry = _result(capsys)
    assert dry["status"] == "dry_run" and dry["files"] == theirs
    assert all(Path(p.removeprefix("file:")).exists() for p in theirs)

    # delta-spark's parallel delete, as many tasks as --max-concurrent-deletes asks, set for VACUUM only.
    assert main([*args, "--max-concurrent-deletes", "2"]) == 0
    assert spark.conf.get("spark.databricks.delta.vacuum.parallelDelete.parallelism", None) is None
    done = _result(capsys)
    assert done["metrics"]["deleted_files_count"] == len(theirs)  # type: ignore[index]
    assert not any(Path(p.removeprefix("file:")).exists() for p in theirs)
    after = sorted(tuple(r) for r in spark.read.format("delta").load(str(path)).collect())
    assert after == before
    assert spark.conf.get("spark.databricks.delta.retentionDurationCheck.enabled") == "true"
    assert spark.conf.get(LISTING_PARALLELISM, None) == listing  # the job put the session back


def test_vacuum_below_the_retention_floor_is_refused(spark, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t"
    _delta(spark, path)
    files = set(path.rglob("*.parquet"))
    code = main(["remove-orphans", "--table", str(path), "--older-than", "1h"])
    assert code == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "retention" in err and "--force-short-retention" in err
    assert set(path.rglob("*.parquet")) == files


def test_expire_on_delta_checkpoints_and_cleans_old_log_files(spark, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t"
    _delta(spark, path)
    before = sorted(tuple(r) for r in spark.read.format("delta").load(str(path)).collect())
    log = path / "_delta_log"
    old = time.time() - 60 * 86_400  # beyond the default 30-day log retention
    for p in log.iterdir():
        os.utime(p, (old, old))
    commits_before = sorted(p.name for p in log.glob("*.json"))
    assert main(["expire-snapshots", "--table", str(path)]) == 0
    result = _result(capsys)
    metrics = result["metrics"]
    assert metrics["checkpoint_version"] == len(commits_before) - 1  # type: ignore[index]
    assert (log / f"{len(commits_before) - 1:020d}.checkpoint.parquet").exists()
    assert metrics["deleted_log_files_count"] > 0  # type: ignore[index,operator]
    assert sorted(p.name for p in log.glob("*.json")) != commits_before
    after = sorted(tuple(r) for r in spark.read.format("delta").load(str(path)).collect())
    assert after == before
