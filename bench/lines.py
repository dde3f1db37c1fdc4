"""The headline benchmarks on two Spark lines side by side: same machine, same hour.

Each benchmark (expire-snapshots and remove-orphans from ``bench.maintenance``, compact from
``bench.compact``, conversion from ``bench.convert_delta``) runs under each line's own Python
(``.venv`` for the default line, ``.lines/<line>/venv`` for another: ``make setup SPARK=<line>``),
so tablekeeper and the reference engine it is measured against (Iceberg's Spark procedures of that
line) both run on that line. The lines alternate benchmark by benchmark, so a drift of the
machine's speed falls on both. Prints one table and writes ``bench/out/lines.json``.

    python -m bench.lines                       # 3.5 against 4.1, small sizes
    python -m bench.lines --lines 4.0,4.1 --scale 4
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
DEFAULT_LINE = "4.1"


def _python(line: str) -> Path:
    python = REPO / (".venv" if line == DEFAULT_LINE else f".lines/{line}/venv") / "bin" / "python"
    if not python.exists():
        sys.exit(f"no environment for Spark {line}: run make setup SPARK={line}")
    return python


def _benchmarks(scale: int) -> list[tuple[str, list[str], str]]:
    """(module, arguments, the JSON file it writes under bench/out)."""
    return [
        (
            "bench.maintenance",
            [
                "--cases",
                "expire,orphans",
                "--snapshots",
                str(50 * scale),
                "--files",
                str(10_000 * scale),
                "--orphan-files",
                str(18_000 * scale),
                "--repeat",
                "1",
            ],
            "maintenance.json",
        ),
        (
            "bench.compact",
            ["--files", str(200 * scale), "--rows", str(1_000_000 * scale), "--repeat", "1"],
            "compact.json",
        ),
        (
            "bench.convert_delta",
            [
                "--cases",
                "real",
                "--real-files",
                str(10_000 * scale),
                "--engines",
                "tablekeeper-driver,tablekeeper-spark",
            ],
            "convert_delta_real.json",
        ),
    ]


def _rows(module: str, report: dict[str, Any]) -> list[tuple[str, str, float | None]]:
    """(case, engine, seconds) from one benchmark's JSON."""
    if module == "bench.maintenance":
        cases = {case: body["results"] for case, body in report.items()}
    elif module == "bench.compact":
        cases = {"compact": report["results"]}
    else:
        cases = {"convert-delta": report["real"]["results"]}
    return [
        (case, str(r.get("engine")), float(r["seconds"]) if "seconds" in r else None)
        for case, results in cases.items()
        for r in results
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", default=f"3.5,{DEFAULT_LINE}", help="two or more Spark lines")
    parser.add_argument("--scale", type=int, default=1, help="multiplies every benchmark's size")
    args = parser.parse_args()
    lines = args.lines.split(",")
    pythons = {line: _python(line) for line in lines}
    OUT.mkdir(parents=True, exist_ok=True)
    seconds: dict[tuple[str, str], dict[str, float | None]] = {}
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    for module, extra, written in _benchmarks(args.scale):
        for line in lines:
            print(f"== {module} on Spark {line}", file=sys.stderr, flush=True)
            proc = subprocess.run([str(pythons[line]), "-m", module, *extra], cwd=REPO, check=False)
            if proc.returncode != 0:
                sys.exit(f"{module} failed on Spark {line} (exit {proc.returncode})")
            report = json.loads((OUT / written).read_text())
            shutil.copy(OUT / written, OUT / f"lines-{line}-{written}")
            for case, engine, secs in _rows(module, report):
                seconds.setdefault((case, engine), {})[line] = secs
    first, last = lines[0], lines[-1]
    print(f"\nheadline benchmarks, Spark {' vs '.join(lines)}, started {started}, scale {args.scale}\n")
    head = ["case", "engine", *(f"{line} s" for line in lines), f"{first} / {last}"]
    print("{:<14} {:<20} ".format(*head[:2]) + " ".join(f"{h:>10}" for h in head[2:]))
    table = []
    for (case, engine), by_line in seconds.items():
        values = [by_line.get(line) for line in lines]
        a, b = by_line.get(first), by_line.get(last)
        ratio = f"{a / b:.2f}x" if a and b else "-"
        cells = [f"{v:.2f}" if v is not None else "failed" for v in values]
        print(f"{case:<14} {engine:<20} " + " ".join(f"{c:>10}" for c in [*cells, ratio]))
        table.append({"case": case, "engine": engine, "seconds": by_line})
    out = OUT / "lines.json"
    out.write_text(
        json.dumps({"lines": lines, "started": started, "scale": args.scale, "rows": table}, indent=2)
    )
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
