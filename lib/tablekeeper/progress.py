"""Progress of a long run: its phase, how much of it is done, and the time taken, on stderr.

On a terminal one line is redrawn in place (at most a few times a second); otherwise, as when a
scheduler captures stderr, a log line at INFO every ``LOG_EVERY_S`` seconds and at each phase's
end, so Airflow's task log shows where a run is without a line per file. The JSON result on stdout
is never touched. Nothing is shown unless a run asked for it (``activate``): a library caller, a
test or a Spark executor pays one attribute read per update.

Phases are named by the jobs (``deleting files``, ``rewriting groups``, ``committing``); a Spark
run adds its stages' tasks done of total (``spark.progress``), which every job on Spark gets
without saying anything.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

log = logging.getLogger("tablekeeper.progress")

DRAW_EVERY_S = 0.25
LOG_EVERY_S = 10.0


@dataclass
class _Phase:
    name: str
    total: int | None
    unit: str
    started: float
    done: int = 0


@dataclass
class Reporter:
    """Where updates go; one per run (``activate``)."""

    job: str
    stream: TextIO
    interactive: bool
    clock: Callable[[], float] = time.monotonic
    started: float = 0.0
    phases: list[_Phase] = field(default_factory=list)
    detail: str = ""  # e.g. Spark's tasks, shown after the phase
    _last: float = float("-inf")
    _drawn: int = 0  # characters of the line on the terminal
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def line(self) -> str:
        elapsed = self.clock() - self.started
        parts = [self.job]
        if self.phases:
            p = self.phases[-1]
            if p.total:
                share = min(100.0, 100.0 * p.done / p.total)
                parts.append(f"{p.name} {p.done:,}/{p.total:,} {p.unit} ({share:.0f}%)")
            elif p.done:
                parts.append(f"{p.name} {p.done:,} {p.unit}")
            else:
                parts.append(p.name)
        if self.detail:
            parts.append(self.detail)
        parts.append(_duration(elapsed))
        return " | ".join(parts)

    def update(self, force: bool = False) -> None:
        with self._lock:
            now = self.clock()
            if not force and now - self._last < (DRAW_EVERY_S if self.interactive else LOG_EVERY_S):
                return
            self._last = now
            text = self.line()
            if self.interactive:
                pad = max(0, self._drawn - len(text))
                self.stream.write("\r" + text + " " * pad)
                self.stream.flush()
                self._drawn = len(text)
            else:
                log.info("%s", text)

    def keep(self, text: str) -> None:
        """``text`` in place of the redrawn line, which starts again below it."""
        with self._lock:
            pad = max(0, self._drawn - len(text))
            self.stream.write("\r" + text + " " * pad + "\n")
            self.stream.flush()
            self._drawn = 0

    def finish_line(self) -> None:
        """Leave the terminal's line for what follows (the result, an error)."""
        with self._lock:
            if self.interactive and self._drawn:
                self.stream.write("\r" + " " * self._drawn + "\r")
                self.stream.flush()
                self._drawn = 0


class _Holder:
    reporter: Reporter | None = None


def active() -> Reporter | None:
    return _Holder.reporter


@contextmanager
def activate(
    job: str,
    *,
    stream: TextIO | None = None,
    interactive: bool | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Reporter | None]:
    """Report progress for the block: drawn on ``stream`` (stderr) when it is a terminal, else
    logged at INFO; nothing at all when neither would be seen."""
    out = stream if stream is not None else sys.stderr
    tty = interactive if interactive is not None else _isatty(out)
    if not tty and not log.isEnabledFor(logging.INFO):
        yield None
        return
    reporter = Reporter(job, out, tty, clock)
    previous, _Holder.reporter = _Holder.reporter, reporter
    try:
        yield reporter
    finally:
        _Holder.reporter = previous
        reporter.finish_line()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Phase:
    """A phase of the run; ``advance`` counts what is done of ``total``. Thread-safe."""

    def __init__(self, phase: _Phase | None) -> None:
        self._phase = phase
        self._lock = threading.Lock()

    def advance(self, n: int = 1) -> None:
        reporter = _Holder.reporter
        if self._phase is None or reporter is None:
            return
        with self._lock:
            self._phase.done += n
        reporter.update()


@contextmanager
def phase(name: str, total: int | None = None, unit: str = "files") -> Iterator[Phase]:
    """``with phase("deleting files", len(rows)) as p: ... p.advance()``; at its end one line
    says how much was done and how long it took."""
    reporter = _Holder.reporter
    if reporter is None:
        yield Phase(None)
        return
    state = _Phase(name, total, unit, reporter.clock())
    reporter.phases.append(state)
    reporter.update(force=True)
    try:
        yield Phase(state)
    finally:
        took = reporter.clock() - state.started
        reporter.update(force=True)
        reporter.phases.remove(state)
        if reporter.interactive:
            # On a terminal a finished phase stays readable above the redrawn line.
            count = f" {state.done:,}/{state.total:,} {unit}" if state.total else ""
            reporter.keep(f"{reporter.job} | {name}{count} done in {_duration(took)}")


def set_detail(text: str) -> None:
    """A line's detail (e.g. Spark's tasks), redrawn when it changes."""
    reporter = _Holder.reporter
    if reporter is None or reporter.detail == text:
        return
    reporter.detail = text
    reporter.update()


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s"
