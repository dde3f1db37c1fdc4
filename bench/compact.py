"""compact against Iceberg's RewriteDataFilesSparkAction, and raw Spark as the floor.

A table of F small files (default 2,000, about 1 GB in all) is built once by Iceberg Spark and
saved. Each engine then runs in its own process on a fresh copy:

- ``iceberg``: ``SparkActions.rewriteDataFiles(table).binPack()`` with default options;
- ``tablekeeper``: ``compact`` with default options (the same planning rules; no shuffle is
  needed, so its Arrow path rewrites the groups unless ``--tk-writer spark``);
- ``spark``: the floor, a plain ``spark.read.parquet`` of the same files and ``write.parquet`` into
  as many files as the engines write, with the same codec (no deletes, ids or commit).

``--case`` picks the table and the rewrite:

- ``binpack`` (default): flat columns, bin-pack as above;
- ``zorder``: the same table, Iceberg's ``zOrder("v", "n")`` against
  ``compact --strategy sort --sort-order "zorder(v, n)"``, every file rewritten; the floor adds
  Spark's own range partition and sort by the two columns;
- ``nested``: a table of lists, maps and structs nested two levels deep, bin-pack;
- ``ids``: a table of two small keys (a, b) and a distinct id and name per row, in hash order,
  Z-ordered by (a, b) as ``zorder`` does: columns of distinct values, which compress well only
  when written plain (the bytes column shows it).

Engines alternate over ``--repeat`` runs and the median is reported. Goals: tablekeeper at most
1.0x Iceberg's time in every case, and within 1.25x of the floor for bin-pack.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from bench.child import bench_catalogs, run_child

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
ENGINES = ("iceberg", "tablekeeper", "spark")
TABLE = "bench.c"


def _catalogs(work: Path):  # type: ignore[no-untyped-def]
    return bench_catalogs(work)


def _spark(work: Path):  # type: ignore[no-untyped-def]
    from tablekeeper.spark.session import get_spark, local_jar_paths

    return get_spark(
        "bench-compact", catalogs=_catalogs(work), conf={"spark.jars": ",".join(map(str, local_jar_paths()))}
    )


_NESTED = (
    "id BIGINT, tags ARRAY<STRING>, attrs MAP<STRING, BIGINT>, "
    "visits ARRAY<STRUCT<at: TIMESTAMP, page: STRING, scores: ARRAY<DOUBLE>>>, "
    "who STRUCT<name: STRING, address: STRUCT<city: STRING, zip: INT>, phones: MAP<STRING, STRING>>"
)


def _build_nested(spark, files: int, rows: int) -> None:  # type: ignore[no-untyped-def]
    spark.sql(
        f"CREATE TABLE b.{TABLE} ({_NESTED}) USING iceberg "
        "TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='none')"
    )
    spark.range(rows).selectExpr(
        "id",
        "IF(id % 10 = 0, NULL, array(md5(CAST(id AS STRING)), sha1(CAST(id AS STRING)))) AS tags",
        "map(concat('a', id % 7), id, concat('b', id % 11), id * 3) AS attrs",
        "array(named_struct('at', timestamp_micros(1700000000000000 + id * 1000), 'page', "
        "concat('/p/', id % 1000), 'scores', array(rand(1), rand(2)))) AS visits",
        "named_struct('name', md5(CAST(id * 5 AS STRING)), 'address', named_struct('city', "
        "concat('c', id % 500), 'zip', CAST(id % 99999 AS INT)), 'phones', map('home', "
        "CAST(id AS STRING))) AS who",
    ).repartition(files).writeTo(f"b.{TABLE}").append()


def _build_ids(spark, files: int, rows: int) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    spark.sql(
        f"CREATE TABLE b.{TABLE} (a INT, b INT, s STRING, id BIGINT) USING iceberg "
        "TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='none')"
    )
    # (a, b) nearly decide id: Z-ordered by them, id and s are close to sequential.
    spark.range(rows).selectExpr(
        "CAST(id DIV 3750 AS INT) AS a",
        "CAST(id % 3750 DIV 94 AS INT) AS b",
        "concat('row-', CAST(id AS STRING)) AS s",
        "id",
    ).repartition(files).sortWithinPartitions(F.hash("id")).writeTo(f"b.{TABLE}").append()


def _zorder_columns(case: str) -> list[str]:
    return ["a", "b"] if case == "ids" else ["v", "n"]


def build(work: Path, files: int, rows: int, case: str) -> None:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spark = _spark(work)
    spark.sql("CREATE NAMESPACE IF NOT EXISTS b.bench")
    if case in ("nested", "ids"):
        (_build_nested if case == "nested" else _build_ids)(spark, files, rows)
        spark.stop()
        (work / "built").write_text("ok")
        return
    spark.sql(
        f"CREATE TABLE b.{TABLE} (id BIGINT, k STRING, v DOUBLE, n BIGINT, s STRING) USING iceberg "
        "TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='none')"
    )
    # Hashes do not compress: about 1 GB of Parquet for the default row count.
    spark.range(rows).selectExpr(
        "id",
        "sha2(CAST(id AS STRING), 256) AS k",
        "rand(1) AS v",
        "id * 7919 % 100003 AS n",
        "md5(CAST(id * 3 AS STRING)) AS s",
    ).repartition(files).writeTo(f"b.{TABLE}").append()
    spark.stop()
    (work / "built").write_text("ok")


def _parquet_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.parquet"))


def run_engine(
    engine: str, work: Path, output_files: int, tk_writer: str, case: str, target_bytes: int = 0
) -> dict[str, object]:
    """Inside the child: one engine on the saved state."""
    from tablekeeper.catalog import catalog_for

    started = time.perf_counter()
    input_bytes = _parquet_bytes(work / "wh")
    spark = _spark(work)
    if target_bytes and engine != "spark":
        # Both engines read the table's target (outside the timed part).
        spark.sql(
            f"ALTER TABLE b.{TABLE} SET TBLPROPERTIES ('write.target-file-size-bytes'='{target_bytes}')"
        )
    setup = time.perf_counter() - started
    t0 = time.perf_counter()
    if engine == "iceberg":
        jvm = spark.sparkContext._jvm
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, f"b.{TABLE}")
        action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession).rewriteDataFiles(
            table
        )
        if case in ("zorder", "ids"):
            action = action.zOrder(_java_strings(spark, _zorder_columns(case))).option("rewrite-all", "true")
        else:
            action = action.binPack()
        r = action.execute()
        rewritten, added = int(r.rewrittenDataFilesCount()), int(r.addedDataFilesCount())
    elif engine == "tablekeeper":
        from tablekeeper.jobs.compact import CompactOptions, run_compact

        if case in ("zorder", "ids"):
            options = CompactOptions(
                TABLE,
                strategy="sort",
                sort_order=f"zorder({', '.join(_zorder_columns(case))})",
                rewrite_all=True,
                writer=tk_writer,  # type: ignore[arg-type]
            )
        else:
            options = CompactOptions(TABLE, writer=tk_writer)  # type: ignore[arg-type]
        m = run_compact(options, catalog_for(_catalogs(work).get("b")), TABLE, spark).metrics
        rewritten, added = int(m["rewritten_data_files_count"]), int(m["added_data_files_count"])
    else:
        paths = [str(p) for p in (work / "wh" / "bench" / "c" / "data").rglob("*.parquet")]
        # The same file-stat parallelism compact uses (Spark's default is a task per path).
        spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.parallelism", "8")
        df = spark.read.parquet(*paths)
        if case in ("zorder", "ids"):
            keys = _zorder_columns(case)
            df = df.repartitionByRange(output_files, *keys).sortWithinPartitions(*keys)
        else:
            df = df.coalesce(output_files)
        df.write.option("compression", "zstd").parquet(str(work / "floor"))
        rewritten, added = len(paths), len(list((work / "floor").glob("*.parquet")))
    seconds = time.perf_counter() - t0
    written = work / "floor" if engine == "spark" else work / "wh"
    out_bytes = _parquet_bytes(written) - (0 if engine == "spark" else input_bytes)
    return {
        "engine": engine,
        "seconds": round(seconds, 3),
        "setup_seconds": round(setup, 3),
        "rewritten": rewritten,
        "added": added,
        "added_bytes": out_bytes,
    }


def _java_strings(spark, values: list[str]):  # type: ignore[no-untyped-def]
    array = spark.sparkContext._gateway.new_array(spark.sparkContext._jvm.java.lang.String, len(values))
    for i, v in enumerate(values):
        array[i] = v
    return array


def _summary(engine: str, runs: list[dict[str, object]]) -> dict[str, object]:
    failed = next((r for r in runs if "error" in r), None)
    if failed is not None:
        return {"engine": engine, "error": failed["error"]}
    seconds = sorted(float(r["seconds"]) for r in runs)  # type: ignore[arg-type]
    return {
        "engine": engine,
        "seconds": statistics.median(seconds),
        "min_seconds": seconds[0],
        "max_seconds": seconds[-1],
        "rewritten": runs[-1]["rewritten"],
        "added": runs[-1]["added"],
        "added_mib": round(int(runs[-1]["added_bytes"]) / 2**20),  # type: ignore[call-overload]
        "added_bytes": int(runs[-1]["added_bytes"]),  # type: ignore[call-overload]
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=15_500_000, help="rows in all (about 1 GB by default)")
    parser.add_argument("--output-files", type=int, default=2, help="files the floor writes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--tk-writer", default="auto", choices=["auto", "spark"], help="tablekeeper's compact --writer"
    )
    parser.add_argument("--case", default="binpack", choices=["binpack", "zorder", "nested", "ids"])
    parser.add_argument(
        "--target-bytes",
        type=int,
        default=0,
        help="the table's target file size for the rewrite (default 512 MB)",
    )
    parser.add_argument("--child", nargs=1, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(
            json.dumps(
                run_engine(
                    args.child[0],
                    Path(args.work),
                    args.output_files,
                    args.tk_writer,
                    args.case,
                    args.target_bytes,
                )
            )
        )
        return
    OUT.mkdir(parents=True, exist_ok=True)
    tag = "" if args.case == "binpack" else f"_{args.case}"
    # zorder rewrites the bin-pack case's table; nested and ids have their own.
    saved = OUT / (f"compact_saved_{args.case}" if args.case in ("nested", "ids") else "compact_saved")
    work = OUT / "compact_work"
    t = time.perf_counter()
    if not (saved / "built").exists():
        # Built where the engines run (metadata holds absolute paths), then saved for each run.
        build(work, args.files, args.rows, args.case)
        shutil.rmtree(saved, ignore_errors=True)
        shutil.copytree(work, saved)
    size = sum(p.stat().st_size for p in (saved / "wh").rglob("*.parquet"))
    shape = f"{args.case}: {args.files:,} files, {size / 2**20:,.0f} MiB"
    if args.target_bytes:
        shape += f", target {args.target_bytes:,} bytes"
    print(f"compact: table ready in {time.perf_counter() - t:.1f}s ({shape})", file=sys.stderr)
    runs: list[dict[str, object]] = []
    for rep in range(args.repeat):
        for engine in ENGINES:
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(saved, work)
            r = run_child(
                "bench.compact",
                engine,
                "--work",
                str(work),
                "--output-files",
                str(args.output_files),
                "--tk-writer",
                args.tk_writer,
                "--case",
                args.case,
                "--target-bytes",
                str(args.target_bytes),
            )
            runs.append({**r, "engine": engine, "run": rep + 1})
            print(f"  run {rep + 1} {engine}: {r.get('seconds', r.get('error'))}", file=sys.stderr)
    results = [_summary(e, [r for r in runs if r["engine"] == e]) for e in ENGINES]
    by = {r["engine"]: r for r in results if "seconds" in r}
    print(f"\n(compact {args.case}) {shape}; median of {args.repeat} alternating runs\n")
    print(
        "{:<12} {:>9} {:>13} {:>10} {:>10} {:>9} {:>7} {:>9} {:>13}".format(
            "engine",
            "seconds",
            "min-max",
            "x Iceberg",
            "x floor",
            "rewritten",
            "added",
            "added MiB",
            "bytes x Ice",
        )
    )
    for r in results:
        if "error" in r:
            print(f"{r['engine']!s:<12} failed: {r['error']}")
            continue
        secs = float(r["seconds"])  # type: ignore[arg-type]
        vs_ice = f"{secs / float(by['iceberg']['seconds']):.2f}x" if "iceberg" in by else "-"  # type: ignore[arg-type]
        vs_floor = f"{secs / float(by['spark']['seconds']):.2f}x" if "spark" in by else "-"  # type: ignore[arg-type]
        spread = f"{r['min_seconds']:.1f}-{r['max_seconds']:.1f}"
        # Bytes written against Iceberg's for the same rows: the codec, level and encodings the
        # table asks for should compress alike (Iceberg's own files are the reference).
        ice_bytes = int(by["iceberg"]["added_bytes"]) if "iceberg" in by else 0  # type: ignore[call-overload]
        bytes_vs_ice = f"{int(r['added_bytes']) / ice_bytes:.2f}x" if ice_bytes else "-"  # type: ignore[call-overload]
        print(
            f"{r['engine']!s:<12} {secs:>9.2f} {spread:>13} {vs_ice:>10} {vs_floor:>10} "
            f"{r['rewritten']!s:>9} {r['added']!s:>7} {r['added_mib']!s:>9} {bytes_vs_ice:>13}"
        )
    out = OUT / f"compact{tag}.json"
    out.write_text(json.dumps({"shape": shape, "results": results, "runs": runs}, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
