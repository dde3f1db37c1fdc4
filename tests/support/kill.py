"""Test support: run a job killed at a phase, and check what a kill must never leave behind.

A job runs as ``python -m tablekeeper`` in its own session (process group), with the kill point
armed; it dies by SIGKILL with everything it started (its Spark JVM and Python workers). The
checks read the table through Iceberg Spark, the reference engine: every file its metadata
references must exist, and after the jobs ran once more no file may be left that nothing
references.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tablekeeper.faults import KILL_ENV

MARKER_ENV = "TABLEKEEPER_TEST_RUN"
JOURNALS = "_tablekeeper"


def run_job(
    args: list[str], phase: str | None = None, env: Mapping[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``tablekeeper <args>``, killed at ``phase`` (None: not armed). Returns once every process
    the run started is gone, so nothing it started still touches the table, and its Spark scratch
    (a killed JVM leaves its copies of the session's jars behind) is removed."""
    marker = uuid.uuid4().hex
    scratch = Path(os.environ.get("SPARK_LOCAL_DIRS") or tempfile.gettempdir()) / f"run-{marker}"
    scratch.mkdir(parents=True)
    full = {**os.environ, **(env or {}), MARKER_ENV: marker, "SPARK_LOCAL_DIRS": str(scratch)}
    full.pop(KILL_ENV, None)
    if phase is not None:
        full[KILL_ENV] = phase
    proc = subprocess.run(
        [sys.executable, "-m", "tablekeeper", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
        check=False,
    )
    wait_gone(marker)
    shutil.rmtree(scratch, ignore_errors=True)
    return proc


def _marked(marker: str) -> list[int]:
    found = []
    needle = f"{MARKER_ENV}={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state not in ("Z", "X"):
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def wait_gone(marker: str, timeout: float = 30) -> None:
    """Wait for every process carrying ``marker`` (a killed job's Python workers linger a moment
    after their JVM dies); kill any that outstay ``timeout``."""
    deadline = time.monotonic() + timeout
    while pids := _marked(marker):
        if time.monotonic() > deadline:
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
            return
        time.sleep(0.1)


def killed(proc: subprocess.CompletedProcess[str]) -> bool:
    return proc.returncode == -signal.SIGKILL


def result_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no JSON result: {proc.stdout!r} {proc.stderr[-2000:]!r}"
    return dict(json.loads(lines[-1]))


def files_under(root: Path) -> set[str]:
    """Every file under a table's location, journals included; Hadoop's checksum files and
    writers' hidden temporaries are not the table's."""
    return {
        str(p)
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".") and "/_temporary/" not in str(p)
    }


def journal_files(root: Path) -> set[str]:
    return {f for f in files_under(root) if f"/{JOURNALS}/" in f}


def _local(location: str) -> str:
    return location.removeprefix("file:")


def referenced_files(spark: Any, table: str) -> set[str]:
    """Every file ``table``'s metadata references, as Iceberg Spark reads it: metadata files of
    the log, manifest lists, manifests and every data and delete file of every snapshot."""
    out: set[str] = set()
    out |= {_local(r[0]) for r in spark.sql(f"SELECT file FROM {table}.metadata_log_entries").collect()}
    out |= {_local(r[0]) for r in spark.sql(f"SELECT manifest_list FROM {table}.snapshots").collect() if r[0]}
    out |= {_local(r[0]) for r in spark.sql(f"SELECT path FROM {table}.all_manifests").collect()}
    out |= {_local(r[0]) for r in spark.sql(f"SELECT file_path FROM {table}.all_files").collect()}
    return out


def missing(files: Iterable[str]) -> list[str]:
    return sorted(f for f in files if not Path(f).exists())


def age(root: Path, days: float) -> None:
    stamp = time.time() - days * 86_400
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (stamp, stamp))
