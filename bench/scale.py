"""Scaling by 10x: convert-delta, expire-snapshots and remove-orphans at growing sizes, with the
driver's time and peak memory at each, charted (not part of ``make bench``: ``make bench-scale``).

- ``convert``: synthetic Delta logs (checkpoint plus 10 commits that each swap 1,000 files, as
  bench.delta_log_gen writes them) of 1M, 3M and 10M live files, converted by tablekeeper's
  executor path (bench.convert_delta's ``tablekeeper-spark``). Goal: time grows linearly and the
  driver stays under 2 GiB at 10M files.
- ``expire``: S snapshots of 1,000 files each (100, 300, 1,000), each an overwrite of the one before
  (bench.maintenance's table); all but the last 10 expired.
- ``orphans``: N listed files (200k, 600k, 2M), 10% of them orphans (bench.maintenance's table).

expire and orphans run tablekeeper with ``--engine spark`` and Iceberg's Spark action
(ExpireSnapshotsSparkAction, DeleteOrphanFilesSparkAction, exactly as bench.maintenance runs
them) on the same saved state, restored before each run. Every run is its own process (the
driver) with the same ``spark.driver.memory``, on a Spark standalone cluster the bench starts (a
master and two one-core workers, each executor its own JVM; ``--master local`` runs ``local[2]``
instead, where the executors live in the driver's JVM and its memory is theirs too). JVM start-up
is excluded from the time (reported as setup). Driver peak memory is the Python process's maximum
RSS plus the driver JVM's. A run that runs out of memory or time is recorded as such, and the
engine is not run at larger sizes of that job.

Prints a table per job, writes ``bench/out/scale.json`` and a chart per job into
``bench/results/``. Inputs are kept under ``bench/out/`` (a marker per size) for the next run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
RESULTS = REPO / "bench" / "results"
MIB = 1024 * 1024
ENGINES = {
    "convert": ("tablekeeper-spark",),
    "expire": ("tablekeeper-spark", "iceberg"),
    "orphans": ("tablekeeper-spark", "iceberg"),
}
CHARTS = {"convert": "convert_delta", "expire": "expire_snapshots", "orphans": "remove_orphans"}
TITLES = {
    "convert": "convert-delta --engine spark: synthetic Delta log (checkpoint + 10 commits)",
    "expire": "expire-snapshots: S snapshots of 1,000 files each, all but 10 expired",
    "orphans": "remove-orphans: N listed files, 10% orphans",
}
UNITS = {"convert": "live files in the Delta log", "expire": "snapshots", "orphans": "listed files"}
SIZES = {"convert": "1000000,3000000,10000000", "expire": "100,300,1000", "orphans": "200000,600000,2000000"}
QUICK = {"convert": "20000,60000", "expire": "20,40", "orphans": "20000,60000"}
COMMITS, SWAP = 10, 1000  # bench.convert_delta's log case: its inputs are shared
GOAL_MIB = {"convert": 2048.0}
DRIVER_MEMORY = "2g"


@dataclass(frozen=True)
class Input:
    size: int
    shape: str
    source: Path  # the Delta table, or the saved table state
    work: Path  # where a run happens (the saved state's own paths)
    seconds: float | None  # to make it (by this run or an earlier one); None when not known
    disk_bytes: int
    reused: bool  # made by an earlier run


def _disk(path: Path) -> int:
    total, stack = 0, [str(path)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
    return total


def _made(source: Path, reused: bool, started: float) -> tuple[float | None, int, bool]:
    """How long the input took and its disk, noted beside it so a reuse can still say."""
    note = source / ".scale-input.json"
    if reused and note.exists():
        info = json.loads(note.read_text())
        return info["seconds"], int(info["disk_bytes"]), True
    seconds = None if reused else round(time.perf_counter() - started, 1)
    disk = _disk(source)
    note.write_text(json.dumps({"seconds": seconds, "disk_bytes": disk}))
    return seconds, disk, reused


def _aside(*args: str) -> str:
    """``python -m bench.scale <args>`` and its output. Inputs are made, restored and removed in
    processes of their own because this one must stay small: a child's ``ru_maxrss`` starts at its
    parent's resident size when it was forked (Linux keeps it across exec), and listing millions
    of files here would leave this process large."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.scale", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    return proc.stdout


def prepare(job: str, size: int, per_snapshot: int) -> Input:
    made = json.loads(_aside("--prepare", job, str(size), str(per_snapshot)).strip().splitlines()[-1])
    return Input(
        made["size"],
        made["shape"],
        Path(made["source"]),
        Path(made["work"]),
        made["seconds"],
        made["disk"],
        made["reused"],
    )


