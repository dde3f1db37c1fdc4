"""rewrite-manifests against Iceberg's RewriteManifestsSparkAction on identical table states.

A v2 table partitioned by an int ``p`` (100 values) is built once and saved: M appends (default
1,000) of F/M data files each (default 1,000,000 files in all), every append touching every
partition, so M small manifests whose partition ranges all overlap. Each engine runs in its own
process on a fresh copy, both on a local Spark session of the same size (JVM start-up excluded):

- ``iceberg``: ``SparkActions.get().rewriteManifests(table).execute()``;
- ``tablekeeper``: ``rewrite-manifests --engine spark`` (entries read, sorted and written on the
  executors).

Both must end with every file live and fewer manifests. Engines alternate over ``--repeat`` runs
and the median is reported. Goal: tablekeeper at most 0.8x Iceberg's time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from bench.child import alternate, bench_catalogs, metadata_file, summarize

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
ENGINES = ("iceberg", "tablekeeper")
TABLE = "bench.m"
PARTITIONS = 100


def _catalogs(work: Path):  # type: ignore[no-untyped-def]
    return bench_catalogs(work)


def build(work: Path, files: int, manifests: int) -> None:
    from tablekeeper.catalog import catalog_for
    from tablekeeper.commit.producer import SnapshotChange
    from tablekeeper.commit.transaction import Committer
    from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
    from tablekeeper.iceberg.types import LONG, NestedField, Schema
    from tablekeeper.iceberg.updates import new_table_metadata

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    catalog = catalog_for(_catalogs(work).get("b"))
    location = str(work / "wh" / "bench" / "m")
    schema = Schema(0, (NestedField(1, "p", LONG), NestedField(2, "v", LONG)))
    spec = PartitionSpec(0, (PartitionField(1, 1000, "p", "identity"),))
    meta = new_table_metadata(
        schema=schema,
        location=location,
        timestamp_ms=int(time.time() * 1000),
        spec=spec,
        properties={"commit.manifest-merge.enabled": "false"},
    )
    catalog.create_table(TABLE, meta)
    committer = Committer(catalog, TABLE)
    per = max(1, files // manifests)
    for m in range(manifests):
        added = tuple(metadata_file(location, m * per + i, i % PARTITIONS) for i in range(per))
        committer.commit_snapshot(SnapshotChange("append", added_files=added))


def run_engine(engine: str, work: Path) -> dict[str, object]:
    from tablekeeper.catalog import catalog_for
    from tablekeeper.spark.session import get_spark, local_jar_paths
    from tablekeeper.tables.iceberg import load_manifests

    catalog = catalog_for(_catalogs(work).get("b"))
    started = time.perf_counter()
    spark = get_spark(
        "bench-rewrite-manifests",
        catalogs=_catalogs(work),
        conf={"spark.jars": ",".join(map(str, local_jar_paths()))},
    )
    setup = time.perf_counter() - started
    t0 = time.perf_counter()
    if engine == "iceberg":
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, f"b.{TABLE}")
        jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession).rewriteManifests(
            table
        ).execute()
    else:
        from tablekeeper.jobs.rewrite_manifests import RewriteManifestsOptions, run_rewrite_manifests

        run_rewrite_manifests(RewriteManifestsOptions(TABLE, engine="spark"), catalog, TABLE, spark)
    seconds = time.perf_counter() - t0
    loaded = catalog.require(TABLE)
    manifests = load_manifests(loaded.io, loaded.metadata.current_snapshot())
    return {
        "engine": engine,
        "seconds": round(seconds, 3),
        "setup_seconds": round(setup, 3),
        "manifests_after": len(manifests),
        "live_files": sum((m.added_files_count or 0) + (m.existing_files_count or 0) for m in manifests),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--manifests", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=1, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_engine(args.child[0], Path(args.work))))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    saved, work = OUT / "rewrite_manifests_saved", OUT / "rewrite_manifests_work"
    t = time.perf_counter()
    marker = saved / f"built-{args.files}-{args.manifests}"
    if not marker.exists():
        # Built where the engines run (metadata holds absolute paths), then saved for each run.
        build(work, args.files, args.manifests)
        shutil.rmtree(saved, ignore_errors=True)
        shutil.copytree(work, saved)
        marker.write_text("ok")
    shape = f"v2 table, {args.files:,} data files in {args.manifests:,} manifests, {PARTITIONS} partitions"
    print(f"rewrite-manifests: table ready in {time.perf_counter() - t:.1f}s ({shape})", file=sys.stderr)
    runs = alternate("bench.rewrite_manifests", ENGINES, args.repeat, saved, work)
    results = summarize(runs, ENGINES, ("manifests_after", "live_files"))
    print(f"\n(rewrite-manifests) {shape}; median of {args.repeat} alternating runs\n")
    print(
        "{:<12} {:>9} {:>13} {:>16} {:>11}".format(
            "engine", "seconds", "min-max", "manifests after", "live files"
        )
    )
    for r in results:
        if "error" in r:
            print(f"{r['engine']!s:<12} failed: {r['error']}")
            continue
        spread = f"{r['min_seconds']:.2f}-{r['max_seconds']:.2f}"
        print(
            f"{r['engine']!s:<12} {float(r['seconds']):>9.2f} {spread:>13} "  # type: ignore[arg-type]
            f"{r['manifests_after']!s:>16} {r['live_files']!s:>11}"
        )
    timed = {str(r["engine"]): float(r["seconds"]) for r in results if "seconds" in r}  # type: ignore[arg-type]
    ratio = None
    if len(timed) == 2:
        ratio = timed["tablekeeper"] / timed["iceberg"]
        goal = "met" if ratio <= 0.8 else "not met"
        print(f"\ntablekeeper / iceberg: {ratio:.2f}x (goal at most 0.8x: {goal})")
    out = OUT / "rewrite_manifests.json"
    out.write_text(json.dumps({"shape": shape, "results": results, "ratio": ratio, "runs": runs}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
