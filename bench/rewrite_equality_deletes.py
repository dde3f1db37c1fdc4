"""rewrite-equality-deletes against Iceberg's rewrite_data_files with its delete threshold, on
identical copies of a change-data-capture table.

A v2 table (v3 with ``--format-version 3``) partitioned by an int ``p`` (default 10 values) is
built once: Iceberg Spark writes D data files (default 200, each inside one partition, R rows in
all, default 2,000,000), then Iceberg Java writes E equality delete files on ``id`` (default 2,000,
each partition-scoped, 5 ids each, spread over the partition's data files) and commits them in
RowDeltas of 100, as a streaming upsert sink does checkpoint after checkpoint. Each engine runs in
its own process on a fresh copy, on a local Spark session of the same size (JVM start-up
excluded, reported as setup):

- ``iceberg``: ``CALL system.rewrite_data_files`` with ``delete-file-threshold`` 1: every data file
  an equality delete applies to is rewritten with the deletes applied; with
  ``remove-dangling-deletes``, so the equality delete files no data file needs any more leave the
  table as they do with tablekeeper (a reader's planning no longer reads them);
- ``tablekeeper``: ``rewrite-equality-deletes`` (positions found on the executors, no data
  rewritten).

``--target-file-size data-files`` sets the table's target file size to its data files' mean
before either engine runs, so the rewrite writes as many files as it reads and both scans after
read the same layout (by default the rewrite also compacts the small files).

Each child measures, through Iceberg Spark, a point query (``WHERE id = ...``, the median of five
ids), a full scan (every column: count, sums of ``id``, ``p`` and the lengths of ``s``) and a
narrow scan (count and sum of ``id``, the cheapest scan there is, where a delete's per-row cost
weighs most), each the median of three, before and after its job; the narrow scan over the live
data files read as plain Parquet with no deletes; the bytes its job wrote (the files live after
that were not before); and checks the rows are the ones the table held. Engines alternate over
``--repeat`` runs; times are medians over the runs. Goal: tablekeeper at most 0.2x the rewrite's
time and 0.05x its bytes written, with scans after it within 1.2x of the rewritten table's.

The floor a delete file sets: the build also writes ``bench.ref``, the same rows in the same 200
data files, and deletes the same ids from it with Iceberg Spark's own merge-on-read ``DELETE``
(deletion vectors on v3, position delete files on v2, at the table's ``write.delete.granularity``);
the tablekeeper child scans it as it was before that DELETE and after. Any delete file costs a
reader per row of the data files it applies to (Iceberg's vectorized reader checks every row's
position); that ratio is what Iceberg itself pays for the same deletes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.child import Run, alternate, bench_catalogs, summarize

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
ENGINES = ("iceberg", "tablekeeper")
TABLE = "bench.cdc"
IDS_PER_FILE = 5
FILES_PER_COMMIT = 100
EXPECTED = "expected.json"
REFERENCE = "bench.ref"
POINT_IDS = 5
FULL_SCANS = 3
# Every column, so the scan pays for decoding what a reader of the whole table reads.
FULL = "count(*), coalesce(sum(id), 0), coalesce(sum(p), 0), coalesce(sum(length(s)), 0)"
NARROW = "count(*), coalesce(sum(id), 0)"
# What the tablekeeper child measures on the reference table, before its DELETE and after.
REFERENCE_SCANS = ("full_scan", "narrow_scan", "point_query")


def _spark(work: Path):  # type: ignore[no-untyped-def]
    from tablekeeper.spark.session import get_spark, local_jar_paths

    return get_spark(
        "bench-rewrite-equality-deletes",
        catalogs=bench_catalogs(work),
        conf={"spark.jars": ",".join(map(str, local_jar_paths()))},
    )


def _source(table: str, version: int | None) -> str:
    return table if version is None else f"{table} VERSION AS OF {version}"


def _rows(
    spark: Any, table: str = f"b.{TABLE}", columns: str = NARROW, version: int | None = None
) -> tuple[int, int]:
    # Never answered from the manifests' counts: the scan reads the files. Every scan, of a
    # snapshot or of the current state, reloads the table first, as a new reader would.
    spark.conf.set("spark.sql.iceberg.aggregate-push-down.enabled", "false")
    spark.sql(f"REFRESH TABLE {table}")
    row = spark.sql(f"SELECT {columns} FROM {_source(table, version)}").collect()[0]
    return int(row[0]), int(row[1])


def _scan(spark: Any, table: str, columns: str, version: int | None = None) -> float:
    """Seconds of one scan, the median of FULL_SCANS: the first scan of a table state also loads
    the reader's classes for what it holds (deletion vectors, position deletes), which a median
    leaves out."""
    times = []
    for _ in range(FULL_SCANS):
        t = time.perf_counter()
        _rows(spark, table, columns, version)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _points(spark: Any, table: str, rows: int, version: int | None = None) -> float:
    """Seconds of a point query, the median over POINT_IDS ids (the same ids for every table)."""
    points = []
    for k in range(POINT_IDS):
        wanted = (k * 7_919 + 1) * (rows // (POINT_IDS * 7_919 + 1))
        t = time.perf_counter()
        spark.sql(f"SELECT * FROM {_source(table, version)} WHERE id = {wanted}").collect()
        points.append(time.perf_counter() - t)
    return statistics.median(points)


def _scans(spark: Any, rows: int) -> tuple[float, float, float]:
    """Seconds of a full scan, a narrow scan and a point query, Iceberg Spark."""
    table = f"b.{TABLE}"
    return _scan(spark, table, FULL), _scan(spark, table, NARROW), _points(spark, table, rows)


def _reference_scans(spark: Any, before: int, rows: int) -> dict[str, float]:
    """Iceberg's own merge-on-read DELETE of the same ids on the same data: the scans of the table
    before it and after it."""
    table = f"b.{REFERENCE}"
    measures: dict[str, Callable[[int | None], float]] = {
        "full_scan": lambda version: _scan(spark, table, FULL, version),
        "narrow_scan": lambda version: _scan(spark, table, NARROW, version),
        "point_query": lambda version: _points(spark, table, rows, version),
    }
    return {
        f"reference_{name}_{when}_delete": measures[name](version)
        for name in REFERENCE_SCANS
        for when, version in (("before", before), ("after", None))
    }


def _live(work: Path) -> dict[str, int]:
    """Live files of the current snapshot (data and deletes): path -> bytes."""
    from tablekeeper.catalog import catalog_for
    from tablekeeper.tables.iceberg import live_files

    loaded = catalog_for(bench_catalogs(work).get("b")).require(TABLE)
    meta = loaded.metadata
    files = live_files(loaded.io, meta, meta.current_snapshot())
    return {e.data_file.file_path: e.data_file.file_size_in_bytes for e in (*files.data, *files.deletes)}


def _plain_scan(spark: Any, work: Path) -> float:
    """Seconds of the same scan over the live data files read as plain Parquet, no deletes: the
    floor for that many files."""
    from tablekeeper.catalog import catalog_for
    from tablekeeper.tables.iceberg import live_files

    loaded = catalog_for(bench_catalogs(work).get("b")).require(TABLE)
    files = live_files(loaded.io, loaded.metadata, loaded.metadata.current_snapshot())
    paths = [e.data_file.file_path for e in files.data]
    t = time.perf_counter()
    spark.read.parquet(*paths).createOrReplaceTempView("plain")
    spark.sql(f"SELECT {NARROW} FROM plain").collect()
    return time.perf_counter() - t


def _deleted_ids(f: int, partitions: int, rows: int, deletes: int) -> tuple[int, list[int]]:
    """Equality delete file ``f``: its partition and the ids it deletes (never one deleted before),
    spread over the partition's rows."""
    per = rows // partitions
    p = f % partitions
    slot = f // partitions  # this partition's slot-th delete file
    step = per // (deletes // partitions * IDS_PER_FILE + 1)
    return p, [p * per + (slot * IDS_PER_FILE + i) * step + 1 for i in range(IDS_PER_FILE)]


