"""The kill-point hook: off unless asked, exact about the phase and its occurrence."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tablekeeper import faults

SCRIPT = """
import sys
from tablekeeper import faults
for i in range(3):
    print("before", i, flush=True)
    faults.kill_point("commit.swapped")
print("survived", flush=True)
"""


def _run(env_value: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != faults.KILL_ENV}
    if env_value is not None:
        env[faults.KILL_ENV] = env_value
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_off_unless_set() -> None:
    out = _run(None)
    assert out.returncode == 0 and "survived" in out.stdout


def test_other_phases_pass() -> None:
    assert _run("delete.mid").returncode == 0


@pytest.mark.parametrize(("spec", "printed"), [("commit.swapped", 1), ("commit.swapped@2", 2)])
def test_dies_at_the_named_occurrence(spec: str, printed: int) -> None:
    out = _run(spec)
    assert out.returncode == -signal.SIGKILL
    assert out.stdout.count("before") == printed and "survived" not in out.stdout


def test_an_unknown_phase_is_an_error() -> None:
    out = _run("commit.sawpped")
    assert out.returncode == 1 and "names no phase" in out.stderr


def test_a_group_leader_takes_its_group_along() -> None:
    """Started as a group leader (as the crash tests start jobs), the kill reaches its children
    too: a job's Spark JVM must not outlive it."""
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "from tablekeeper import faults\n"
        "faults.kill_point('plan.done')\n"
    )
    env = {**os.environ, faults.KILL_ENV: "plan.done"}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    assert proc.wait(timeout=60) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while not _gone(child):
        assert time.monotonic() < deadline, "the child outlived the killed job"
        time.sleep(0.05)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # a zombie is dead, waiting only for its new parent to reap it


# In-process crashes (faults.crash_at): what the kill tests use for most kill points.


def test_in_process_crash_is_no_exception_a_job_handles() -> None:
    seen: list[str] = []
    passes = 0
    with faults.crash_at("commit.swapped", nth=2, at_crash=seen.append), pytest.raises(faults.SimulatedCrash):
        try:
            for _ in range(3):
                faults.kill_point("delete.mid")  # another phase passes
                faults.kill_point("commit.swapped")
                passes += 1
        except Exception:  # a job's own error handling
            pytest.fail("SimulatedCrash was handled as an error")
    assert passes == 1 and seen == ["commit.swapped"]


def test_in_process_crash_fires_once_and_only_inside_the_block() -> None:
    with faults.crash_at("plan.done"):
        with pytest.raises(faults.SimulatedCrash):
            faults.kill_point("plan.done")
        faults.kill_point("plan.done")  # clean-ups that pass the point again while unwinding
        assert not faults.armed("plan.done")
    faults.kill_point("plan.done")
    assert faults.remote_kill("plan.done") is None


def test_in_process_remote_kill_crashes_the_driver_engine() -> None:
    with faults.crash_at("delete.mid"):
        kill = faults.remote_kill("delete.mid")
        assert kill is not None
        with pytest.raises(faults.SimulatedCrash):
            kill.fire()


def test_crash_at_refuses_an_unknown_phase() -> None:
    with pytest.raises(ValueError, match="names no phase"), faults.crash_at("commit.sawpped"):
        pass
