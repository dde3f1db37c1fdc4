"""Kill points: a job dies at a named phase boundary, as under an operator's SIGKILL. Test-only.

The jobs pass these boundaries, in order:

``plan.done``                 everything the decision needs was read; nothing written yet
``stage.written``             a job's new files (compact's data, a conversion's manifests) exist
``journal.written``           the delete plan is durable; the table is unchanged
``commit.manifests-written``  a commit's manifests and manifest list exist, no metadata file yet
``commit.metadata-written``   the new metadata file exists; the pointer still names the old one
``commit.swapped``            the pointer names the new metadata; the version hint is not updated
``delete.mid``                some of the files to delete are gone, others not

Two ways to arm one, both for tests only; unarmed, a kill point is one global read:

- In-process (``crash_at``, from test code only): the point calls the test's ``at_crash`` (which
  records what is on storage at that instant) and raises ``SimulatedCrash``, a BaseException that
  no ``except Exception`` of a job handles. Unwinding still runs ``finally`` and ``except
  BaseException`` clean-ups a SIGKILL would not run; ``at_crash``'s record is what the test
  restores before the "next process" looks at the table.
- A real SIGKILL (``TABLEKEEPER_KILL_AT``, read once when this module is imported; the crash tests
  set it only in the environment of a job subprocess they start). Its value names a phase,
  optionally with the occurrence to die at (``commit.swapped@3``: the third commit's swap). The
  process (and its process group when it leads one, as a job started for a test does: the Spark
  JVM and its Python workers go with it) receives SIGKILL, so no ``finally`` or cleanup runs.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

KILL_ENV = "TABLEKEEPER_KILL_AT"

PHASES = (
    "plan.done",
    "stage.written",
    "journal.written",
    "commit.manifests-written",
    "commit.metadata-written",
    "commit.swapped",
    "delete.mid",
    "restore.mid",
    "purge.mid",
)


class SimulatedCrash(BaseException):
    """An in-process kill point fired. A BaseException so that a job's own error handling (which
    catches Exception) never turns it into a failed run: the run just stops, as if killed."""

    def __init__(self, phase: str) -> None:
        super().__init__(phase)
        self.phase = phase


@dataclass
class _Target:
    phase: str
    nth: int
    in_process: bool
    at_crash: Callable[[str], None] | None = None
    hits: int = 0
    fired: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


def _check(phase: str, where: str) -> None:
    if phase not in PHASES:
        raise ValueError(f"{where} names no phase: use one of {', '.join(PHASES)}")


def _from_env() -> _Target | None:
    spec = os.environ.get(KILL_ENV, "").strip()
    if not spec:
        return None
    phase, _, nth = spec.partition("@")
    _check(phase, f"{KILL_ENV}={spec!r}")
    return _Target(phase, int(nth) if nth else 1, in_process=False)


class _Slot:
    """The armed kill point of this process, if any (a holder, so arming needs no ``global``)."""

    target: _Target | None = _from_env()


@contextmanager
def crash_at(phase: str, nth: int = 1, at_crash: Callable[[str], None] | None = None) -> Iterator[None]:
    """Within the block, the ``nth`` pass of ``phase`` in this process raises ``SimulatedCrash``
    (once), after ``at_crash(phase)``. Tests only."""
    _check(phase, f"crash_at({phase!r})")
    previous, _Slot.target = _Slot.target, _Target(phase, nth, in_process=True, at_crash=at_crash)
    try:
        yield
    finally:
        _Slot.target = previous


def armed(phase: str) -> bool:
    target = _Slot.target
    return target is not None and target.phase == phase and not target.fired


def kill_point(phase: str) -> None:
    """Die here when a test armed this phase (and this occurrence of it)."""
    target = _Slot.target
    if target is None or target.phase != phase:
        return
    with target.lock:
        if target.fired:
            return
        target.hits += 1
        if target.hits < target.nth:
            return
        target.fired = True
    if target.in_process:
        if target.at_crash is not None:
            target.at_crash(phase)
        raise SimulatedCrash(phase)
    _die(os.getpgrp() if os.getpgrp() == os.getpid() else None)


def _die(group: int | None) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if group is not None:
        os.killpg(group, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class RemoteKill:
    """A kill point inside a Spark task: the task kills the driver's process group (the job),
    then itself. Made on the driver, where the group is known, and shipped with the task. Armed
    in-process (``phase`` set), it is the driver's own kill point, for the driver engine's
    deletes, which run in the driver's process."""

    pid: int
    group: int | None
    phase: str | None = None

    def fire(self) -> None:
        if self.phase is not None:
            kill_point(self.phase)
            return
        if self.group is not None:
            os.killpg(self.group, signal.SIGKILL)
        else:
            os.kill(self.pid, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def remote_kill(phase: str) -> RemoteKill | None:
    """For tasks: the kill to fire at ``phase``, when a test armed it."""
    target = _Slot.target
    if target is None or target.phase != phase or target.fired:
        return None
    pid = os.getpid()
    if target.in_process:
        return RemoteKill(pid, None, phase)
    return RemoteKill(pid, os.getpgrp() if os.getpgrp() == pid else None)
