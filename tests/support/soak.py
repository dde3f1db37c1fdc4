"""A soak: destructive jobs killed at random phases, one after another, on one table that Iceberg
Spark keeps appending to. Shared by the test (a few dozen kills) and ``bench/soak.py`` (200).

Between kills nothing is repaired by hand: every job starts by finishing what the killed ones
left. At the end the appender stops, each destructive job runs once more uninterrupted, and then:
every row Iceberg Spark appended is in the table, every file the metadata references exists, and
every file on disk that nothing references is younger than the young-file window (what a writer
in flight may still commit).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.kill import files_under, journal_files, killed, missing, referenced_files, run_job

# Files younger than this are an in-flight writer's to commit; the soak's remove-orphans keeps them.
WINDOW_S = 60

# job -> (arguments, phases it passes). compact starts a JVM per run: it is drawn less often.
JOBS: dict[str, tuple[list[str], tuple[str, ...], int]] = {
    "expire-snapshots": (
        ["--older-than", "0s", "--retain-last", "3"],
        (
            "plan.done",
            "journal.written",
            "commit.manifests-written",
            "commit.metadata-written",
            "commit.swapped",
            "delete.mid",
        ),
        4,
    ),
    "remove-orphans": (
        ["--older-than", f"{WINDOW_S}s", "--force-short-retention"],
        ("plan.done", "journal.written", "delete.mid"),
        4,
    ),
    "compact": (
        ["--min-input-files", "2"],
        (
            "plan.done",
            "stage.written",
            "commit.manifests-written",
            "commit.metadata-written",
            "commit.swapped",
        ),
        1,
    ),
}


@dataclass
class Appender:
    """Iceberg Spark appending one row at a time from a thread of the test's session."""

    spark: Any
    table: str
    appended: list[int] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, first: int) -> None:
        def run() -> None:
            n = first
            while not self._stop.is_set():
                try:
                    self.spark.sql(f"INSERT INTO {self.table} VALUES ({n}, 'soak', {n}.0)")
                    self.appended.append(n)
                except Exception as err:  # a commit that lost every retry appended nothing
                    self.failures.append(str(err).splitlines()[0][:200])
                n += 1
                time.sleep(0.2)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@dataclass
class Report:
    kills: dict[str, int] = field(default_factory=dict)  # "job phase" -> kills
    exits: dict[str, int] = field(default_factory=dict)  # runs that ended before their phase
    appended: int = 0
    append_failures: int = 0
    checks: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "kills": sum(self.kills.values()),
            "by_job_and_phase": dict(sorted(self.kills.items())),
            "runs_that_finished_first": dict(sorted(self.exits.items())),
            "rows_appended": self.appended,
            "append_commits_lost": self.append_failures,
            "checks": self.checks,
            "seconds": round(self.seconds, 1),
        }


def check_table(spark: Any, table: str, appended: list[int]) -> None:
    spark.sql(f"REFRESH TABLE {table}")
    gone = missing(referenced_files(spark, table))
    assert gone == [], f"referenced files missing: {gone[:5]}"
    ids = {r[0] for r in spark.sql(f"SELECT id FROM {table} WHERE cat = 'soak'").collect()}
    lost = sorted(set(appended) - ids)
    assert lost == [], f"appended rows missing: {lost[:10]}"


def soak(
    spark: Any,
    table: str,
    ident: str,
    root: Path,
    conf_args: list[str],
    kills: int,
    seed: int,
    progress: Callable[[str], None] = lambda _: None,
) -> Report:
    """``kills`` killed runs on ``ident`` (``table`` is its Iceberg Spark name) while Iceberg Spark
    appends, then the final runs and checks (assertions)."""
    rng = random.Random(seed)
    report = Report()
    started = time.monotonic()
    appender = Appender(spark, table)
    appender.start(1_000_000)
    names = [name for name, (_, _, weight) in JOBS.items() for _ in range(weight)]
    try:
        while sum(report.kills.values()) < kills:
            job = rng.choice(names)
            extra, phases, _ = JOBS[job]
            phase = rng.choice(phases)
            at = f"{phase}@{rng.choice((1, 1, 2))}" if phase.startswith("commit.") else phase
            proc = run_job([job, *extra, "--table", ident, *conf_args], at)
            key = f"{job} {phase}"
            if killed(proc):
                report.kills[key] = report.kills.get(key, 0) + 1
            else:
                # Ended before reaching the phase (nothing to do), or lost a commit race: fine,
                # as long as it did not fail for another reason.
                assert proc.returncode in (0, 4), f"{job} exited {proc.returncode}: {proc.stderr[-1500:]}"
                report.exits[key] = report.exits.get(key, 0) + 1
            done = sum(report.kills.values())
            if done and done % 10 == 0 and proc.returncode != 0:
                check_table(spark, table, list(appender.appended))
                report.checks += 1
                progress(f"{done} kills, {len(appender.appended)} rows appended")
    finally:
        appender.stop()
    report.appended = len(appender.appended)
    report.append_failures = len(appender.failures)
    # One more uninterrupted run of each destructive job (remove-orphans last), then the end state.
    cutoff = 0.0
    for job in ("expire-snapshots", "compact", "remove-orphans"):
        cutoff = time.time() - WINDOW_S
        proc = run_job([job, *JOBS[job][0], "--table", ident, *conf_args])
        assert proc.returncode == 0, f"the final {job} failed: {proc.stderr[-1500:]}"
    check_table(spark, table, appender.appended)
    report.checks += 1
    assert not journal_files(root), "a journal was left after every job ran again"
    spark.sql(f"REFRESH TABLE {table}")
    referenced = referenced_files(spark, table) | {str(root / "metadata" / "version-hint.text")}
    stray = [f for f in files_under(root) - referenced if Path(f).stat().st_mtime < cutoff]
    assert stray == [], f"{len(stray)} files nothing references, older than the window: {stray[:5]}"
    report.seconds = time.monotonic() - started
    return report
