"""Each engine of a benchmark runs in its own process, so each peak memory is its own."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_child(module: str, engine: str, *args: str) -> dict[str, object]:
    """``python -m <module> --child <engine> <args>``: its last stdout line as JSON, or the
    engine with the last line of its error output."""
    proc = subprocess.run(
        [sys.executable, "-m", module, "--child", engine, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        # This checkout's own lib first: the engines measured are the code beside the bench.
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "lib"), str(REPO)])},
        check=False,
    )
    if proc.returncode != 0:
        lines = (proc.stderr.strip() or "no output").splitlines()
        return {"engine": engine, "error": lines[-1][:300]}
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def bench_catalogs(work: Path):  # type: ignore[no-untyped-def]
    """One JDBC/sqlite catalog ``b`` with its warehouse under ``work``, as every benchmark uses."""
    from tablekeeper.catalog.config import parse_catalogs

    text = (
        "default: b\ncatalogs:\n"
        "  b: {type: sql, uri: 'sqlite:///${warehouse}/catalog.db', warehouse: '${warehouse}/wh'}\n"
    )
    return parse_catalogs(text, work)


Run = dict[str, object]


def alternate(
    module: str,
    engines: Sequence[str],
    repeat: int,
    saved: Path,
    work: Path,
    check: Callable[[Run], Run] | None = None,
    extra: Sequence[str] = (),
) -> list[Run]:
    """Each engine ``repeat`` times, alternating, each run in its own process on a fresh copy of
    the ``saved`` table state (``extra``: more arguments for the child); ``check`` may turn a
    run's result into an error."""
    runs: list[Run] = []
    for rep in range(repeat):
        for engine in engines:
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(saved, work)
            r = run_child(module, engine, "--work", str(work), *extra)
            if check is not None and "error" not in r:
                r = check(r)
            runs.append({**r, "engine": engine, "run": rep + 1})
            print(f"  run {rep + 1} {engine}: {r}", file=sys.stderr)
    return runs


def summarize(
    runs: Sequence[Run], engines: Sequence[str], keep: Sequence[str], medians: Sequence[str] = ()
) -> list[Run]:
    """Per engine: the median, least and greatest seconds (and median setup, when runs report
    it), ``keep`` from its last run and the median of ``medians`` over its runs (timings a single
    run measures noisily); or the first error one of its runs had."""
    results: list[Run] = []
    for engine in engines:
        mine = [r for r in runs if r["engine"] == engine]
        failed = next((r for r in mine if "error" in r), None)
        if failed is not None:
            results.append({"engine": engine, "error": failed["error"]})
            continue
        secs = sorted(float(r["seconds"]) for r in mine)  # type: ignore[arg-type]
        out: Run = {
            "engine": engine,
            "seconds": statistics.median(secs),
            "min_seconds": secs[0],
            "max_seconds": secs[-1],
        }
        if all("setup_seconds" in r for r in mine):
            out["setup_seconds"] = statistics.median(float(r["setup_seconds"]) for r in mine)  # type: ignore[arg-type]
        out |= {k: statistics.median(float(r[k]) for r in mine) for k in medians}  # type: ignore[arg-type]
        results.append(out | {k: mine[-1][k] for k in keep if k not in medians})
    return results


def metadata_file(location: str, index: int, partition: int):  # type: ignore[no-untyped-def]
    """A data file of a metadata-only bench table (no engine opens it): partition ``p`` and a
    long ``v`` up to ``index``, with counts and bounds as writers keep them."""
    from tablekeeper.iceberg.content import DATA, DataFile

    p = partition.to_bytes(8, "little")
    return DataFile(
        DATA,
        f"{location}/data/p={partition}/f-{index:08d}.parquet",
        "PARQUET",
        (partition,),
        100,
        4096,
        column_sizes={1: 40, 2: 800},
        value_counts={1: 100, 2: 100},
        null_value_counts={1: 0, 2: 0},
        lower_bounds={1: p, 2: (0).to_bytes(8, "little")},
        upper_bounds={1: p, 2: index.to_bytes(8, "little")},
    )