def _prepare(job: str, size: int, per_snapshot: int) -> Input:
    from bench.maintenance import saved_state

    started = time.perf_counter()
    if job == "convert":
        from bench.delta_log_gen import generate

        root = OUT / f"delta_{size}"
        reused = (root / f".complete-{size}-{COMMITS}-{SWAP}").exists()
        generate(root, size, COMMITS, SWAP)
        shape = f"{size:,} files"
        return Input(size, shape, root, OUT / "scale_convert_work", *_made(root, reused, started))
    if job == "expire":
        name = f"scale_expire_{size}x{per_snapshot}"
        saved, work = OUT / f"{name}_saved", OUT / f"{name}_work"
        reused = saved_state(saved, work, size, size * per_snapshot, 0)
        shape = f"{size:,} snapshots x {per_snapshot:,} files"
        return Input(size, shape, saved, work, *_made(saved, reused, started))
    orphans = size // 10
    saved, work = OUT / f"scale_orphans_{size}_saved", OUT / f"scale_orphans_{size}_work"
    reused = saved_state(saved, work, 1, size - orphans, orphans)
    shape = f"{size - orphans:,} referenced + {orphans:,} orphans"
    return Input(size, shape, saved, work, *_made(saved, reused, started))


def _one(job: str, engine: str, inp: Input, args: argparse.Namespace, rep: int) -> dict[str, object]:
    from bench.scale_child import run_measured

    restore_seconds = None
    if job != "convert":
        t = time.perf_counter()
        _aside("--tidy", str(inp.work), str(inp.source))
        restore_seconds = round(time.perf_counter() - t, 1)
    name = f"{job}-{inp.size}-{engine}-{rep + 1}"
    child = [job, engine, "--source", str(inp.source), "--work", str(inp.work)]
    child += ["--driver-memory", args.driver_memory]
    for setting in args.conf:
        child += ["--conf", setting]
    if args.log_level:
        child += ["--log-level", args.log_level]
    if args.profile:
        child += ["--profile-to", str(OUT / "scale" / "profiles" / f"{name}.pstats")]
    try:
        run = run_measured(child, args.timeout, OUT / "scale" / "logs" / f"{name}.log")
    finally:
        _aside("--tidy", str(inp.work))
    return {**run, "engine": engine, "run": rep + 1, "restore_seconds": restore_seconds}


def _summary(runs: list[dict[str, object]]) -> dict[str, object]:
    """Median seconds and the highest memory over an engine's runs; its first failure if any."""
    failed = next((r for r in runs if r["status"] != "ok"), None)
    if failed is not None:
        return failed
    out = dict(runs[-1])
    out["seconds"] = statistics.median(float(r["seconds"]) for r in runs)  # type: ignore[arg-type]
    out["setup_seconds"] = statistics.median(float(r["setup_seconds"]) for r in runs)  # type: ignore[arg-type]
    for field in ("python_peak_mib", "jvm_peak_mib", "driver_peak_mib"):
        out[field] = max(float(r[field]) for r in runs)  # type: ignore[arg-type]
    out["runs"] = len(runs)
    return out


def _mib(value: object, sampled: bool) -> str:
    if value is None:
        return "-"
    return f"{'~' if sampled else ''}{float(value):,.0f}"  # type: ignore[arg-type]


def print_table(job: str, entries: list[dict[str, object]], driver_memory: str, master: str) -> None:
    print(f"\n({job}) {TITLES[job]}; spark.driver.memory {driver_memory}, {master}\n")
    head = ("size", "engine", "seconds", "setup s", "python MiB", "JVM MiB", "total MiB", "result")
    print("{:<39} {:<18} {:>8} {:>8} {:>11} {:>9} {:>10}  {}".format(*head))
    for entry in entries:
        for engine, r in entry["results"].items():  # type: ignore[attr-defined]
            sampled = bool(r.get("memory_sampled"))
            mem = [_mib(r.get(f), sampled) for f in ("python_peak_mib", "jvm_peak_mib", "driver_peak_mib")]
            if r["status"] == "ok":
                secs, setup = f"{float(r['seconds']):.2f}", f"{float(r['setup_seconds']):.1f}"
                what = "files" if job == "convert" else "deleted"
                result = f"{int(r[what]):,} {what}"
            else:
                secs, setup, result = "-", "-", f"{r['status']}: {r.get('message', '')}"
            print(
                f"{entry['shape']!s:<39} {engine:<18} {secs:>8} {setup:>8} "
                f"{mem[0]:>11} {mem[1]:>9} {mem[2]:>10}  {result}"
            )
        made = entry.get("input_seconds")
        if entry.get("input_reused"):
            extra = f"; input reused (made in {made} s by an earlier run)" if made else "; input reused"
        else:
            extra = f", of which {made} s making the input"
        print(
            f"{'':<39} (size took {entry['size_seconds']} s{extra}; input on disk {entry['input_gib']} GiB)"
        )


