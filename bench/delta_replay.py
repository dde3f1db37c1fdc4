"""Benchmark: replay of a synthetic Delta log with 1,000,000 live files (checkpoint + 100 commits).

Engines, each in its own process so peak memory is its own: tablekeeper's pure path, tablekeeper's
Spark path (counted in Spark, and ``spark-driver``: the state brought to the driver), delta-rs,
delta-spark. Prints a table and writes bench/out/delta_replay.json.

    python -m bench.delta_replay [--files N] [--commits C] [--engines pure,spark,spark-driver,...]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

from bench.child import run_child

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
ENGINES = ("pure", "spark", "spark-driver", "delta-rs", "delta-spark")


def _spark():  # type: ignore[no-untyped-def]
    from tablekeeper.catalog.config import parse_catalogs
    from tablekeeper.spark import get_spark

    return get_spark("bench", catalogs=parse_catalogs("catalogs: {}\n", OUT / "wh"))


def run_engine(engine: str, table: str) -> dict[str, object]:
    """Runs inside the child process; returns timings (replay only: no JVM start counted)."""
    started = time.perf_counter()
    setup = 0.0
    if engine == "pure":
        from tablekeeper.tables.delta import load_snapshot

        snap = load_snapshot(table)
        files = snap.num_files
    elif engine == "spark":
        spark = _spark()
        setup = time.perf_counter() - started
        from tablekeeper.delta.segment import build_segment
        from tablekeeper.io import FileIO
        from tablekeeper.spark.delta_replay import spark_state
        from tablekeeper.tables.delta import list_log

        # Like delta-spark's below: replay in Spark and count the live files there (the converter
        # writes manifests from this DataFrame on the executors; nothing is collected).
        segment = build_segment(list_log(FileIO.for_location(table), table), table=table)
        live = spark_state(spark, table, segment).live_files()
        files = 0 if live is None else int(live.count())
    elif engine == "spark-driver":
        spark = _spark()
        setup = time.perf_counter() - started
        from tablekeeper.delta.segment import build_segment
        from tablekeeper.io import FileIO
        from tablekeeper.spark.delta_replay import spark_replay
        from tablekeeper.tables.delta import list_log

        # Replay in Spark, the state brought to the driver as Arrow (what a driver-path
        # conversion with --engine spark reads): the peak is the driver's copy of it.
        segment = build_segment(list_log(FileIO.for_location(table), table), table=table)
        files = spark_replay(spark, table, segment).num_files
    elif engine == "delta-rs":
        from deltalake import DeltaTable

        dt = DeltaTable(table)
        files = len(dt.file_uris())
    elif engine == "delta-spark":
        spark = _spark()
        setup = time.perf_counter() - started
        jvm = spark.sparkContext._jvm
        delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, table)
        files = int(delta_log.unsafeVolatileSnapshot().allFiles().count())
    else:
        raise SystemExit(f"unknown engine {engine}")
    total = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "engine": engine,
        "seconds": round(total - setup, 3),
        "setup_seconds": round(setup, 3),
        "files": files,
        "peak_rss_mib": round(peak_kib / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--swap", type=int, default=1000, help="files removed and added per commit")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_engine(args.child, args.table)))
        return
    from bench.delta_log_gen import generate

    OUT.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    table = generate(OUT / f"delta_{args.files}", args.files, args.commits, args.swap)
    print(f"log ready in {time.perf_counter() - t:.1f}s: {table}", file=sys.stderr)
    results = []
    for engine in args.engines.split(","):
        results.append(run_child("bench.delta_replay", engine, "--table", str(table)))
    pure = next((r for r in results if r.get("engine") == "pure" and "seconds" in r), None)
    print(f"\nDelta log replay: {args.files:,} live files, checkpoint + {args.commits} commits\n")
    print(f"{'engine':<12} {'replay s':>9} {'vs pure':>8} {'setup s':>8} {'files':>10} {'peak MiB':>9}")
    for r in results:
        if "error" in r:
            print(f"{r['engine']:<12} failed: {r['error']}")
            continue
        ratio = f"{r['seconds'] / pure['seconds']:.2f}x" if pure and pure["seconds"] else "-"
        print(
            f"{r['engine']:<12} {r['seconds']:>9.2f} {ratio:>8} {r['setup_seconds']:>8.2f} "
            f"{r['files']:>10,} {r['peak_rss_mib']:>9.0f}"
        )
    report = {
        "case": "delta_log_replay",
        "files": args.files,
        "commits": args.commits,
        "swap": args.swap,
        "results": results,
    }
    (OUT / "delta_replay.json").write_text(json.dumps(report, indent=2))
    print(f"\nwrote {OUT / 'delta_replay.json'}")


if __name__ == "__main__":
    main()
