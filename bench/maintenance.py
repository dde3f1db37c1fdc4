"""expire-snapshots and remove-orphans against Iceberg's Spark actions on identical table states.

(a) ``expire``: a table of S snapshots (default 500), each an overwrite that replaces the previous
    snapshot's files with F/S new ones (F data files in all, default 100,000); every snapshot but the
    last 10 is expired, so nearly every file goes. Iceberg's ExpireSnapshotsSparkAction and
    tablekeeper each run on the same saved state (restored between runs), in their own process.
(b) ``orphans``: a table of N referenced files (default 180,000) plus N/9 planted orphans (10% of
    the files under the location), all old; DeleteOrphanFilesSparkAction against tablekeeper.

Data files are tiny (neither engine opens them); the work is reading metadata, comparing file
sets, listing and deleting. Timings exclude JVM start-up. Engines alternate over ``--repeat`` runs
(fresh processes, state restored each time) and the median is reported. The goal is tablekeeper
at most 0.8x Iceberg's time in both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from bench.child import bench_catalogs, run_child

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
# tablekeeper: --engine auto (these tables fit the driver engine); tablekeeper-spark: the executors.
ENGINES = ("iceberg", "tablekeeper", "tablekeeper-spark")
TABLE = "bench.t"
OLD = time.time() - 10 * 86_400


def _catalogs(work: Path):  # type: ignore[no-untyped-def]
    return bench_catalogs(work)


_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC


def _write_old(path: str, content: bytes) -> None:
    # One open, write, futimens and close: the scale bench writes millions of these.
    fd = os.open(path, _WRITE_FLAGS, 0o644)
    try:
        os.write(fd, content)
        os.utime(fd, (OLD, OLD))
    finally:
        os.close(fd)


def _data_file(location: str, i: int):  # type: ignore[no-untyped-def]
    from tablekeeper.iceberg.content import DATA, DataFile

    path = f"{location}/data/f-{i:08d}.parquet"
    _write_old(path, b"x" * 16)
    return DataFile(
        content=DATA,
        file_path=path,
        file_format="PARQUET",
        partition=(),
        record_count=1,
        file_size_in_bytes=16,
    )


def build(work: Path, snapshots: int, files: int, orphans: int) -> None:
    """The table (and its planted orphans) under ``work``."""
    from tablekeeper.catalog import catalog_for
    from tablekeeper.commit.producer import SnapshotChange
    from tablekeeper.commit.transaction import Committer
    from tablekeeper.iceberg.types import LONG, NestedField, Schema
    from tablekeeper.iceberg.updates import new_table_metadata

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    catalog = catalog_for(_catalogs(work).get("b"))
    location = str(work / "wh" / "bench" / "t")
    meta = new_table_metadata(
        schema=Schema(0, (NestedField(1, "id", LONG),)),
        location=location,
        timestamp_ms=int(time.time() * 1000),
        properties={"commit.manifest-merge.enabled": "false"},
    )
    catalog.create_table(TABLE, meta)
    Path(location, "data").mkdir(parents=True, exist_ok=True)
    committer = Committer(catalog, TABLE)
    per = max(1, files // snapshots)
    previous: list[str] = []
    n = 0
    for _ in range(snapshots):
        added = [_data_file(location, n + i) for i in range(per)]
        n += per
        op = "append" if not previous else "overwrite"
        committer.commit_snapshot(
            SnapshotChange(op, added_files=tuple(added), removed_paths=frozenset(previous))
        )
        previous = [f.file_path for f in added]
    for i in range(orphans):
        _write_old(f"{location}/data/orphan-{i:08d}.parquet", b"o" * 16)
    for p in Path(location, "metadata").iterdir():
        os.utime(p, (OLD, OLD))


def saved_state(saved: Path, work: Path, snapshots: int, files: int, orphans: int) -> bool:
    """The table for these sizes in ``saved``, built under ``work`` (where the engines run: its
    metadata holds absolute paths) unless a marker says an earlier run left it; True if reused."""
    marker = saved / f".complete-{snapshots}-{files}-{orphans}"
    if marker.exists():
        return True
    shutil.rmtree(saved, ignore_errors=True)
    build(work, snapshots, files, orphans)
    work.rename(saved)
    marker.touch()
    return False


def _link_data(src: str, dst: str) -> None:
    # Engines only delete data files, so a link is as good as a copy and takes neither the time
    # nor the disk of millions of them; the catalog and metadata, which are written, are copied.
    if Path(src).parent.name == "data":
        os.link(src, dst)
    else:
        shutil.copy2(src, dst)  # copy2 keeps the old modification times


def restore(saved: Path, work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(saved, work, symlinks=True, copy_function=_link_data)


def run_engine(case: str, engine: str, work: Path, conf: dict[str, str] | None = None) -> dict[str, object]:
    """Inside the child: one engine on the saved state; ``conf`` adds to the session's settings."""
    from tablekeeper.catalog import catalog_for
    from tablekeeper.spark.session import get_spark, local_jar_paths

    catalogs = _catalogs(work)
    started = time.perf_counter()
    settings = {"spark.jars": ",".join(map(str, local_jar_paths())), **(conf or {})}
    spark = get_spark("bench-maintenance", catalogs=catalogs, conf=settings)
    setup = time.perf_counter() - started
    t0 = time.perf_counter()
    now_ms = int(time.time() * 1000)
    if engine == "iceberg":
        jvm = spark.sparkContext._jvm
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, f"b.{TABLE}")
        actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
        if case == "expire":
            r = actions.expireSnapshots(table).expireOlderThan(now_ms).retainLast(10).execute()
            deleted = (
                int(r.deletedDataFilesCount())
                + int(r.deletedManifestsCount())
                + int(r.deletedManifestListsCount())
            )
        else:
            r = actions.deleteOrphanFiles(table).olderThan(now_ms - 3 * 86_400_000).execute()
            deleted = sum(1 for _ in r.orphanFileLocations())
    else:
        catalog = catalog_for(catalogs.get("b"))
        mode = "spark" if engine == "tablekeeper-spark" else "auto"
        if case == "expire":
            from tablekeeper.jobs.expire_snapshots import ExpireSnapshotsOptions, run_expire

            options = ExpireSnapshotsOptions(TABLE, older_than=str(now_ms), retain_last=10, engine=mode)
            m = run_expire(options, catalog, TABLE, spark).metrics
            deleted = int(m["deleted_data_files_count"]) + int(m["deleted_manifest_files_count"])  # type: ignore[call-overload]
            deleted += int(m["deleted_manifest_lists_count"])  # type: ignore[call-overload]
        else:
            from tablekeeper.jobs.remove_orphans import RemoveOrphansOptions, run_orphans

            m = run_orphans(RemoveOrphansOptions(TABLE, engine=mode), catalog, TABLE, spark).metrics
            deleted = int(m["deleted_files_count"])  # type: ignore[call-overload]
    return {
        "engine": engine,
        "seconds": round(time.perf_counter() - t0, 3),
        "setup_seconds": round(setup, 3),
        "deleted": deleted,
    }


