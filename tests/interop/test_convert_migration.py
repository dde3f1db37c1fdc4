"""A Delta to Iceberg migration as it runs for weeks: verified conversions, and converted history
that Delta's OPTIMIZE and VACUUM never leave unreadable.

delta-spark writes, optimizes and vacuums the table; tablekeeper converts it with ``--history all``
after every change, as a schedule would; Iceberg Spark must read every snapshot the target keeps
with delta-spark's rows at that version, and ``expire-snapshots --metadata-only`` must leave every
Delta file in place.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tablekeeper import clock
from tablekeeper.catalog import catalog_for
from tablekeeper.cli import main
from tablekeeper.errors import ExitCode, SafetyRefusal, exit_code
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tablekeeper.jobs.convert_delta import versions as convert_versions
from tablekeeper.jobs.convert_delta.delta_files import WrittenDeletes
from tablekeeper.jobs.convert_delta.verify import VerificationFailed
from tablekeeper.jobs.expire_snapshots import ExpireSnapshotsOptions, run_expire
from tests.conftest import SQL_CATALOG
from tests.interop.test_convert_history import snapshots_by_version

pytestmark = pytest.mark.spark

NS = "migration"


def _catalog(catalogs: Any):  # type: ignore[no-untyped-def]
    return catalog_for(catalogs.get(SQL_CATALOG))


def _orders(
    spark: SparkSession, source: Path, lo: int, hi: int, mode: str = "append", **options: str
) -> None:
    df = spark.range(lo, hi).selectExpr("id", "CAST(id % 3 AS STRING) AS region", "id * 2.5 AS amount")
    writer = df.repartition(4).write.format("delta").mode(mode).partitionBy("region")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(str(source))


def _delta_files(source: Path) -> set[str]:
    return {
        str(p.relative_to(source)) for p in source.rglob("*") if p.is_file() and "_delta_log" not in p.parts
    }


# -----------------------------------------------------------------------------------------------
# Verification


def test_verification_catches_a_corrupted_conversion(spark, catalogs, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "orders"
    _orders(spark, source, 0, 300, **{"delta.enableDeletionVectors": "true"})  # v0
    _orders(spark, source, 300, 400)  # v1
    spark.sql(f"DELETE FROM delta.`{source}` WHERE id % 7 = 0")  # v2: deletion vectors
    catalog = _catalog(catalogs)

    # A stat changed: one file of region 1 in version 1 claims a row more than it holds.
    real = convert_versions.data_files

    def miscount(adds, snapshot, *args):  # type: ignore[no-untyped-def]
        files = real(adds, snapshot, *args)
        if snapshot.version != 1:
            return files
        hit = next((i for i, f in enumerate(files) if f.partition == ("1",)), None)
        return [replace(f, record_count=f.record_count + 1) if i == hit else f for i, f in enumerate(files)]

    monkeypatch.setattr(convert_versions, "data_files", miscount)
    options = ConvertDeltaOptions(
        source=str(source), target=f"{NS}.corrupt", history="all", verify="metadata"
    )
    with pytest.raises(VerificationFailed) as info:
        run_convert(options, catalog)
    message = str(info.value)
    assert "Delta version 1, partition ('1',)" in message and "nothing was published" in message
    assert exit_code(info.value) == ExitCode.REFUSED
    assert not catalog.table_exists(f"{NS}.corrupt")

    # The same corruption without --verify converts "successfully": the check is what catches it.
    unverified = run_convert(replace(options, verify="off"), catalog)
    assert unverified.status == "ok" and unverified.metrics["verified"] is None
    monkeypatch.undo()

    # Deletion vectors lost: every row they delete would come back.
    monkeypatch.setattr(convert_versions, "delete_files", lambda *a, **k: WrittenDeletes((), ()))
    with pytest.raises(VerificationFailed, match=r"Delta version 2, partition .*Delta holds \d+ live rows"):
        run_convert(replace(options, target=f"{NS}.no_dvs"), catalog)
    assert not catalog.table_exists(f"{NS}.no_dvs")
    monkeypatch.undo()

    # Through the command line: exit code 3 and one JSON result naming the version.
    monkeypatch.setattr(convert_versions, "data_files", miscount)
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(
        "default: c\ncatalogs:\n"
        f"  c: {{type: sql, uri: 'sqlite:///{tmp_path}/c.db', warehouse: '{tmp_path}/wh'}}\n"
    )
    result_file = tmp_path / "result.json"
    args = ["convert-delta", "--source", str(source), "--target", f"{NS}.cli", "--history", "all"]
    args += ["--conf-file", str(conf), "--verify", "--engine", "driver", "--result-file", str(result_file)]
    assert main(args) == ExitCode.REFUSED
    result = json.loads(result_file.read_text())
    assert result["status"] == "refused" and "Delta version 1" in result["error"]
    monkeypatch.undo()

    # Untouched, every version verifies; with rows, Spark counts agree too.
    ok = run_convert(replace(options, target=f"{NS}.verified", verify="rows"), catalog, spark)
    assert ok.metrics["verified"] == {
        "mode": "rows",
        "versions_verified": 3,
        "partitions_verified": 9,
        "versions_row_counted": 3,
    }


# -----------------------------------------------------------------------------------------------
# The migration


class DeltaRows:
    """delta-spark's rows at each version, taken as the version is written: delta-spark refuses
    to time travel past the short retention this scenario runs with."""

    def __init__(self, spark: SparkSession, source: Path) -> None:
        self.spark, self.source, self.at = spark, source, {}

    def take(self, vacuumed: bool = False) -> int:
        """The newest version's rows; ``vacuumed``: the commits since the last one taken are
        VACUUM's, which change no rows."""
        version = max(int(p.stem) for p in (self.source / "_delta_log").glob("*.json"))
        rows = _sorted(self.spark.read.format("delta").load(str(self.source)))
        if vacuumed:
            last = max(self.at)
            assert rows == self.at[last]
            self.at |= dict.fromkeys(range(last + 1, version), rows)
        self.at[version] = rows
        return version


