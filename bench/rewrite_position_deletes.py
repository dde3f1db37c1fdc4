"""rewrite-position-deletes against Iceberg's RewritePositionDeleteFilesSparkAction on identical
table states.

A v2 table partitioned by an int ``p`` (default 10 values) is built once by Iceberg Spark and
saved: D data files (default 300, one per write task, each inside one partition, R rows in all,
default 3,000,000), then K small merge-on-read DELETE statements (default 150), each removing 5
ids from each of 4 data files in every partition, with partition-scoped deletes
(``write.delete.granularity=partition``) and, while building only, one scan task per data file
and no shuffle before the delete writers: each DELETE writes 4 small position delete files per
partition, so K x 4 x P files in all (default 6,000, of 5 positions each). (File-scoped deletes
would not pile up: Iceberg Spark folds a data file's previous file-scoped delete file into the
new one.) Each engine runs in its own process on a fresh copy, both on a local Spark session of
the same size (JVM start-up excluded, reported as setup):

- ``iceberg``: ``SparkActions.get().rewritePositionDeletes(table)`` with ``rewrite-all``;
- ``tablekeeper``: ``rewrite-position-deletes --rewrite-all`` (one Spark task per partition).

After each run the child reads the table through Iceberg Spark: both engines must end with the
rows the table held before (count and sum of ids), and the table shows the live position delete
files before and after. Engines alternate over ``--repeat`` runs and the median is reported.
Goal: tablekeeper at most 1.0x Iceberg's time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from bench.child import Run, alternate, bench_catalogs, summarize

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
ENGINES = ("iceberg", "tablekeeper")
TABLE = "bench.d"
FILES_PER_PARTITION = 4  # data files each DELETE touches in every partition
IDS_PER_FILE = 5  # ids it removes from each
STRIDE = 1_000_003  # a prime: its multiples spread the deleted ids over a data file's rows
# Only while building: each DELETE scan task reads one data file and writes its own delete file.
BUILD_ONLY = {"read.split.open-file-cost": str(128 * 1024 * 1024), "write.delete.distribution-mode": "none"}
EXPECTED = "expected.json"


def _catalogs(work: Path):  # type: ignore[no-untyped-def]
    return bench_catalogs(work)


def _spark(work: Path):  # type: ignore[no-untyped-def]
    from tablekeeper.spark.session import get_spark, local_jar_paths

    return get_spark(
        "bench-rewrite-position-deletes",
        catalogs=_catalogs(work),
        conf={"spark.jars": ",".join(map(str, local_jar_paths()))},
    )


def _rows(spark) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """Rows as Iceberg Spark reads them (deletes applied): their count and the sum of their ids."""
    # A count from file metadata would not apply the deletes: make Spark read the rows.
    spark.conf.set("spark.sql.iceberg.aggregate-push-down.enabled", "false")
    spark.sql(f"REFRESH TABLE b.{TABLE}")
    row = spark.sql(f"SELECT count(*), coalesce(sum(id), 0) FROM b.{TABLE}").collect()[0]
    return int(row[0]), int(row[1])


def _delete_files(work: Path) -> int:
    """Live position delete files of the current snapshot, from the table's own manifests."""
    from tablekeeper.catalog import catalog_for
    from tablekeeper.iceberg.content import POSITION_DELETES
    from tablekeeper.tables.iceberg import live_files

    loaded = catalog_for(_catalogs(work).get("b")).require(TABLE)
    meta = loaded.metadata
    files = live_files(loaded.io, meta, meta.current_snapshot())
    return sum(1 for e in files.deletes if e.data_file.content == POSITION_DELETES)


def _deleted_ids(k: int, partitions: int, data_files: int, rows: int) -> list[int]:
    """The ids DELETE number ``k`` removes: IDS_PER_FILE ids in each of FILES_PER_PARTITION data
    files of every partition, never one an earlier DELETE removed."""
    per, fpp = rows // partitions, data_files // partitions
    rpf = per // fpp
    ids = []
    for j in range(partitions):
        for i in range(FILES_PER_PARTITION):
            slot = k * FILES_PER_PARTITION + i
            f, m = slot % fpp, slot // fpp
            ids += [j * per + f * rpf + (m * IDS_PER_FILE + r) * STRIDE % rpf for r in range(IDS_PER_FILE)]
    return ids


def build(work: Path, partitions: int, data_files: int, rows: int, deletes: int) -> dict[str, int]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spark = _spark(work)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS b.bench")
    build_only = ", ".join(f"'{k}'='{v}'" for k, v in BUILD_ONLY.items())
    spark.sql(
        f"CREATE TABLE b.{TABLE} (id BIGINT, p INT, s STRING) USING iceberg PARTITIONED BY (p) "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read', "
        f"'write.delete.granularity'='partition', 'write.distribution-mode'='none', {build_only})"
    )
    # Each write task holds a contiguous range of ids inside one partition: one data file each.
    spark.range(0, rows, 1, data_files).selectExpr(
        "id", f"CAST(id * {partitions} DIV {rows} AS INT) AS p", "md5(CAST(id AS STRING)) AS s"
    ).writeTo(f"b.{TABLE}").append()
    for k in range(deletes):
        # Min/max pruning reads only the data files holding these ids, one scan task each, and
        # each task writes one small partition-scoped position delete file.
        ids = ", ".join(map(str, _deleted_ids(k, partitions, data_files, rows)))
        spark.sql(f"DELETE FROM b.{TABLE} WHERE id IN ({ids})")
    unset = ", ".join(f"'{k}'" for k in BUILD_ONLY)
    spark.sql(f"ALTER TABLE b.{TABLE} UNSET TBLPROPERTIES ({unset})")
    count, id_sum = _rows(spark)
    live = spark.sql(f"SELECT count(*) FROM b.{TABLE}.data_files").collect()[0][0]
    spark.stop()
    return {"rows": count, "id_sum": id_sum, "data_files": int(live), "delete_files": _delete_files(work)}