def build(
    work: Path, partitions: int, data_files: int, rows: int, deletes: int, version: int, granularity: str
) -> dict[str, int]:
    from tests.support.java_deletes import EqualityDelete, commit_equality_delete_files

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spark = _spark(work)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS b.bench")
    for table in (TABLE, REFERENCE):
        spark.sql(
            f"CREATE TABLE b.{table} (id INT, p INT, s STRING) USING iceberg PARTITIONED BY (p) "
            f"TBLPROPERTIES ('format-version'='{version}', 'write.distribution-mode'='none', "
            f"'write.delete.mode'='merge-on-read', 'write.delete.granularity'='{granularity}')"
        )
        # Each write task holds a contiguous range of ids inside one partition: one data file each.
        spark.range(0, rows, 1, data_files).selectExpr(
            "CAST(id AS INT) AS id",
            f"CAST(id * {partitions} DIV {rows} AS INT) AS p",
            "md5(CAST(id AS STRING)) AS s",
        ).writeTo(f"b.{table}").append()
    deleted: list[int] = []
    for start in range(0, deletes, FILES_PER_COMMIT):
        batch = []
        for f in range(start, min(deletes, start + FILES_PER_COMMIT)):
            p, ids = _deleted_ids(f, partitions, rows, deletes)
            batch.append(EqualityDelete(("id",), tuple((i,) for i in ids), (p,)))
            deleted.extend(ids)
        commit_equality_delete_files(spark, f"b.{TABLE}", batch)
    before = spark.sql(f"SELECT snapshot_id FROM b.{REFERENCE}.snapshots").collect()[0][0]
    spark.createDataFrame([(i,) for i in deleted], "id INT").createOrReplaceTempView("deleted")
    spark.sql(f"DELETE FROM b.{REFERENCE} WHERE id IN (SELECT id FROM deleted)")
    count, id_sum = _rows(spark)
    if _rows(spark, f"b.{REFERENCE}") != (count, id_sum):
        raise SystemExit("the reference table's DELETE left other rows than the equality deletes")
    spark.stop()
    live = _live(work)
    return {"rows": count, "id_sum": id_sum, "files": len(live), "reference_before": int(before)}