def vacuum_keeping_nothing(spark: SparkSession, source: Path) -> None:
    """delta-spark's VACUUM with no retention: every file no version still needs goes at once."""
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        spark.sql(f"VACUUM delta.`{source}` RETAIN 0 HOURS")
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")


def _sorted(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select("id", "region", "amount").collect())


def assert_retained_snapshots_read_like_delta(
    spark: SparkSession, target: str, delta: DeltaRows
) -> list[int]:
    """Every snapshot the target keeps reads through Iceberg Spark (which fails when a file it
    references is gone) with delta-spark's rows at its version; returns the versions kept."""
    table = f"{SQL_CATALOG}.{target}"
    spark.sql(f"REFRESH TABLE {table}")
    kept = snapshots_by_version(spark, table)
    for version, snapshot_id in sorted(kept.items()):
        rows = _sorted(spark.sql(f"SELECT * FROM {table} VERSION AS OF {snapshot_id}"))
        assert rows == delta.at[version], f"{target} at Delta version {version}"
    return sorted(kept)


def test_migration_with_optimize_and_vacuum(spark, catalogs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "orders"
    target = f"{NS}.orders"
    catalog = _catalog(catalogs)
    delta = DeltaRows(spark, source)
    # An hour: the run right after OPTIMIZE is within it however busy the runner; the run "past
    # it" reads a clock moved an hour on (tablekeeper's injected clock), and delta-spark's VACUUM
    # is told to keep nothing, as it would after the hour: no test waits out a retention.
    retention_s = 3600
    retention = "interval 1 hours"
    _orders(
        spark,
        source,
        0,
        200,
        **{"delta.enableDeletionVectors": "true", "delta.deletedFileRetentionDuration": retention},
    )  # v0
    assert delta.take() == 0

    def sync() -> dict[str, Any]:
        mode = "incremental" if catalog.table_exists(target) else "full"
        options = ConvertDeltaOptions(
            source=str(source), target=target, mode=mode, history="all", format_version=3, verify="metadata"
        )
        return run_convert(options, catalog).metrics

    assert sync()["expired_for_vacuum"] is None
    _orders(spark, source, 200, 300)  # v1
    assert delta.take() == 1
    spark.sql(f"DELETE FROM delta.`{source}` WHERE id % 5 = 0")  # v2
    assert delta.take() == 2
    assert sync()["versions_converted"] == 2
    assert assert_retained_snapshots_read_like_delta(spark, target, delta) == [0, 1, 2]

    # OPTIMIZE removes every small file; within the retention nothing is at risk yet.
    spark.sql(f"OPTIMIZE delta.`{source}`")  # v3
    optimized_by = time.time()  # the removes' deletionTimestamp is at most this
    assert delta.take() == 3
    first = sync()
    assert first["expired_for_vacuum"] is None and first["verified"]["versions_verified"] == 1
    # Past the retention, a scheduled run (with nothing new to convert) expires the snapshots
    # that reference the removed files, before VACUUM can break them.
    with clock.injected(lambda: optimized_by + retention_s + 1):
        second = sync()
    assert second["versions_converted"] == 0
    expired = second["expired_for_vacuum"]
    assert expired["delta_versions"] == [0, 1, 2], expired
    assert "deletedFileRetentionDuration" in expired["reason"]
    assert expired["deleted_manifest_lists_count"] == 3
    # The first full command, run again (a retry after a kill, a DAG rerun): its work is done,
    # although the versions VACUUM broke are gone from the target.
    again = ConvertDeltaOptions(source=str(source), target=target, history="all", format_version=3)
    assert run_convert(again, catalog).metrics["note"] == "already converted"
    before_vacuum = _delta_files(source)
    vacuum_keeping_nothing(spark, source)  # VACUUM START and END commits
    assert _delta_files(source) < before_vacuum  # VACUUM did delete files
    assert assert_retained_snapshots_read_like_delta(spark, target, delta) == [3]
    vacuumed = sync()
    assert vacuumed["versions_converted"] == 2 and vacuumed["expired_for_vacuum"] is None
    delta.take(vacuumed=True)
    assert assert_retained_snapshots_read_like_delta(spark, target, delta) == [3, 4, 5]

    # A day's retention from now on, then a VACUUM with a shorter one: the files are gone at
    # once, and the next run finds the snapshots that reference them missing files and expires them.
    spark.sql(
        f"ALTER TABLE delta.`{source}` "
        "SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = 'interval 1 days')"
    )
    delta.take()
    _orders(spark, source, 300, 360)
    delta.take()
    spark.sql(f"UPDATE delta.`{source}` SET amount = -amount WHERE id % 11 = 0")
    updated = delta.take()
    assert sync()["versions_converted"] == 3
    assert assert_retained_snapshots_read_like_delta(spark, target, delta) == list(range(3, updated + 1))
    spark.sql(f"OPTIMIZE delta.`{source}`")
    optimized = delta.take()
    within = sync()
    assert within["versions_converted"] == 1 and within["expired_for_vacuum"] is None
    vacuum_keeping_nothing(spark, source)
    after = sync()
    assert after["expired_for_vacuum"]["delta_versions"] == list(range(3, optimized))
    delta.take(vacuumed=True)
    kept = assert_retained_snapshots_read_like_delta(spark, target, delta)
    assert kept[0] == optimized and len(kept) == 3  # OPTIMIZE, VACUUM START, VACUUM END

    # Before cut-over the target's own metadata is cleaned up metadata-only: every Delta file,
    # log and data, stays where it is, and the table still reads like Delta.
    _orders(spark, source, 360, 400)
    delta.take()
    spark.sql(f"DELETE FROM delta.`{source}` WHERE id = 361")
    last = delta.take()
    sync()
    everything = {str(p.relative_to(source)) for p in source.rglob("*") if p.is_file()}
    metadata_dir = Path(catalog.require(target).metadata.location.removeprefix("file:")) / "metadata"
    manifests_before = len(list(metadata_dir.glob("*.avro")))
    refused = ExpireSnapshotsOptions(table=target, older_than=str(int(time.time() * 1000) + 1), retain_last=1)
    with pytest.raises(SafetyRefusal, match=r"gc\.enabled=false"):
        run_expire(refused, catalog, target)
    result = run_expire(replace(refused, metadata_only=True), catalog, target)
    assert result.metrics["expired_snapshots_count"] == 4 and result.metrics["metadata_only"] is True
    assert result.metrics["deleted_data_files_count"] == 0
    assert result.metrics["deleted_manifest_lists_count"] == 4
    assert {str(p.relative_to(source)) for p in source.rglob("*") if p.is_file()} == everything
    assert len(list(metadata_dir.glob("*.avro"))) < manifests_before
    assert assert_retained_snapshots_read_like_delta(spark, target, delta) == [last]
