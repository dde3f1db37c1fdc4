"""Kill points: the process dies at a named phase boundary, as under an operator's SIGKILL.

Off unless ``TABLEKEEPER_KILL_AT`` is set, which only the crash tests do. Its value names a
phase, optionally with the occurrence to die at (``commit.swapped@3``: the third commit's swap).
The jobs pass these boundaries, in order:

``plan.done``                 everything the decision needs was read; nothing written yet
``stage.written``             a job's new files (compact's data, a conversion's manifests) exist
``journal.written``           the delete plan is durable; the table is unchanged
``commit.manifests-written``  a commit's manifests and manifest list exist, no metadata file yet
``commit.metadata-written``   the new metadata file exists; the pointer still names the old one
``commit.swapped``            the pointer names the new metadata; the version hint is not updated
``delete.mid``                some of the files to delete are gone, others not

The process (and its process group when it leads one, as a job started for a test does: the
Spark JVM and its Python workers go with it) receives SIGKILL, so no ``finally`` or cleanup runs.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass

KILL_ENV = "TABLEKEEPER_KILL_AT"

PHASES = (
    "plan.done",
    "stage.written",
    "journal.written",
    "commit.manifests-written",
    "commit.metadata-written",
    "commit.swapped",
    "delete.mid",
)

_hits: dict[str, int] = {}
_lock = threading.Lock()


def _target() -> tuple[str, int] | None:
    spec = os.environ.get(KILL_ENV, "").strip()
    if not spec:
        return None
    phase, _, nth = spec.partition("@")
    if phase not in PHASES:
        raise ValueError(f"{KILL_ENV}={spec!r} names no phase: use one of {', '.join(PHASES)}")
    return phase, int(nth) if nth else 1


def armed(phase: str) -> bool:
    target = _target()
    return target is not None and target[0] == phase


def kill_point(phase: str) -> None:
    """Die here when the environment asks for this phase (and this occurrence of it)."""
    target = _target()
    if target is None or target[0] != phase:
        return
    with _lock:
        _hits[phase] = _hits.get(phase, 0) + 1
        if _hits[phase] < target[1]:
            return
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
    then itself. Made on the driver, where the group is known, and shipped with the task."""

    pid: int
    group: int | None

    def fire(self) -> None:
        if self.group is not None:
            os.killpg(self.group, signal.SIGKILL)
        else:
            os.kill(self.pid, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def remote_kill(phase: str) -> RemoteKill | None:
    """For tasks: the kill to fire at ``phase``, when the environment asks for it."""
    if not armed(phase):
        return None
    pid = os.getpid()
    return RemoteKill(pid, os.getpgrp() if os.getpgrp() == pid else None)