def _keep_file_size(spark: Any, work: Path) -> int:
    """Set the table's target file size to its data files' mean size, so that a rewrite writes
    as many files as it reads (a stream whose files are already at the table's target) and the
    scans after each engine compare the same layout; returns the size."""
    from tablekeeper.catalog import catalog_for
    from tablekeeper.tables.iceberg import live_files

    loaded = catalog_for(bench_catalogs(work).get("b")).require(TABLE)
    data = live_files(loaded.io, loaded.metadata, loaded.metadata.current_snapshot()).data
    size = sum(e.data_file.file_size_in_bytes for e in data) // len(data)
    spark.sql(f"ALTER TABLE b.{TABLE} SET TBLPROPERTIES ('write.target-file-size-bytes'='{size}')")
    return size


def run_engine(engine: str, work: Path, target: str, reference_before: int) -> dict[str, object]:
    """Inside the child: one engine on the saved state."""
    from tablekeeper.catalog import catalog_for

    catalog = catalog_for(bench_catalogs(work).get("b"))
    started = time.perf_counter()
    spark = _spark(work)
    setup = time.perf_counter() - started
    # Before the engine runs and for both engines alike: a property commit writes no file.
    target_size = _keep_file_size(spark, work) if target == "data-files" else 0
    before = _live(work)
    rows_before = _rows(spark)
    full_before, narrow_before, point_before = _scans(spark, rows_before[0])
    t0 = time.perf_counter()
    if engine == "iceberg":
        spark.sql(
            f"CALL b.system.rewrite_data_files(table => '{TABLE}', "
            "options => map('delete-file-threshold', '1', 'remove-dangling-deletes', 'true'))"
        ).collect()
    else:
        from tablekeeper.jobs.rewrite_equality_deletes import (
            RewriteEqualityDeletesOptions,
            run_rewrite_equality_deletes,
        )

        run_rewrite_equality_deletes(RewriteEqualityDeletesOptions(TABLE), catalog, TABLE, spark)
    seconds = time.perf_counter() - t0
    after = _live(work)
    count, id_sum = _rows(spark)
    full_after, narrow_after, point_after = _scans(spark, count)
    plain = _plain_scan(spark, work)
    reference = _reference_scans(spark, reference_before, count) if engine == "tablekeeper" else {}
    return {
        "engine": engine,
        "seconds": round(seconds, 3),
        "setup_seconds": round(setup, 3),
        "bytes_written": sum(size for path, size in after.items() if path not in before),
        "files_before": len(before),
        "files_after": len(after),
        "full_scan_before": round(full_before, 3),
        "full_scan_after": round(full_after, 3),
        "narrow_scan_before": round(narrow_before, 3),
        "narrow_scan_after": round(narrow_after, 3),
        "point_query_before": round(point_before, 3),
        "point_query_after": round(point_after, 3),
        "plain_parquet_scan_after": round(plain, 3),
        "rows": count,
        "id_sum": id_sum,
        "target_file_size": target_size,
        **{k: round(v, 3) for k, v in reference.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--data-files", type=int, default=200, help="a multiple of --partitions")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument(
        "--deletes", type=int, default=2_000, help="equality delete files (a multiple of --partitions)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--format-version",
        type=int,
        choices=(2, 3),
        default=2,
        help="2: positions as position delete files; 3: as deletion vectors",
    )
    parser.add_argument(
        "--target-file-size",
        choices=("iceberg-default", "data-files"),
        default="iceberg-default",
        help="the table's write.target-file-size-bytes during the runs: Iceberg's default (the "
        "rewrite also compacts the small files) or the data files' mean size (it writes as many "
        "files as it reads, so both engines' scans after read the same layout)",
    )
    parser.add_argument(
        "--delete-granularity",
        choices=("file", "partition"),
        default="file",
        help="the tables' write.delete.granularity (v2): one position delete file per data file "
        "(Iceberg Spark's default) or one per partition, which Iceberg Spark's executors read "
        "once and cache",
    )
    parser.add_argument("--child", nargs=1, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--reference-before", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = run_engine(args.child[0], Path(args.work), args.target_file_size, args.reference_before)
        print(json.dumps(result))
        return
    if args.data_files % args.partitions or args.deletes % args.partitions or args.rows >= 2**31:
        parser.error("--data-files and --deletes must be multiples of --partitions, --rows under 2**31")
    OUT.mkdir(parents=True, exist_ok=True)
    version = "" if args.format_version == 2 else f"_v{args.format_version}"
    # One saved state per version and granularity: switching between them does not rebuild.
    granularity = "" if args.delete_granularity == "file" else "_partition_deletes"
    saved = OUT / f"rewrite_equality_deletes_saved{version}{granularity}"
    work = OUT / "rewrite_equality_deletes_work"
    t = time.perf_counter()
    marker = saved / (
        f"built-v{args.format_version}-{args.partitions}-{args.data_files}-{args.rows}-{args.deletes}"
        f"-{args.delete_granularity}-with-reference"
    )
    if not marker.exists():
        expected = build(
            work,
            args.partitions,
            args.data_files,
            args.rows,
            args.deletes,
            args.format_version,
            args.delete_granularity,
        )
        shutil.rmtree(saved, ignore_errors=True)
        shutil.copytree(work, saved)
        (saved / EXPECTED).write_text(json.dumps(expected))
        marker.write_text("ok")
    expected = json.loads((saved / EXPECTED).read_text())
    shape = (
        f"v{args.format_version} table, {args.partitions} partitions, {args.data_files:,} data files, "
        f"{args.deletes:,} equality delete files, {expected['rows']:,} rows, "
        f"target file size: {args.target_file_size}, delete granularity: {args.delete_granularity}"
    )
    print(
        f"rewrite-equality-deletes: table ready in {time.perf_counter() - t:.1f}s ({shape})", file=sys.stderr
    )

    def same_rows(r: Run) -> Run:
        if (r["rows"], r["id_sum"]) != (expected["rows"], expected["id_sum"]):
            return {**r, "error": f"rows changed: {r['rows']} (sum {r['id_sum']}), expected {expected}"}
        return r

    runs = alternate(
        "bench.rewrite_equality_deletes",
        ENGINES,
        args.repeat,
        saved,
        work,
        same_rows,
        (
            "--target-file-size",
            args.target_file_size,
            "--reference-before",
            str(expected["reference_before"]),
        ),
    )
    keep = ("bytes_written", "files_before", "files_after")
    scans = (
        "full_scan_before",
        "full_scan_after",
        "narrow_scan_before",
        "narrow_scan_after",
        "point_query_before",
        "point_query_after",
        "plain_parquet_scan_after",
    )
    results = summarize(runs, ENGINES, keep, scans)
    # Only the tablekeeper runs measure the reference table: its medians over them.
    reference = [f"reference_{n}_{when}_delete" for n in REFERENCE_SCANS for when in ("before", "after")]
    on_reference = summarize(runs, ("tablekeeper",), (), reference)[0]
    floor = {} if "error" in on_reference else {k: float(on_reference[k]) for k in reference}  # type: ignore[arg-type]
    print(f"\n(rewrite-equality-deletes) {shape}; median of {args.repeat} alternating runs\n")
    header = (
        "engine",
        "seconds",
        "setup",
        "MB written",
        "files",
        "scan before",
        "scan after",
        "narrow after",
        "plain narrow",
        "point before",
        "point after",
    )
    print("{:<12} {:>8} {:>6} {:>11} {:>13} {:>12} {:>11} {:>12} {:>12} {:>13} {:>12}".format(*header))
    for r in results:
        if "error" in r:
            print(f"{r['engine']!s:<12} failed: {r['error']}")
            continue
        files = f"{r['files_before']}->{r['files_after']}"
        print(
            f"{r['engine']!s:<12} {float(r['seconds']):>8.2f} {float(r['setup_seconds']):>6.1f} "  # type: ignore[arg-type]
            f"{int(r['bytes_written']) / 1e6:>11.2f} {files:>13} {float(r['full_scan_before']):>12.2f} "  # type: ignore[call-overload,arg-type]
            f"{float(r['full_scan_after']):>11.2f} {float(r['narrow_scan_after']):>12.2f} "  # type: ignore[arg-type]
            f"{float(r['plain_parquet_scan_after']):>12.2f} "  # type: ignore[arg-type]
            f"{float(r['point_query_before']):>13.2f} "  # type: ignore[arg-type]
            f"{float(r['point_query_after']):>12.2f}"  # type: ignore[arg-type]
        )
    ok = {str(r["engine"]): r for r in results if "error" not in r}
    ratios: dict[str, float] = {}
    if len(ok) == 2:
        ours, theirs = ok["tablekeeper"], ok["iceberg"]
        ratios = {
            "time": float(ours["seconds"]) / float(theirs["seconds"]),  # type: ignore[arg-type]
            "bytes_written": int(ours["bytes_written"]) / max(1, int(theirs["bytes_written"])),  # type: ignore[call-overload]
            "full_scan_vs_rewritten": float(ours["full_scan_after"]) / float(theirs["full_scan_after"]),  # type: ignore[arg-type]
            "narrow_scan_vs_rewritten": float(ours["narrow_scan_after"]) / float(theirs["narrow_scan_after"]),  # type: ignore[arg-type]
            "point_query_vs_rewritten": float(ours["point_query_after"]) / float(theirs["point_query_after"]),  # type: ignore[arg-type]
        }
        goals = {
            "time": 0.2,
            "bytes_written": 0.05,
            "full_scan_vs_rewritten": 1.2,
            "narrow_scan_vs_rewritten": 1.2,
            "point_query_vs_rewritten": 1.2,
        }
        print()
        for name, value in ratios.items():
            met = "met" if value <= goals[name] else "not met"
            print(f"tablekeeper / iceberg {name}: {value:.3f}x (goal at most {goals[name]}x: {met})")
    if floor:
        print("\nIceberg's own merge-on-read DELETE of the same ids on the same data (bench.ref):")
        for scan in REFERENCE_SCANS:
            was = floor[f"reference_{scan}_before_delete"]
            now = floor[f"reference_{scan}_after_delete"]
            ratios[f"reference_{scan}_after_vs_before_delete"] = now / was
            name = scan.replace("_", " ")
            print(f"  {name} {was:.2f}s before it, {now:.2f}s after it: {now / was:.3f}x")
    suffix = "" if args.format_version == 2 else "_v3"
    suffix += "" if args.target_file_size == "iceberg-default" else "_kept_file_size"
    suffix += "" if args.delete_granularity == "file" else "_partition_deletes"
    out = OUT / f"rewrite_equality_deletes{suffix}.json"
    out.write_text(
        json.dumps(
            {
                "shape": shape,
                "expected": expected,
                "results": results,
                "reference": floor,
                "ratios": ratios,
                "runs": runs,
            },
            indent=2,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
