"""backfill-row-lineage against Iceberg Java's own path on identical table states.

A v2 table of F data files (default 100,000, in M appends of F/M files each, so M manifests) is
built once and saved. Each engine runs in its own process on a fresh copy:

- ``iceberg``: Iceberg Java through Spark: ``format-version`` set to 3, then one commit (an empty
  append), whose manifest list gives every manifest its row-id range;
- ``tablekeeper``: ``backfill-row-lineage`` (one ``replace`` commit, no Spark needed).

Both must end with the same ``next-row-id`` (every file's rows counted once). Engines alternate
over ``--repeat`` runs and the median is reported. Goal: at most 10 s; the table says which is
faster.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from bench.child import alternate, bench_catalogs, summarize

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
ENGINES = ("iceberg", "tablekeeper")
TABLE = "bench.r"


def _catalogs(work: Path):  # type: ignore[no-untyped-def]
    return bench_catalogs(work)


def build(work: Path, files: int, manifests: int) -> None:
    from tablekeeper.catalog import catalog_for
    from tablekeeper.commit.producer import SnapshotChange
    from tablekeeper.commit.transaction import Committer
    from tablekeeper.iceberg.content import DATA, DataFile
    from tablekeeper.iceberg.types import LONG, NestedField, Schema
    from tablekeeper.iceberg.updates import new_table_metadata

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    catalog = catalog_for(_catalogs(work).get("b"))
    location = str(work / "wh" / "bench" / "r")
    meta = new_table_metadata(
        schema=Schema(0, (NestedField(1, "id", LONG),)),
        location=location,
        timestamp_ms=int(time.time() * 1000),
        properties={"commit.manifest-merge.enabled": "false"},
    )
    catalog.create_table(TABLE, meta)
    committer = Committer(catalog, TABLE)
    per = max(1, files // manifests)
    for m in range(manifests):
        # Metadata only: neither engine opens a data file.
        added = tuple(
            DataFile(DATA, f"{location}/data/f-{m * per + i:08d}.parquet", "PARQUET", (), 100, 4096)
            for i in range(per)
        )
        committer.commit_snapshot(SnapshotChange("append", added_files=added))


def run_engine(engine: str, work: Path) -> dict[str, object]:
    from tablekeeper.catalog import catalog_for

    catalog = catalog_for(_catalogs(work).get("b"))
    started = time.perf_counter()
    if engine == "iceberg":
        from tablekeeper.spark.session import get_spark, local_jar_paths

        spark = get_spark(
            "bench-backfill",
            catalogs=_catalogs(work),
            conf={"spark.jars": ",".join(map(str, local_jar_paths()))},
        )
        setup = time.perf_counter() - started
        t0 = time.perf_counter()
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, f"b.{TABLE}")
        table.updateProperties().set("format-version", "3").commit()
        table.newFastAppend().commit()
    else:
        from tablekeeper.jobs.backfill_row_lineage import BackfillRowLineageOptions, run_backfill

        setup = 0.0
        t0 = time.perf_counter()
        run_backfill(BackfillRowLineageOptions(TABLE), catalog, TABLE)
    seconds = time.perf_counter() - t0
    after = catalog.require(TABLE).metadata
    return {
        "engine": engine,
        "seconds": round(seconds, 3),
        "setup_seconds": round(setup, 3),
        "format_version": after.format_version,
        "next_row_id": after.next_row_id,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--manifests", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=1, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_engine(args.child[0], Path(args.work))))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    saved, work = OUT / "backfill_saved", OUT / "backfill_work"
    t = time.perf_counter()
    marker = saved / f"built-{args.files}-{args.manifests}"
    if not marker.exists():
        # Built where the engines run (metadata holds absolute paths), then saved for each run.
        build(work, args.files, args.manifests)
        shutil.rmtree(saved, ignore_errors=True)
        shutil.copytree(work, saved)
        marker.write_text("ok")
    shape = f"v2 table, {args.files:,} data files in {args.manifests} manifests"
    print(f"backfill: table ready in {time.perf_counter() - t:.1f}s ({shape})", file=sys.stderr)
    runs = alternate("bench.backfill", ENGINES, args.repeat, saved, work)
    results = summarize(runs, ENGINES, ("next_row_id", "format_version"))
    print(f"\n(backfill-row-lineage) {shape}; median of {args.repeat} alternating runs\n")
    print(
        "{:<12} {:>9} {:>13} {:>12} {:>15}".format(
            "engine", "seconds", "min-max", "next-row-id", "format version"
        )
    )
    for r in results:
        if "error" in r:
            print(f"{r['engine']!s:<12} failed: {r['error']}")
            continue
        median = float(r["seconds"])  # type: ignore[arg-type]
        spread = f"{r['min_seconds']:.2f}-{r['max_seconds']:.2f}"
        row = f"{r['engine']!s:<12} {median:>9.2f} {spread:>13} "
        print(row + f"{r['next_row_id']!s:>12} {r['format_version']!s:>15}")
    timed = {str(r["engine"]): float(r["seconds"]) for r in results if "seconds" in r}  # type: ignore[arg-type]
    if len(timed) == 2:
        faster = min(timed, key=lambda e: timed[e])
        goal = "met" if timed["tablekeeper"] <= 10 else "not met"
        print(f"\nfaster: {faster}; tablekeeper goal (at most 10 s): {goal}")
    out = OUT / "backfill.json"
    out.write_text(json.dumps({"shape": shape, "results": results, "runs": runs}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
