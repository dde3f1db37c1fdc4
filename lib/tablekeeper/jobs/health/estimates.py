"""health's recommendations given an expected duration and their own past error, from the runs
the ledger holds (read once per health run: ``jobs.common.predictions.recent_runs``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tablekeeper.jobs.common.accuracy import (
    PastRun,
    expected_duration,
    recent_error,
    table_key,
    work_expected,
)
from tablekeeper.jobs.health.model import TableHealth


def with_estimates(
    checked: Sequence[TableHealth], runs: Sequence[PastRun], catalog: str | None
) -> list[TableHealth]:
    """``checked`` with each recommendation's expected duration and error filled in from ``runs``
    (newest first); a table health read in ``catalog`` (None: a path) is matched as jobs name it."""
    out = []
    for health in checked:
        if not health.recommendations:
            out.append(health)
            continue
        key = table_key(health.table, catalog)
        recommendations = []
        for r in health.recommendations:
            estimate = expected_duration(runs, r.job, key, work_expected(r.job, r.effect))
            recommendations.append(
                dataclasses.replace(
                    r,
                    expected_duration_ms=estimate.duration_ms if estimate else None,
                    duration_basis=estimate.basis if estimate else None,
                    error=recent_error(runs, r.job, key),
                )
            )
        out.append(dataclasses.replace(health, recommendations=tuple(recommendations)))
    return out


def predicted_runs(
    runs: Sequence[PastRun], checked: Sequence[TableHealth], catalog: str | None
) -> list[PastRun]:
    """The runs among ``runs`` that carried a prediction, on the tables of ``checked``."""
    keys = [table_key(h.table, catalog) for h in checked]
    return [r for r in runs if r.predicted is not None and any(r.on(k) for k in keys)]
