"""health over a fleet and over one huge table, against Iceberg's metadata tables in Spark SQL.

Two table states are built once and saved (metadata only: no engine opens a data file):

- ``fleet``: 200 v2 tables of 1,000 data files each (10 appends of 100 files, 10 partitions);
- ``big``: one v2 table of 1,000,000 data files in 1,000 manifests (100 partitions).

Each engine runs in its own process on a fresh copy:

- ``iceberg``: what a team can do today without tablekeeper: per table, Spark SQL over Iceberg's
  ``files``, ``manifests`` and ``snapshots`` metadata tables (file count, bytes, small files,
  manifest count, snapshot count), on a local Spark session (JVM start-up excluded);
- ``tablekeeper``: ``health`` over the catalog's namespace, every metric and recommendation, with
  no Spark session: a fleet on 8 driver threads, the big table in one process per core;
- ``tablekeeper-1`` (big only): the same table read in one process, for its peak memory (the
  per-core processes' memory is not counted in the driver's).

Reported: seconds, the driver's peak resident memory (the Python process; for ``iceberg`` also the
JVM's heap is not counted, it has its own), and the ratio. Goal: each case under 60 s and 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
from pathlib import Path

from bench.child import alternate, bench_catalogs, metadata_file, summarize

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
ENGINES = ("iceberg", "tablekeeper")
NAMESPACE = "bench"
FLEET_TABLES = 200
FLEET_APPENDS = 10
FLEET_FILES_PER_APPEND = 100
SMALL = 384 * 1024 * 1024  # 75% of Iceberg's default 512 MiB target: compaction's "small"


def _catalogs(work: Path):  # type: ignore[no-untyped-def]
    return bench_catalogs(work)


def _append(committer, location: str, first: int, count: int, partitions: int) -> None:  # type: ignore[no-untyped-def]
    from tablekeeper.commit.producer import SnapshotChange

    added = tuple(metadata_file(location, i, i % partitions) for i in range(first, first + count))
    committer.commit_snapshot(SnapshotChange("append", added_files=added))


def _create(catalog, identifier: str, location: str):  # type: ignore[no-untyped-def]
    from tablekeeper.commit.transaction import Committer
    from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
    from tablekeeper.iceberg.types import LONG, NestedField, Schema
    from tablekeeper.iceberg.updates import new_table_metadata

    schema = Schema(0, (NestedField(1, "p", LONG), NestedField(2, "v", LONG)))
    spec = PartitionSpec(0, (PartitionField(1, 1000, "p", "identity"),))
    meta = new_table_metadata(
        schema=schema,
        location=location,
        timestamp_ms=int(time.time() * 1000),
        spec=spec,
        properties={"commit.manifest-merge.enabled": "false"},
    )
    catalog.create_table(identifier, meta)
    return Committer(catalog, identifier)


def build(case: str, work: Path, files: int, manifests: int) -> None:
    from tablekeeper.catalog import catalog_for

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    catalog = catalog_for(_catalogs(work).get("b"))
    if case == "fleet":
        for t in range(FLEET_TABLES):
            name = f"t{t:03d}"
            committer = _create(catalog, f"{NAMESPACE}.{name}", str(work / "wh" / NAMESPACE / name))
            for a in range(FLEET_APPENDS):
                location = str(work / "wh" / NAMESPACE / name)
                _append(committer, location, a * FLEET_FILES_PER_APPEND, FLEET_FILES_PER_APPEND, 10)
        return
    location = str(work / "wh" / NAMESPACE / "big")
    committer = _create(catalog, f"{NAMESPACE}.big", location)
    per = max(1, files // manifests)
    for m in range(manifests):
        _append(committer, location, m * per, per, 100)


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run_engine(engine: str, work: Path, case: str) -> dict[str, object]:
    from tablekeeper.catalog import catalog_for

    catalogs = _catalogs(work)
    catalog = catalog_for(catalogs.get("b"))
    tables = catalog.list_tables(NAMESPACE)
    if engine == "iceberg":
        from tablekeeper.spark.session import get_spark, local_jar_paths

        started = time.perf_counter()
        spark = get_spark(
            "bench-health", catalogs=catalogs, conf={"spark.jars": ",".join(map(str, local_jar_paths()))}
        )
        setup = time.perf_counter() - started
        t0 = time.perf_counter()
        small = total = 0
        for t in tables:
            row = spark.sql(
                f"SELECT count(*) AS n, sum(file_size_in_bytes) AS b, "
                f"sum(if(file_size_in_bytes < {SMALL}, 1, 0)) AS s FROM b.{t}.files"
            ).collect()[0]
            spark.sql(f"SELECT count(*) FROM b.{t}.manifests").collect()
            spark.sql(f"SELECT count(*) FROM b.{t}.snapshots").collect()
            small += int(row["s"] or 0)
            total += int(row["n"])
        seconds = time.perf_counter() - t0
        return {
            "seconds": round(seconds, 3),
            "setup_seconds": round(setup, 3),
            "tables": len(tables),
            "data_files": total,
            "small_files": small,
            "recommendations": None,
            "driver_peak_mib": round(_peak_mib(), 1),
        }
    if engine == "tablekeeper-1":
        # One process reads every manifest: the time without the per-core processes, and the
        # peak memory a single reader needs (the per-core processes' is not the driver's).
        from tablekeeper.jobs.health.iceberg import iceberg_health, tally_on_driver
        from tablekeeper.jobs.health.model import Thresholds

        t0 = time.perf_counter()
        now = int(time.time() * 1000)
        found = [
            iceberg_health(catalog, t, Thresholds(), {}, now_ms=now, reader=tally_on_driver) for t in tables
        ]
        seconds = time.perf_counter() - t0
        return {
            "seconds": round(seconds, 3),
            "setup_seconds": 0.0,
            "tables": len(found),
            "data_files": sum(h.metrics["data_files"] for h in found),
            "small_files": sum(h.metrics["small_files"] for h in found),
            "recommendations": sorted({r.job for h in found for r in h.recommendations}),
            "driver_peak_mib": round(_peak_mib(), 1),
        }
    from tablekeeper.jobs.common.context import JobContext
    from tablekeeper.jobs.health import HealthOptions, run

    def no_spark():  # type: ignore[no-untyped-def]
        raise AssertionError("health must not start Spark here")

    context = JobContext(catalogs, spark=no_spark, submitted=lambda: None)
    t0 = time.perf_counter()
    result = run(HealthOptions(catalog="b", namespace=NAMESPACE, output="json"), context)
    seconds = time.perf_counter() - t0
    body = json.loads(result.to_json())
    return {
        "seconds": round(seconds, 3),
        "setup_seconds": 0.0,
        "tables": body["metrics"]["tables_checked"],
        "data_files": sum(t["metrics"].get("data_files", 0) for t in body["tables"]),
        "small_files": sum(t["metrics"].get("small_files", 0) for t in body["tables"]),
        "recommendations": body["metrics"]["recommendations"],
        "driver_peak_mib": round(_peak_mib(), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=["fleet", "big", "both"], default="both")
    parser.add_argument("--files", type=int, default=1_000_000, help="big: data files")
    parser.add_argument("--manifests", type=int, default=1_000, help="big: manifests")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", nargs=1, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        engine, case = args.child[0].split(":")
        print(json.dumps(run_engine(engine, Path(args.work), case)))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    report: dict[str, object] = {}
    for case in ("fleet", "big") if args.case == "both" else (args.case,):
        saved, work = OUT / f"health_{case}_saved", OUT / f"health_{case}_work"
        size = f"{args.files}-{args.manifests}" if case == "big" else f"{FLEET_TABLES}"
        marker = saved / f"built-{size}"
        t = time.perf_counter()
        if not marker.exists():
            build(case, work, args.files, args.manifests)
            shutil.rmtree(saved, ignore_errors=True)
            shutil.copytree(work, saved)
            marker.write_text("ok")
        shape = (
            f"{FLEET_TABLES} tables x {FLEET_APPENDS * FLEET_FILES_PER_APPEND:,} files"
            if case == "fleet"
            else f"1 table, {args.files:,} files in {args.manifests:,} manifests"
        )
        print(f"health {case}: tables ready in {time.perf_counter() - t:.1f}s ({shape})", file=sys.stderr)
        engines = tuple(f"{e}:{case}" for e in (*ENGINES, "tablekeeper-1") if case == "big" or e in ENGINES)
        runs = alternate("bench.health", engines, args.repeat, saved, work)
        results = summarize(runs, engines, ("tables", "data_files", "small_files", "driver_peak_mib"))
        print(f"\n(health, {case}) {shape}; median of {args.repeat} alternating runs\n")
        print(
            "{:<20} {:>9} {:>8} {:>12} {:>12} {:>16}".format(
                "engine", "seconds", "tables", "data files", "small files", "driver peak MiB"
            )
        )
        for r in results:
            if "error" in r:
                print(f"{r['engine']!s:<20} failed: {r['error']}")
                continue
            print(
                f"{r['engine']!s:<20} {float(r['seconds']):>9.2f} {r['tables']!s:>8} "  # type: ignore[arg-type]
                f"{r['data_files']!s:>12} {r['small_files']!s:>12} {r['driver_peak_mib']!s:>16}"
            )
        timed = {str(r["engine"]).split(":")[0]: r for r in results if "seconds" in r}
        ratio = None
        if "iceberg" in timed and "tablekeeper" in timed:
            ratio = float(timed["tablekeeper"]["seconds"]) / float(timed["iceberg"]["seconds"])  # type: ignore[arg-type]
            tk = timed["tablekeeper"]
            goal = "met" if float(tk["seconds"]) < 60 and float(tk["driver_peak_mib"]) < 1024 else "not met"  # type: ignore[arg-type]
            print(f"\ntablekeeper / iceberg: {ratio:.2f}x; goal under 60 s and 1 GiB: {goal}")
        report[case] = {"shape": shape, "results": results, "ratio": ratio, "runs": runs}
    out = OUT / "health.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
