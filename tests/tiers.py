"""Test tiers: every test belongs to exactly one, as a pytest marker, so a developer runs one tier
(`make test-unit`, `make test-kill`, ...) and CI's log ends with where the time went per tier.

A test's tier comes from its path; a test that names its tier with a marker of its own (a unit-style
test that reads the shared Delta corpus is ``corpus``) keeps it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pytest

# Tier -> what it needs; the order is the table's.
TIERS: dict[str, str] = {
    "unit": "no JVM, no jars, no ../shared",
    "corpus": "the shared Delta corpus (../shared), read by pure readers or the shared Spark session",
    "interop": "the shared Spark session and the reference engines",
    "kill": "crash safety: jobs killed at each phase, then rerun",
    "airflow": "real Airflow running the DAGs (spark-submit)",
    "cluster": "a standalone Spark cluster (spark-submit, executors in their own JVMs)",
    "compat": "one Spark line's environment: every job, the Delta corpus and a cluster submit, fast",
}

# Files of tests/interop that belong to another tier than interop.
_INTEROP_FILES: dict[str, str] = {
    "test_kill_points.py": "kill",
    "test_soak.py": "kill",
    "test_delta_shared_tables.py": "corpus",
    "test_convert_delta.py": "corpus",
    "test_convert_checkpoint_tasks.py": "corpus",
}
_DIRECTORIES: dict[str, str] = {
    "unit": "unit",
    "corpus": "corpus",
    "interop": "interop",
    "dags": "airflow",
    "cluster": "cluster",
    "compat": "compat",
}


def tier_of_path(relative: str) -> str:
    """The tier of a test file, from its path relative to tests/ (``interop/test_x.py``)."""
    directory, _, rest = relative.partition("/")
    if directory == "interop" and rest in _INTEROP_FILES:
        return _INTEROP_FILES[rest]
    return _DIRECTORIES.get(directory, "interop")


def assign(items: list[pytest.Item], tests_root: str) -> None:
    """Give every collected test its tier marker (unless it names one itself)."""
    for item in items:
        if any(item.get_closest_marker(name) for name in TIERS):
            continue
        relative = str(item.path.relative_to(tests_root)).replace("\\", "/")
        item.add_marker(getattr(pytest.mark, tier_of_path(relative)))


@dataclass
class _Tally:
    tests: int = 0
    seconds: float = 0.0
    failed: int = 0


def summary(reports: list[pytest.TestReport], tier_by_nodeid: dict[str, str]) -> list[str]:
    """Lines of the per-tier table: tests, wall seconds (setup + call + teardown) and failures."""
    tally: dict[str, _Tally] = defaultdict(_Tally)
    for report in reports:
        tier = tier_by_nodeid.get(report.nodeid, "?")
        t = tally[tier]
        t.seconds += report.duration
        if report.when == "call":
            t.tests += 1
        if report.failed:
            t.failed += 1
    total = sum(t.seconds for t in tally.values()) or 1.0
    lines = [f"{'tier':<8} {'tests':>6} {'seconds':>9} {'share':>6} {'failed':>6}"]
    for tier in [*TIERS, *sorted(set(tally) - set(TIERS))]:
        if tier not in tally:
            continue
        t = tally[tier]
        lines.append(f"{tier:<8} {t.tests:>6} {t.seconds:>9.1f} {t.seconds / total:>6.0%} {t.failed:>6}")
    lines.append(f"{'all':<8} {sum(t.tests for t in tally.values()):>6} {total:>9.1f}")
    return lines
