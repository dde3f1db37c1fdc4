"""health's predictions held against what the jobs then did: pure arithmetic over ledger rows.

A job run that health recommended carries a ``prediction`` object in its result (what health said
it would free, remove and take, and what it did: ``jobs.common.predictions``). From the ledger's
rows this module computes, per job and table, how far the predictions were off
(``tablekeeper history --accuracy``, and the error health shows beside each new estimate), and
the expected duration of a recommended job from that job's own past runs.

Tables are matched as health and the jobs name them: a path (Delta, or an Iceberg table by its
location) by its location without ``file:`` and a trailing slash; an identifier by the catalog
and the identifier. A run that does not say its catalog (a run with no prediction) matches an
identifier of any catalog: the ledger's ``table_name`` is the job's ``--table`` as given.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tablekeeper.catalog import looks_like_path

if TYPE_CHECKING:
    from tablekeeper.jobs.common.ledger import LedgerRow

# The jobs health recommends: the only ones a prediction can be recorded for.
PREDICTED_JOBS = (
    "compact",
    "expire-snapshots",
    "rewrite-manifests",
    "rewrite-position-deletes",
    "rewrite-equality-deletes",
    "remove-orphans",
    "backfill-row-lineage",
)
MEASURES = ("bytes_freed", "files_removed", "duration_ms")
# health's estimate of a duration: the median of this many of the table's own newest runs...
OWN_RUNS = 5
# ...else the job's median time per file over this many newest runs on any table.
FLEET_RUNS = 50
# The error health shows beside an estimate: over this many newest runs that had a prediction.
ERROR_RUNS = 10
_DELETED_KIND = re.compile(r"^deleted_[a-z_]+_count$")


@dataclass(frozen=True)
class TableKey:
    catalog: str  # "" for a path
    name: str


def table_key(name: str, catalog: str | None) -> TableKey:
    """How a table is matched across health's results and the jobs' runs."""
    text = name.strip()
    if looks_like_path(text):
        return TableKey("", re.sub(r"^file:(//)?", "", text).rstrip("/"))
    return TableKey(catalog or "", text)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _deleted(metrics: Mapping[str, Any]) -> int | None:
    total = _int(metrics.get("deleted_files_count"))
    if total is not None:
        return total
    kinds = [v for k, raw in metrics.items() if _DELETED_KIND.match(k) and (v := _int(raw)) is not None]
    return sum(kinds) if kinds else None


def _net(metrics: Mapping[str, Any], removed: str, added: str) -> int | None:
    gone, new = _int(metrics.get(removed)), _int(metrics.get(added))
    return None if gone is None else gone - (new or 0)


def files_removed(job: str, metrics: Mapping[str, Any]) -> int | None:
    """The files a run of ``job`` took away, counted as health counts its ``files_removed``:
    deleted (or moved to quarantine) for the deleting jobs, rewritten less added for the rest."""
    if job in ("expire-snapshots", "remove-orphans"):
        moved = _int(metrics.get("quarantined_files_count"))
        return moved if moved else _deleted(metrics)
    if job == "compact":
        return _net(metrics, "rewritten_data_files_count", "added_data_files_count")
    if job == "rewrite-manifests":
        return _net(metrics, "rewritten_manifests_count", "added_manifests_count")
    if job == "rewrite-position-deletes":
        return _net(metrics, "rewritten_delete_files_count", "added_delete_files_count")
    if job == "rewrite-equality-deletes":
        return _int(metrics.get("removed_equality_delete_files_count"))
    if job == "backfill-row-lineage":
        return 0
    return None


def bytes_freed(metrics: Mapping[str, Any]) -> int:
    """Bytes a run freed; jobs that free none (compact: the old files stay until expiry) say none."""
    return _int(metrics.get("bytes_freed")) or 0


def work_done(metrics: Mapping[str, Any]) -> int | None:
    """Files a run processed (rewritten, deleted or listed as orphans): what its time scales with."""
    for name in (
        "rewritten_data_files_count",
        "rewritten_manifests_count",
        "rewritten_delete_files_count",
        "removed_equality_delete_files_count",
    ):
        if (value := _int(metrics.get(name))) is not None:
            return value
    return _deleted(metrics)


def work_expected(job: str, expected: Mapping[str, Any]) -> int | None:
    """Files health expects the job to process, from its recommendation's ``expected``."""
    for name in ("files_rewritten", "manifests_rewritten", "files_deleted", "orphan_files"):
        if (value := _int(expected.get(name))) is not None:
            return value
    if job == "rewrite-equality-deletes":
        return _int(expected.get("equality_delete_files_before"))
    return None


