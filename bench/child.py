"""Each engine of a benchmark runs in its own process, so each peak memory is its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
        env={**os.environ, "PYTHONPATH": str(REPO)},
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
