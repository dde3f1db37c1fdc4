"""Test support: run a job killed at a phase, and check what a kill must never leave behind.

In-process (``crash``): the job's kill point raises ``SimulatedCrash``; the files and catalog
pointers are then put back as they were at the kill point, and the process forgets what it had
loaded, so what runs next sees what a new process would. As a process (``run_job``): a job
runs as ``python -m tablekeeper`` in its own session (process group), with the kill point
armed; it dies by SIGKILL with everything it started (its Spark JVM and Python workers). The
checks read the table through Iceberg Spark, the reference engine: every file its metadata
references must exist, and after the jobs ran once more no file may be left that nothing
references.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tablekeeper import faults
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


# -----------------------------------------------------------------------------------------------
# In-process crashes: the kill point raises SimulatedCrash; storage is put back as it was at that
# instant (unwinding ran clean-ups a SIGKILL would not), and the process forgets what it held.


class Storage:
    """What a kill leaves: the files under ``dirs`` and the sql catalog's pointers (``db``), as
    they are when ``capture`` runs (at the kill point, before any clean-up of the unwinding)."""

    def __init__(self, dirs: Iterable[Path], db: Path | None = None) -> None:
        self.dirs = tuple(dirs)
        self.db = db
        self._copy = Path(tempfile.mkdtemp(prefix="tk-crash-"))
        self._present: dict[Path, bool] = {}
        self._rows: list[tuple[Any, ...]] | None = None
        self.phase: str | None = None

    def capture(self, phase: str) -> None:
        self.phase = phase
        for i, d in enumerate(self.dirs):
            self._present[d] = d.exists()
            if d.exists():
                shutil.copytree(d, self._copy / str(i), copy_function=_copy_if_there)
        if self.db is not None:
            with sqlite3.connect(self.db, timeout=30) as conn:
                self._rows = conn.execute("SELECT * FROM iceberg_tables").fetchall()

    def restore(self) -> None:
        assert self.phase is not None, "the kill point was never reached"
        for i, d in enumerate(self.dirs):
            shutil.rmtree(d, ignore_errors=True)
            if self._present[d]:
                shutil.copytree(self._copy / str(i), d)
        if self.db is not None and self._rows is not None:
            with sqlite3.connect(self.db, timeout=30) as conn:
                conn.execute("DELETE FROM iceberg_tables")
                if self._rows:
                    marks = ", ".join("?" * len(self._rows[0]))
                    conn.executemany(f"INSERT INTO iceberg_tables VALUES ({marks})", self._rows)
        shutil.rmtree(self._copy, ignore_errors=True)
        for d in self.dirs:
            _orphan_journals(d)


def _orphan_journals(root: Path) -> None:
    """The crashed run's journals name this process as their owner, still alive; a killed run's
    name a dead one. Made to name an earlier process with this pid (another start time), which
    is how a journal's reader tells a dead owner from a new process that reuses its pid."""
    for header in root.rglob("journal.json"):
        if f"/{JOURNALS}/" not in str(header):
            continue
        obj = json.loads(header.read_bytes())
        if obj["owner"]["pid"] == os.getpid():
            obj["owner"]["started"] -= 1
            header.write_text(json.dumps(obj, indent=2))


def _copy_if_there(src: str, dst: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # deleted by another thread while copying
        shutil.copy2(src, dst)


def forget_process_state(spark: Any) -> None:
    """What a new process would not have: every memoized function of the library (loaded
    schemas, encoders, filesystems) and Spark's cached data. Catalogs and tables are loaded
    anew by the caller."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("tablekeeper") or module is None:
            continue
        for value in list(vars(module).values()):
            clear = getattr(value, "cache_clear", None)
            if callable(clear) and getattr(value, "__module__", None) == name:
                clear()
    spark.catalog.clearCache()


def crash(spark: Any, run: Callable[[], Any], phase: str, storage: Storage) -> None:
    """``run`` crashes in this process at ``phase``; afterwards storage is as the kill left it
    and the process holds nothing the crashed run loaded."""
    with faults.crash_at(phase, at_crash=storage.capture), pytest.raises(faults.SimulatedCrash):
        run()
    storage.restore()
    forget_process_state(spark)