@dataclass(frozen=True)
class Outcome:
    bytes_freed: int | None
    files_removed: int | None
    duration_ms: int | None

    def get(self, measure: str) -> int | None:
        value: int | None = getattr(self, measure)
        return value

    @classmethod
    def from_obj(cls, body: object) -> Outcome | None:
        if not isinstance(body, Mapping):
            return None
        return cls(
            _int(body.get("bytes_freed")), _int(body.get("files_removed")), _int(body.get("duration_ms"))
        )


@dataclass(frozen=True)
class PastRun:
    """A ledger row as the estimates and the accuracy need it (its result parsed once)."""

    run_id: str
    job: str
    table: str  # as the run named it
    catalog: str | None  # as its prediction says; None: unknown
    started_at: int  # microseconds
    done: bool  # ok and not a dry run: its figures are what it did
    duration_ms: int
    work: int | None
    health_run_id: str | None = None
    predicted: Outcome | None = None
    actual: Outcome | None = None

    @classmethod
    def from_row(cls, row: LedgerRow) -> PastRun:
        try:
            result = json.loads(row.result_json) if row.result_json else {}
        except ValueError:
            result = {}
        if not isinstance(result, dict):
            result = {}
        raw_metrics, raw_prediction = result.get("metrics"), result.get("prediction")
        metrics: Mapping[str, Any] = raw_metrics if isinstance(raw_metrics, dict) else {}
        prediction: Mapping[str, Any] | None = raw_prediction if isinstance(raw_prediction, dict) else None
        done = row.status == "ok" and not row.dry_run
        return cls(
            run_id=row.run_id,
            job=row.job,
            table=row.table_name,
            catalog=prediction.get("catalog") if prediction else None,
            started_at=row.started_at,
            done=done,
            duration_ms=row.duration_ms,
            work=work_done(metrics) if done else None,
            health_run_id=str(prediction.get("health_run_id")) if prediction else None,
            predicted=Outcome.from_obj(prediction.get("predicted")) if prediction else None,
            actual=Outcome.from_obj(prediction.get("actual")) if prediction else None,
        )

    def on(self, key: TableKey) -> bool:
        mine = table_key(self.table, self.catalog)
        if mine.name != key.name:
            return False
        return self.catalog is None or mine.catalog == key.catalog


def relative_error(predicted: int | None, actual: int | None) -> float | None:
    """|predicted - actual| / actual. None when either is unknown or both are zero (nothing to
    judge: compact frees no bytes, and says so); 1.0 when something was predicted and nothing
    happened."""
    if predicted is None or actual is None or (predicted == 0 and actual == 0):
        return None
    if actual == 0:
        return 1.0
    return abs(predicted - actual) / abs(actual)


@dataclass(frozen=True)
class MeasureAccuracy:
    compared: int  # runs where both figures were known and not both zero
    predicted_median: float | None = None
    actual_median: float | None = None
    predicted_mean: float | None = None
    actual_mean: float | None = None
    median_relative_error: float | None = None
    mean_relative_error: float | None = None

    def to_obj(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "predicted_median": self.predicted_median,
            "actual_median": self.actual_median,
            "predicted_mean": _round(self.predicted_mean),
            "actual_mean": _round(self.actual_mean),
            "median_relative_error": _round(self.median_relative_error, 4),
            "mean_relative_error": _round(self.mean_relative_error, 4),
        }


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def _pairs(runs: Iterable[PastRun], measure: str) -> list[tuple[int | None, int | None]]:
    return [(r.predicted.get(measure), r.actual.get(measure)) for r in runs if r.predicted and r.actual]