def _summary(engine: str, runs: list[dict[str, object]]) -> dict[str, object]:
    """Median seconds over an engine's runs (any failed run makes the engine failed)."""
    failed = next((r for r in runs if "error" in r), None)
    if failed is not None:
        return {"engine": engine, "error": failed["error"]}
    seconds = sorted(float(r["seconds"]) for r in runs)  # type: ignore[arg-type]
    setups = sorted(float(r["setup_seconds"]) for r in runs)  # type: ignore[arg-type]
    deleted = {int(r["deleted"]) for r in runs}  # type: ignore[call-overload]
    if len(deleted) != 1:
        return {"engine": engine, "error": f"runs deleted different counts: {sorted(deleted)}"}
    return {
        "engine": engine,
        "seconds": statistics.median(seconds),
        "min_seconds": seconds[0],
        "max_seconds": seconds[-1],
        "setup_seconds": statistics.median(setups),
        "deleted": deleted.pop(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default="expire,orphans")
    parser.add_argument("--snapshots", type=int, default=500)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--orphan-files", type=int, default=180_000, help="referenced files of case (b)")
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs per engine (median reported)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_engine(args.child[0], args.child[1], Path(args.work))))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    report: dict[str, object] = {}
    for case in args.cases.split(","):
        saved, work = OUT / f"maint_{case}_saved", OUT / f"maint_{case}_work"
        t = time.perf_counter()
        if case == "expire":
            reused = saved_state(saved, work, args.snapshots, args.files, 0)
            shape = f"{args.snapshots} snapshots, {args.files:,} data files"
        else:
            reused = saved_state(saved, work, 1, args.orphan_files, args.orphan_files // 9)
            shape = f"{args.orphan_files:,} referenced files + {args.orphan_files // 9:,} orphans"
        ready = "reused" if reused else f"ready in {time.perf_counter() - t:.1f}s"
        print(f"{case}: table {ready} ({shape})", file=sys.stderr)
        runs: list[dict[str, object]] = []
        # Engines alternate, each run in a fresh process on the restored state: this machine's
        # speed drifts by a third within minutes, so one run per engine says little.
        for rep in range(args.repeat):
            for engine in ENGINES:
                restore(saved, work)
                r = run_child("bench.maintenance", case, engine, "--work", str(work))
                runs.append({**r, "engine": engine, "run": rep + 1})
        shutil.rmtree(work, ignore_errors=True)
        results = [_summary(engine, [r for r in runs if r["engine"] == engine]) for engine in ENGINES]
        base = next((r for r in results if r.get("engine") == "iceberg" and "seconds" in r), None)
        print(f"\n({case}) {shape}; median of {args.repeat} alternating runs\n")
        head = ("engine", "seconds", "min-max", "x Iceberg time", "deleted", "setup s")
        print("{:<18} {:>9} {:>13} {:>15} {:>9} {:>8}".format(*head))
        for r in results:
            if "error" in r:
                print(f"{r['engine']!s:<18} failed: {r['error']}")
                continue
            ratio = f"{float(r['seconds']) / float(base['seconds']):.2f}x" if base else "-"  # type: ignore[arg-type]
            secs, setup = float(r["seconds"]), float(r["setup_seconds"])  # type: ignore[arg-type]
            spread = f"{r['min_seconds']:.1f}-{r['max_seconds']:.1f}"
            print(
                f"{r['engine']!s:<18} {secs:>9.2f} {spread:>13} {ratio:>15} {r['deleted']:>9,} {setup:>8.2f}"
            )
        report[case] = {"shape": shape, "results": results, "runs": runs}
    out = OUT / "maintenance.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