def _sizes(text: str | None, quick: bool, job: str) -> list[int]:
    return [int(s) for s in (text or (QUICK if quick else SIZES)[job]).split(",") if s.strip()]


def _load(path: Path, fresh: bool) -> dict[str, list[dict[str, object]]]:
    """Earlier results, so sizes run one at a time (or at other driver memories) add up."""
    if fresh or not path.exists():
        return {}
    jobs: dict[str, list[dict[str, object]]] = json.loads(path.read_text()).get("jobs", {})
    return jobs


def _stopped_by(results: dict[str, dict[str, object]], size: int, stopped: dict[str, str]) -> None:
    for engine, r in results.items():
        if r["status"] in ("oom", "timeout") and engine not in stopped:
            why = "out of driver memory" if r["status"] == "oom" else "timed out"
            stopped[engine] = f"{why} at {size:,}"


def run_job(
    job: str, args: argparse.Namespace, known: list[dict[str, object]], save
) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    engines = [e for e in ENGINES[job] if not args.engines or e in args.engines.split(",")]
    sizes = _sizes(getattr(args, f"{job}_sizes"), args.quick, job)
    entries = {int(e["size"]): e for e in known}  # type: ignore[call-overload]
    stopped: dict[str, str] = {}
    for size in sorted(sizes):
        started = time.perf_counter()
        inp = prepare(job, size, args.expire_files_per_snapshot)
        made = f"made in {inp.seconds:.0f} s" if not inp.reused else "reused"
        print(f"{job} {inp.shape}: input {made}, {inp.disk_bytes / MIB:,.0f} MiB", file=sys.stderr)
        runs: list[dict[str, object]] = []
        for rep in range(args.repeat):
            for engine in engines:
                if engine in stopped:
                    continue
                r = _one(job, engine, inp, args, rep)
                print(f"  {engine} run {rep + 1}: {r}", file=sys.stderr)
                runs.append(r)
        results = {e: _summary([r for r in runs if r["engine"] == e]) for e in engines if e not in stopped}
        results |= {e: {"status": "skipped", "message": why} for e, why in stopped.items()}
        _stopped_by(results, size, stopped)
        done = [r for r in results.values() if r["status"] == "ok" and "deleted" in r]
        if len({int(r["deleted"]) for r in done}) > 1:  # type: ignore[call-overload]
            print(f"  WARNING: engines deleted different counts at {inp.shape}", file=sys.stderr)
        entries[size] = {
            "size": size,
            "shape": inp.shape,
            "driver_memory": args.driver_memory,
            "conf": args.conf,
            "input_seconds": inp.seconds,
            "input_reused": inp.reused,
            "input_gib": round(inp.disk_bytes / 1024**3, 2),
            "size_seconds": round(time.perf_counter() - started, 1),
            "results": results,
            "runs": runs,
        }
        if args.drop_inputs:
            _aside("--tidy", str(inp.source))
        save(job, [entries[s] for s in sorted(entries)])
    return [entries[s] for s in sorted(entries)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", default="convert,expire,orphans", help="convert, expire, orphans")
    parser.add_argument(
        "--convert-files", dest="convert_sizes", metavar="N,N,...", help=f"default {SIZES['convert']}"
    )
    parser.add_argument(
        "--expire-snapshots", dest="expire_sizes", metavar="N,N,...", help=f"default {SIZES['expire']}"
    )
    parser.add_argument("--expire-files-per-snapshot", type=int, default=1000)
    parser.add_argument(
        "--orphan-files", dest="orphans_sizes", help=f"listed files, default {SIZES['orphans']}"
    )
    parser.add_argument("--engines", help="only these (tablekeeper-spark, iceberg)")
    parser.add_argument("--driver-memory", default=DRIVER_MEMORY, help="spark.driver.memory of every run")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting for every run"
    )
    parser.add_argument(
        "--master",
        choices=["standalone", "local"],
        default="standalone",
        help="standalone: a cluster of two one-core workers started here (the driver JVM is the "
        "driver's alone); local: local[2] (default standalone)",
    )
    parser.add_argument("--worker-memory", default="4g", help="each standalone worker's executor memory")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds a run may take")
    parser.add_argument("--repeat", type=int, default=1, help="runs per engine and size (median)")
    parser.add_argument("--quick", action="store_true", help="small sizes, results under bench/out/scale/")
    parser.add_argument("--fresh", action="store_true", help="forget earlier results instead of merging")
    parser.add_argument("--charts-only", action="store_true", help="tables and charts of the saved results")
    parser.add_argument("--drop-inputs", action="store_true", help="delete each size's input after its runs")
    parser.add_argument("--log-level", help="the runs' tablekeeper log level (DEBUG: timestamped steps)")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile each run (bench/out/scale/profiles/)"
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--source", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--profile-to", help=argparse.SUPPRESS)
    parser.add_argument("--prepare", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--tidy", nargs="+", help=argparse.SUPPRESS)  # remove a work copy [restore it]
    args = parser.parse_args()
    if args.tidy:
        from bench.maintenance import restore

        shutil.rmtree(args.tidy[0], ignore_errors=True)
        if len(args.tidy) > 1:
            restore(Path(args.tidy[1]), Path(args.tidy[0]))
        return
    if args.prepare:
        inp = _prepare(args.prepare[0], int(args.prepare[1]), int(args.prepare[2]))
        made = {"size": inp.size, "shape": inp.shape, "source": str(inp.source), "work": str(inp.work)}
        print(json.dumps(made | {"seconds": inp.seconds, "disk": inp.disk_bytes, "reused": inp.reused}))
        return
    if args.child:
        from bench.scale_child import run_engine

        profile = Path(args.profile_to) if args.profile_to else None
        conf = dict(setting.split("=", 1) for setting in args.conf)
        result = run_engine(
            *args.child, Path(args.source), Path(args.work), args.driver_memory, conf, args.log_level, profile
        )
        print(json.dumps(result))
        return
    from bench import scale_chart

    OUT.mkdir(parents=True, exist_ok=True)
    tag = "" if args.master == "standalone" else "_local"
    report_path = OUT / (f"scale{tag}_quick.json" if args.quick else f"scale{tag}.json")
    charts = OUT / "scale" if args.quick else RESULTS
    report = _load(report_path, args.fresh)
    memory = args.driver_memory

    def save(job: str, entries: list[dict[str, object]]) -> None:
        others = [e for e in report.get(job, []) if e.get("driver_memory") != memory]
        report[job] = others + entries
        settings = {"master": master, "cores": os.cpu_count()}
        report_path.write_text(json.dumps({"settings": settings, "jobs": report}, indent=2))
        draw(job, entries)

    def draw(job: str, entries: list[dict[str, object]]) -> None:
        # A chart is of one driver memory; the default's has the plain name the README shows.
        suffix = "" if memory == DRIVER_MEMORY else f"_{memory}"
        path = charts / f"{'quick' if args.quick else 'scale'}{tag}_{CHARTS[job]}{suffix}.png"
        title = f"{TITLES[job]}; spark.driver.memory {memory}, {master}"
        scale_chart.draw(title, UNITS[job], entries, ENGINES[job], path, GOAL_MIB.get(job))

    master = "local[2]" if args.master == "local" else f"standalone, 2 workers x 1 core, {args.worker_memory}"
    cluster = None
    if args.master == "standalone" and not args.charts_only:
        cluster = _start_cluster(args)
    try:
        for job in args.jobs.split(","):
            known = [e for e in report.get(job, []) if e.get("driver_memory") == memory]
            if args.charts_only:
                draw(job, known)
                print_table(job, known, memory, master)
                continue
            entries = run_job(job, args, known, save)
            print_table(job, entries, memory, master)
    finally:
        if cluster is not None:
            cluster.stop()
    print(f"\nwrote {report_path} and the charts in {charts}")


def _start_cluster(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The tests' standalone cluster (two one-core workers on loopback), and the settings that
    send every run's executors to it: the driver JVM then holds only the driver."""
    from tests.support.spark_cluster import HOST, StandaloneCluster

    root = OUT / "scale" / "cluster"
    shutil.rmtree(root, ignore_errors=True)
    cluster = StandaloneCluster(root, worker_memory=args.worker_memory).start()
    args.conf += [
        f"spark.master={cluster.url}",
        f"spark.executor.memory={args.worker_memory}",
        "spark.executor.cores=1",
        f"spark.driver.host={HOST}",
        f"spark.driver.bindAddress={HOST}",
        # Both executors registered before the first task, as on a cluster already up.
        "spark.scheduler.minRegisteredResourcesRatio=1.0",
    ]
    print(f"standalone cluster at {cluster.url} ({root})", file=sys.stderr)
    return cluster


if __name__ == "__main__":
    main()