def measure_accuracy(pairs: Iterable[tuple[int | None, int | None]]) -> MeasureAccuracy:
    kept = [(p, a) for p, a in pairs if relative_error(p, a) is not None]
    if not kept:
        return MeasureAccuracy(0)
    predicted = [float(p or 0) for p, _ in kept]
    actual = [float(a or 0) for _, a in kept]
    errors = [e for p, a in kept if (e := relative_error(p, a)) is not None]
    return MeasureAccuracy(
        compared=len(kept),
        predicted_median=statistics.median(predicted),
        actual_median=statistics.median(actual),
        predicted_mean=statistics.fmean(predicted),
        actual_mean=statistics.fmean(actual),
        median_relative_error=statistics.median(errors),
        mean_relative_error=statistics.fmean(errors),
    )


@dataclass(frozen=True)
class AccuracyRow:
    job: str
    table: str
    catalog: str | None
    runs: int  # runs with a prediction
    measures: Mapping[str, MeasureAccuracy]
    last_run_at: int  # microseconds

    def to_obj(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "job": self.job,
            "table": self.table,
            "catalog": self.catalog,
            "runs": self.runs,
        }
        body.update((m, self.measures[m].to_obj()) for m in MEASURES)
        return body


def accuracy_rows(runs: Sequence[PastRun]) -> list[AccuracyRow]:
    """Per job and table, the runs that carried a prediction held against what they did; the
    most recently run first."""
    groups: dict[tuple[str, TableKey], list[PastRun]] = {}
    for run in runs:
        if run.predicted is None or run.actual is None:
            continue
        groups.setdefault((run.job, table_key(run.table, run.catalog)), []).append(run)
    rows = []
    for (job, _), members in groups.items():
        first = members[0]
        measures = {m: measure_accuracy(_pairs(members, m)) for m in MEASURES}
        rows.append(
            AccuracyRow(
                job=job,
                table=first.table,
                catalog=first.catalog,
                runs=len(members),
                measures=measures,
                last_run_at=max(r.started_at for r in members),
            )
        )
    return sorted(rows, key=lambda r: (-r.last_run_at, r.job, r.table))


def recent_error(
    runs: Sequence[PastRun], job: str, key: TableKey, last: int = ERROR_RUNS
) -> dict[str, Any] | None:
    """The median relative error of each measure over the newest ``last`` runs of ``job`` on the
    table that had a prediction (``runs`` newest first); None when none had one."""
    mine = [r for r in runs if r.job == job and r.predicted and r.actual and r.on(key)][:last]
    if not mine:
        return None
    body: dict[str, Any] = {"runs": len(mine)}
    for m in MEASURES:
        found = measure_accuracy(_pairs(mine, m))
        body[m] = _round(found.median_relative_error, 4)
    return body


@dataclass(frozen=True)
class DurationEstimate:
    duration_ms: int
    basis: str  # "table": the table's own runs; "fleet": the job's time per file on any table
    runs: int


def expected_duration(
    runs: Sequence[PastRun], job: str, key: TableKey, work: int | None
) -> DurationEstimate | None:
    """The median duration of the table's own newest runs of ``job``; without any, the median
    time per file of the job's newest runs on any table times the files health expects it to
    process; None without either."""
    done = [r for r in runs if r.job == job and r.done]
    own = [r.duration_ms for r in done if r.on(key)][:OWN_RUNS]
    if own:
        return DurationEstimate(round(statistics.median(own)), "table", len(own))
    rates = [r.duration_ms / r.work for r in done if r.work][:FLEET_RUNS]
    if rates and work:
        return DurationEstimate(round(statistics.median(rates) * work), "fleet", len(rates))
    return None