def run_engine(engine: str, work: Path) -> dict[str, object]:
    """Inside the child: one engine on the saved state."""
    from tablekeeper.catalog import catalog_for

    catalog = catalog_for(_catalogs(work).get("b"))
    before = _delete_files(work)
    started = time.perf_counter()
    spark = _spark(work)
    setup = time.perf_counter() - started
    t0 = time.perf_counter()
    if engine == "iceberg":
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, f"b.{TABLE}")
        r = (
            jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
            .rewritePositionDeletes(table)
            .option("rewrite-all", "true")
            .execute()
        )
        rewritten, added = int(r.rewrittenDeleteFilesCount()), int(r.addedDeleteFilesCount())
    else:
        from tablekeeper.jobs.rewrite_position_deletes import (
            RewritePositionDeletesOptions,
            run_rewrite_position_deletes,
        )

        m = run_rewrite_position_deletes(
            RewritePositionDeletesOptions(TABLE, rewrite_all=True), catalog, TABLE, spark
        ).metrics
        rewritten, added = int(m["rewritten_delete_files_count"]), int(m["added_delete_files_count"])
    seconds = time.perf_counter() - t0
    count, id_sum = _rows(spark)
    return {
        "engine": engine,
        "seconds": round(seconds, 3),
        "setup_seconds": round(setup, 3),
        "delete_files_before": before,
        "delete_files_after": _delete_files(work),
        "rewritten": rewritten,
        "added": added,
        "rows": count,
        "id_sum": id_sum,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--data-files", type=int, default=300, help="a multiple of --partitions")
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument(
        "--deletes", type=int, default=150, help="DELETE statements (4 delete files per partition each)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=1, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_engine(args.child[0], Path(args.work))))
        return
    fpp = args.data_files // args.partitions
    if args.data_files % args.partitions or args.rows % args.data_files or fpp < FILES_PER_PARTITION:
        parser.error(
            f"--data-files must be a multiple of --partitions (at least {FILES_PER_PARTITION} per "
            "partition) and --rows a multiple of --data-files"
        )
    if (args.deletes * FILES_PER_PARTITION // fpp + 1) * IDS_PER_FILE > args.rows // args.data_files:
        parser.error("too many --deletes for so few rows per data file")
    OUT.mkdir(parents=True, exist_ok=True)
    saved, work = OUT / "rewrite_position_deletes_saved", OUT / "rewrite_position_deletes_work"
    t = time.perf_counter()
    marker = saved / f"built-{args.partitions}-{args.data_files}-{args.rows}-{args.deletes}"
    if not marker.exists():
        # Built where the engines run (metadata holds absolute paths), then saved for each run.
        expected = build(work, args.partitions, args.data_files, args.rows, args.deletes)
        shutil.rmtree(saved, ignore_errors=True)
        shutil.copytree(work, saved)
        (saved / EXPECTED).write_text(json.dumps(expected))
        marker.write_text("ok")
    expected = json.loads((saved / EXPECTED).read_text())
    shape = (
        f"v2 table, {args.partitions} partitions, {expected['data_files']:,} data files, "
        f"{expected['delete_files']:,} position delete files, {expected['rows']:,} rows"
    )
    print(
        f"rewrite-position-deletes: table ready in {time.perf_counter() - t:.1f}s ({shape})", file=sys.stderr
    )

    def same_rows(r: Run) -> Run:
        if (r["rows"], r["id_sum"]) != (expected["rows"], expected["id_sum"]):
            return {**r, "error": f"rows changed: {r['rows']} (sum {r['id_sum']}), expected {expected}"}
        return r

    runs = alternate("bench.rewrite_position_deletes", ENGINES, args.repeat, saved, work, same_rows)
    results = summarize(runs, ENGINES, ("delete_files_before", "delete_files_after", "rows"))
    print(f"\n(rewrite-position-deletes) {shape}; median of {args.repeat} alternating runs\n")
    print(
        "{:<12} {:>9} {:>13} {:>7} {:>15} {:>14} {:>11}".format(
            "engine", "seconds", "min-max", "setup", "deletes before", "deletes after", "rows"
        )
    )
    for r in results:
        if "error" in r:
            print(f"{r['engine']!s:<12} failed: {r['error']}")
            continue
        spread = f"{r['min_seconds']:.2f}-{r['max_seconds']:.2f}"
        print(
            f"{r['engine']!s:<12} {float(r['seconds']):>9.2f} {spread:>13} "  # type: ignore[arg-type]
            f"{float(r['setup_seconds']):>7.1f} {r['delete_files_before']!s:>15} "  # type: ignore[arg-type]
            f"{r['delete_files_after']!s:>14} {r['rows']!s:>11}"
        )
    timed = {str(r["engine"]): float(r["seconds"]) for r in results if "seconds" in r}  # type: ignore[arg-type]
    ratio = None
    if len(timed) == 2:
        ratio = timed["tablekeeper"] / timed["iceberg"]
        goal = "met" if ratio <= 1.0 else "not met"
        print(f"\ntablekeeper / iceberg: {ratio:.2f}x (goal at most 1.0x: {goal})")
    out = OUT / "rewrite_position_deletes.json"
    out.write_text(
        json.dumps(
            {"shape": shape, "expected": expected, "results": results, "ratio": ratio, "runs": runs}, indent=2
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
