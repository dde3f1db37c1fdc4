"""``make demo``: the whole tour on embedded defaults (local Spark, ./warehouse, sqlite catalog).

1. delta-spark writes a sample Delta table in small commits, with deletion vectors;
2. convert-delta makes it an Iceberg v2 table (Delta's files referenced, not copied);
3. compact rewrites the small files (deletes applied) into the Iceberg table's own location;
4. backfill-row-lineage upgrades the table to v3 and gives every row an id;
5. the migration is cut over (the Delta table retired), so Iceberg may delete files it no longer
   needs: expire-snapshots keeps only the current snapshot and deletes what nothing reaches;
6. remove-orphans finds a leftover file planted in the table (dry run, then for real).

Each job's JSON result is printed as the jobs print it; a summary table closes the tour, and the
exit code is 1 if Iceberg Spark does not read the rows delta-spark wrote.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import load_catalogs
from tablekeeper.clock import now_ms
from tablekeeper.io import FileIO
from tablekeeper.jobs.backfill_row_lineage import BackfillRowLineageOptions, run_backfill
from tablekeeper.jobs.common.result import JobResult
from tablekeeper.jobs.compact import run_compact
from tablekeeper.jobs.compact.options import CompactOptions
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tablekeeper.jobs.expire_snapshots import ExpireSnapshotsOptions, run_expire
from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, run_orphans
from tablekeeper.settings import default_warehouse
from tablekeeper.spark import get_spark

TARGET = "demo.events"
# What each step's summary line shows, in this order, when the job reports it.
_SHOWN = (
    "delta_version",
    "data_files",
    "delete_files",
    "rewritten_data_files_count",
    "added_data_files_count",
    "removed_delete_files_count",
    "rows_assigned",
    "expired_snapshots_count",
    "deleted_data_files_count",
    "deleted_manifest_files_count",
    "orphan_file_count",
    "deleted_files_count",
)


def _step(title: str, results: list[tuple[str, JobResult]], run: Callable[[], JobResult]) -> JobResult:
    print(f"\n== {title}", file=sys.stderr)
    result = run()
    print(result.to_json(), flush=True)
    results.append((title, result))
    if result.status not in ("ok", "dry_run"):
        raise SystemExit(f"demo stopped: {title} ended {result.status}: {result.error}")
    return result


def _summary(results: list[tuple[str, JobResult]]) -> str:
    rows = [("step", "status", "seconds", "figures")]
    for title, r in results:
        figures = ", ".join(f"{k}={r.metrics[k]}" for k in _SHOWN if k in r.metrics)
        rows.append((title, r.status, f"{r.duration_ms / 1000:.1f}", figures))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]}" for row in rows
    )


def main() -> int:
    started = time.perf_counter()
    warehouse = default_warehouse()
    catalogs = load_catalogs(warehouse=warehouse)
    catalog_name = catalogs.default
    catalog = catalog_for(catalogs.get(None))
    spark = get_spark("tablekeeper-demo", catalogs=catalogs)
    table = f"{catalog_name}.{TARGET}"
    source = warehouse / "delta" / "events"
    shutil.rmtree(source, ignore_errors=True)
    spark.sql(f"DROP TABLE IF EXISTS {table}")

    print(f"1. delta-spark writes a Delta table in 6 commits at {source}", file=sys.stderr)
    for i in range(6):
        (
            spark.range(i * 500, (i + 1) * 500)
            .selectExpr(
                "id",
                "concat('user', id % 37) AS user",
                "id * 1.5 AS amount",
                "CAST(id % 4 AS STRING) AS region",
            )
            .repartition(3)
            .write.format("delta")
            .mode("append")
            .partitionBy("region")
            .option("delta.enableDeletionVectors", "true")
            .save(str(source))
        )
    spark.sql(f"DELETE FROM delta.`{source}` WHERE id % 10 = 0")
    delta_rows = spark.read.format("delta").load(str(source)).count()

    results: list[tuple[str, JobResult]] = []
    _step(
        "convert-delta",
        results,
        lambda: run_convert(
            ConvertDeltaOptions(source=str(source), target=TARGET, format_version=2), catalog, spark
        ),
    )
    _step(
        "compact",
        results,
        lambda: run_compact(CompactOptions(table=TARGET, min_input_files=2), catalog, TARGET, spark),
    )
    _step(
        "backfill-row-lineage",
        results,
        lambda: run_backfill(BackfillRowLineageOptions(table=TARGET), catalog, TARGET),
    )

    print(
        "\n== cut-over: the Delta table is retired, so the Iceberg table may delete the files it "
        "no longer needs (gc.enabled=true)",
        file=sys.stderr,
    )
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('gc.enabled'='true')")
    _step(
        "expire-snapshots",
        results,
        lambda: run_expire(
            ExpireSnapshotsOptions(table=TARGET, older_than="0s", retain_last=1), catalog, TARGET, spark
        ),
    )

    # A file a crashed writer left behind four days ago: no metadata references it.
    location = catalog.require(TARGET).metadata.location.rstrip("/")
    leftover = f"{location}/data/region=1/00000-crashed-writer.parquet"
    FileIO.for_location(leftover).write(leftover, b"not referenced by any snapshot")
    four_days_ago = now_ms() / 1000 - 4 * 86400
    os.utime(FileIO.for_location(leftover).fs_path(leftover), (four_days_ago, four_days_ago))
    _step(
        "remove-orphans --dry-run",
        results,
        lambda: run_orphans(RemoveOrphansOptions(table=TARGET, dry_run=True), catalog, TARGET, spark),
    )
    _step(
        "remove-orphans",
        results,
        lambda: run_orphans(RemoveOrphansOptions(table=TARGET), catalog, TARGET, spark),
    )

    spark.sql(f"REFRESH TABLE {table}")
    iceberg_rows = spark.table(table).count()
    lineage = spark.sql(f"SELECT count(DISTINCT _row_id) FROM {table}").collect()[0][0]
    files = spark.sql(f"SELECT count(*) FROM {table}.files").collect()[0][0]
    snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").collect()[0][0]
    spark.sql(
        f"SELECT region, count(*) AS rows, round(sum(amount), 1) AS amount FROM {table} "
        "GROUP BY region ORDER BY region"
    ).show()
    print("\n" + _summary(results))
    same = iceberg_rows == delta_rows == lineage
    print(
        f"\nrows: delta-spark {delta_rows}, Iceberg Spark {iceberg_rows} ({lineage} distinct row ids); "
        f"{files} data files, {snapshots} snapshot(s); {time.perf_counter() - started:.0f} s in all -> "
        + ("identical" if same else "MISMATCH")
    )
    spark.stop()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
