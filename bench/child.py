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
