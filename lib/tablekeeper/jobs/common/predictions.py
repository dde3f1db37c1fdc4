"""Reading the ledger for health's predictions: the one a job's run is held against, and the past
runs health estimates durations and shows its own error from.

Both reads are bounded and never fail what runs them: a job looks at the newest ``HEALTH_RUNS``
health runs of the last ``prediction_window_days`` (the ledger block's, default 7) only, pruned
to their day partitions and their files by the ``job`` column's bounds; health reads the last
``HISTORY_DAYS`` days, at most ``HISTORY_RUNS`` runs, once per health run. Each read runs with a
time budget: past it the read is abandoned (its thread is a daemon) and the job goes on without
it. Every error is logged and ignored.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from tablekeeper.catalog import LoadedTable, looks_like_path
from tablekeeper.catalog.config import DEFAULT_PREDICTION_WINDOW_DAYS, CatalogsConfig
from tablekeeper.jobs.common.accuracy import PREDICTED_JOBS, TableKey, bytes_freed, files_removed, table_key
from tablekeeper.jobs.common.ledger import (
    HistoryQuery,
    LedgerRow,
    check_ledger,
    ledger_target,
    micros_to_iso,
    open_catalog,
    read_runs,
)
from tablekeeper.jobs.common.result import JobResult, Prediction, iso_to_micros

log = logging.getLogger(__name__)

DAY_US = 86_400_000_000
HEALTH_RUNS = 20
PREDICTION_BUDGET_S = 5.0
HISTORY_DAYS = 30
HISTORY_RUNS = 1000
HISTORY_BUDGET_S = 10.0

_T = TypeVar("_T")


def bounded(what: str, work: Callable[[], _T], budget_s: float) -> _T | None:
    """``work()``, or None when it fails (logged) or takes longer than ``budget_s`` (abandoned)."""
    box: list[_T | None] = []

    def run() -> None:
        try:
            box.append(work())
        except Exception as err:
            log.debug("%s failed", what, exc_info=True)
            reason = getattr(err, "message", None) or f"{type(err).__name__}: {err}"
            log.warning("%s: the ledger could not be read, going on without it: %s", what, reason)
            box.append(None)

    thread = threading.Thread(target=run, name="tablekeeper-ledger-read", daemon=True)
    thread.start()
    thread.join(budget_s)
    if thread.is_alive():
        log.warning("%s: reading the ledger took over %g s, going on without it", what, budget_s)
        return None
    return box[0] if box else None


def _open(
    catalogs: CatalogsConfig, ledger_catalog: str | None, ledger_table: str | None
) -> LoadedTable | None:
    target = ledger_target(catalogs, ledger_catalog, ledger_table)
    if target is None:
        return None
    loaded = open_catalog(catalogs, target.catalog).load_if_exists(target.table)
    return None if loaded is None else check_ledger(loaded, str(target))


def _job_key(catalogs: CatalogsConfig, table: str, catalog: str | None) -> TableKey:
    return table_key(table, None if looks_like_path(table) else catalogs.get(catalog).name)


def predicted(
    result: JobResult,
    *,
    catalogs: Callable[[], CatalogsConfig],
    ledger_catalog: str | None,
    ledger_table: str | None,
    table: str | None,
    catalog: str | None,
) -> JobResult:
    """``result`` with health's prediction for it beside what it did, when the ledger holds a
    health run of the window that recommended this job for this table. Only a run that did its
    work gets one: a dry run, a refused or a failed one did nothing to compare."""
    if result.status != "ok" or result.dry_run or result.job not in PREDICTED_JOBS or not table:
        return result
    try:
        config = catalogs()
        if ledger_target(config, ledger_catalog, ledger_table) is None:
            return result
        key = _job_key(config, table, catalog)
    except Exception:  # no catalog file or ledger block to speak of: the ledger note says the rest
        log.debug("no ledger to look for a prediction in", exc_info=True)
        return result

    def lookup() -> Prediction | None:
        ledger = _open(config, ledger_catalog, ledger_table)
        if ledger is None:
            return None
        days = config.ledger.prediction_window_days if config.ledger else DEFAULT_PREDICTION_WINDOW_DAYS
        return find_prediction(ledger, result, key, days)

    found = bounded(f"health's prediction for {result.job} on {table}", lookup, PREDICTION_BUDGET_S)
    return result if found is None else replace(result, prediction=found)


def find_prediction(ledger: LoadedTable, result: JobResult, key: TableKey, days: int) -> Prediction | None:
    """The newest health run within ``days`` before ``result`` started that recommended its job
    for the table ``key``, as the prediction recorded beside ``result``'s figures."""
    started = iso_to_micros(result.started_at)
    query = HistoryQuery(job="health", since_us=started - days * DAY_US, limit=HEALTH_RUNS)
    for run in read_runs(ledger, query):
        if run.started_at > started:
            continue
        hit = recommendation_in(run, result.job, key)
        if hit is None:
            continue
        name, recommendation = hit
        return Prediction(
            health_run_id=run.run_id,
            health_started_at=micros_to_iso(run.started_at),
            table=name,
            catalog=key.catalog or None,
            bytes_freed=_count(recommendation.get("bytes_freed")) or 0,
            files_removed=_count(recommendation.get("files_removed")) or 0,
            duration_ms=_count(recommendation.get("expected_duration_ms")),
            actual_bytes_freed=bytes_freed(result.metrics),
            actual_files_removed=files_removed(result.job, result.metrics),
            actual_duration_ms=result.duration_ms,
        )
    return None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def recommendation_in(run: LedgerRow, job: str, key: TableKey) -> tuple[str, Mapping[str, Any]] | None:
    """(the table as health named it, its recommendation of ``job``) from a health run's result.
    A health run that does not say its catalog (an earlier version) matches identifiers by name."""
    try:
        body = json.loads(run.result_json or "")
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    metrics = body.get("metrics")
    named = metrics.get("catalog") if isinstance(metrics, dict) else None
    catalog = named if isinstance(named, str) else None
    for entry in body.get("tables") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("table"), str):
            continue
        theirs = table_key(entry["table"], catalog)
        if theirs.name != key.name or (catalog is not None and theirs.catalog != key.catalog):
            continue
        for recommendation in entry.get("recommendations") or []:
            if isinstance(recommendation, dict) and recommendation.get("job") == job:
                return entry["table"], recommendation
    return None


def recent_runs(
    catalogs: CatalogsConfig, ledger_catalog: str | None, ledger_table: str | None, now_us: int
) -> tuple[LedgerRow, ...] | None:
    """The runs of the jobs health recommends from the last ``HISTORY_DAYS`` days, newest first,
    at most ``HISTORY_RUNS``: () for an empty or missing ledger, None when none is configured or it
    could not be read in time."""

    def read() -> tuple[LedgerRow, ...] | None:
        target = ledger_target(catalogs, ledger_catalog, ledger_table)
        if target is None:
            return None
        ledger = _open(catalogs, ledger_catalog, ledger_table)
        if ledger is None:
            return ()
        query = HistoryQuery(
            since_us=now_us - HISTORY_DAYS * DAY_US, limit=HISTORY_RUNS, jobs=frozenset(PREDICTED_JOBS)
        )
        return read_runs(ledger, query)

    return bounded("health's estimates", read, HISTORY_BUDGET_S)
