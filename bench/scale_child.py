"""The scale benchmark's runs: one engine in its own process, timed out if it must be, with the
whole driver's peak memory (the Python process and the JVM it started) measured.

In the child the memory is read when the job is done: the Python process's maximum RSS
(``ru_maxrss``) and the JVM's ``VmHWM``. The parent also samples both every second, so a run that
runs out of memory, fails or is stopped still reports the peak it had reached.
"""

from __future__ import annotations

import cProfile
import io
import json
import logging
import os
import pstats
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Any of these in a failed run's output: the JVM or Python ran out of memory.
MEMORY_ERRORS = ("OutOfMemoryError", "GC overhead limit exceeded", "Java heap space", "MemoryError")
# bench.maintenance's case names for the scale jobs.
CASES = {"expire": "expire", "orphans": "orphans"}
MIB = 1024 * 1024
OOM_GRACE = 60


def _status_mib(pid: int, field: str) -> float | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def vm_hwm_mib(pid: int) -> float | None:
    """A process's peak resident set (``VmHWM``), or None once it is gone."""
    return _status_mib(pid, "VmHWM:")


def run_engine(
    job: str,
    engine: str,
    source: Path,
    work: Path,
    driver_memory: str,
    extra: dict[str, str],
    log_level: str | None,
    profile: Path | None,
) -> dict[str, object]:
    """Inside the child: the run as bench.convert_delta and bench.maintenance make it, on a session
    of two local cores and the given driver memory, then the driver's peak memory."""
    from bench import convert_delta, maintenance

    if log_level:
        # Timestamps show where the time goes; py4j's own DEBUG lines would drown them.
        logging.basicConfig(level=logging.WARNING, format="%(relativeCreated)9.0f ms %(name)s: %(message)s")
        logging.getLogger("tablekeeper").setLevel(log_level.upper())
    conf = {"spark.master": "local[2]", "spark.driver.memory": driver_memory, **extra}

    def go() -> dict[str, object]:
        if job == "convert":
            return convert_delta.run_engine(engine, str(source), work, conf)
        return maintenance.run_engine(CASES[job], engine, work, conf)

    if profile is None:
        result = go()
    else:
        profiler = cProfile.Profile()
        result = profiler.runcall(go)
        profile.parent.mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(profile)
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(40)
        print(text.getvalue(), file=sys.stderr)
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    jvm = spark.sparkContext._jvm
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    heap = int(jvm.java.lang.Runtime.getRuntime().maxMemory())
    python_peak = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    jvm_peak = vm_hwm_mib(pid) or 0.0
    result.pop("peak_rss_mib", None)  # bench.convert_delta's: the Python process's alone
    return {
        **result,
        "python_peak_mib": python_peak,
        "jvm_peak_mib": jvm_peak,
        "driver_peak_mib": round(python_peak + jvm_peak, 1),
        "heap_max_mib": round(heap / MIB),
        "jvm_pid": pid,
        # The same peak as the kernel keeps it for this process image alone: ru_maxrss would
        # also count a parent larger than this process when it was forked.
        "python_hwm_mib": vm_hwm_mib(os.getpid()),
    }


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields after it are plain.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


class Watch:
    """Peak memory of a child and of the JVM it starts, sampled from outside."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.jvm: int | None = None
        self.python_peak = 0.0
        self.jvm_peak = 0.0

    def sample(self) -> None:
        if self.jvm is None:
            self.jvm = next((c for c in _children(self.pid) if _comm(c) == "java"), None)
        self.python_peak = max(self.python_peak, vm_hwm_mib(self.pid) or 0.0)
        if self.jvm is not None:
            self.jvm_peak = max(self.jvm_peak, vm_hwm_mib(self.jvm) or 0.0)

    def figures(self) -> dict[str, object]:
        return {
            "python_peak_mib": self.python_peak,
            "jvm_peak_mib": self.jvm_peak,
            "driver_peak_mib": round(self.python_peak + self.jvm_peak, 1),
            "memory_sampled": True,
        }


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _stop(proc: subprocess.Popen[str]) -> None:
    """The child's whole process group (it, its JVM and the JVM's Python workers)."""
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _failure(log_text: str) -> tuple[str, str]:
    # Stack frames say where, not what: the last line naming an error or exception says what.
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("at ", "...", "File ", "^"))]
    memory = next((line for line in lines if any(m in line for m in MEMORY_ERRORS)), None)
    if memory is not None:
        return "oom", memory[:300]
    named = [line for line in lines if "Error" in line or "Exception" in line]
    return "error", ((named or lines or ["no output"])[-1])[:300]


def _memory_error_since(log: Path, offset: int) -> tuple[bool, int]:
    """Whether the log holds an out-of-memory error after ``offset``; the offset to read from next."""
    start = max(0, offset - 64)  # an error split across two reads is still found
    with log.open("rb") as f:
        f.seek(start)
        data = f.read()
    return any(m.encode() in data for m in MEMORY_ERRORS), start + len(data)


def run_measured(
    args: list[str], timeout: float, log: Path, module: str = "bench.scale"
) -> dict[str, object]:
    """``python -m <module> --child <args>`` in a session of its own, its stderr into ``log``:
    its JSON result with ``status`` ok, or status oom, error or timeout with what was measured.

    A driver JVM that ran out of heap often stays up, its job never ending (a task result thread
    died): once the log shows the error, the run has ``OOM_GRACE`` seconds to end by itself."""
    log.parent.mkdir(parents=True, exist_ok=True)
    out_path = log.with_suffix(".out")
    # Shown so a reader can check it stayed below the child's own peak (see ``python_hwm_mib``).
    parent_rss = _status_mib(os.getpid(), "VmRSS:")
    started = time.perf_counter()
    stopped: str | None = None
    with log.open("w") as err, out_path.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, "--child", *args],
            cwd=REPO,
            stdout=out,
            stderr=err,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            start_new_session=True,  # so a timeout stops the JVM and its workers too
        )
        watch = Watch(proc.pid)
        offset, oom_at = 0, None
        try:
            while proc.poll() is None:
                try:
                    proc.wait(timeout=1.0)
                    break
                except subprocess.TimeoutExpired:
                    pass
                watch.sample()
                now = time.perf_counter()
                if oom_at is None:
                    seen, offset = _memory_error_since(log, offset)
                    oom_at = now if seen else None
                if oom_at is not None and now - oom_at > OOM_GRACE:
                    stopped = "oom"
                elif now - started > timeout:
                    stopped = "timeout"
                if stopped:
                    _stop(proc)
                    break
        finally:
            if proc.poll() is None:  # interrupted: nothing of the run may outlive the bench
                _stop(proc)
    wall = round(time.perf_counter() - started, 1)
    stdout = out_path.read_text().strip()
    out_path.unlink(missing_ok=True)
    if stopped == "timeout":
        message = f"not done after {timeout:.0f} s"
        return {"status": "timeout", "message": message, "wall_seconds": wall, **watch.figures()}
    if proc.returncode == 0 and stdout and stopped is None:
        result: dict[str, object] = json.loads(stdout.splitlines()[-1])
        return {"status": "ok", **result, "wall_seconds": wall, "parent_rss_mib": parent_rss}
    status, message = _failure(log.read_text(errors="replace"))
    if stopped == "oom":
        message = f"{message} (stopped: still running {OOM_GRACE} s after the error)"
    return {"status": status, "message": message, "wall_seconds": wall, **watch.figures()}
