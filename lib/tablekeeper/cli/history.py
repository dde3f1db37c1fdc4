"""``tablekeeper history``: recent runs from the ledger of runs, newest first.

A table for a person at a terminal; one JSON object (``{"ledger", "count", "runs"}``) with
``--json`` or whenever stdout is not a terminal, so pipes and scripts get the parsable form.
``--accuracy`` summarises instead, per job and table, health's predictions against what the runs
did (``{"ledger", "count", "accuracy"}``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from tablekeeper import clock
from tablekeeper.catalog.config import CatalogsConfig
from tablekeeper.errors import ConfigError
from tablekeeper.jobs.common.accuracy import MEASURES, PREDICTED_JOBS, AccuracyRow, PastRun, accuracy_rows
from tablekeeper.jobs.common.ledger import HistoryQuery, LedgerRow, history_target, load_ledger, read_runs
from tablekeeper.jobs.common.options import parse_older_than
from tablekeeper.redact import redact

_ERROR_WIDTH = 60
DEFAULT_LIMIT = 20
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def run(args: argparse.Namespace, catalogs: CatalogsConfig) -> int:
    if getattr(args, "accuracy", False):
        return run_accuracy(args, catalogs)
    limit = DEFAULT_LIMIT if args.limit is None else args.limit
    query = HistoryQuery(
        table=args.table, job=args.job, since_us=since_micros(args.since), limit=limit or None
    )
    target = history_target(catalogs, args.ledger_catalog, args.ledger_table)
    runs = read_runs(load_ledger(catalogs, target), query)
    if args.json or not sys.stdout.isatty():
        body = {"ledger": str(target), "count": len(runs), "runs": [r.to_obj() for r in runs]}
        print(redact(json.dumps(body, default=str, separators=(",", ":"))))
    else:
        print(redact(render(runs, str(target))))
    return 0


def since_micros(text: str | None, now_ms: int | None = None) -> int | None:
    if text is None:
        return None
    try:
        ms = parse_older_than(text, clock.now_ms() if now_ms is None else now_ms)
    except ConfigError:
        raise ConfigError(
            f"--since {text!r} is not a duration or a time: use e.g. 7d, 12h or 2026-05-01T00:00:00Z"
        ) from None
    return ms * 1000


def render(runs: Sequence[LedgerRow], ledger: str) -> str:
    if not runs:
        return f"no runs in {ledger} match"
    header = (
        "STARTED (UTC)",
        "JOB",
        "TABLE",
        "STATUS",
        "TOOK",
        "REWRITTEN",
        "ADDED",
        "DELETED",
        "FREED",
        "ERROR",
    )
    numeric = {4, 5, 6, 7, 8}
    lines = [header, *(_cells(r) for r in runs)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [f"{len(runs)} run(s) in {ledger}, newest first"]
    for line in lines:
        cells = [
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i]) for i, cell in enumerate(line)
        ]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def _cells(r: LedgerRow) -> tuple[str, ...]:
    status = r.status if not r.exit_code else f"{r.status} ({r.exit_code})"
    error = " ".join((r.error or "").split())
    if len(error) > _ERROR_WIDTH:
        error = error[: _ERROR_WIDTH - 3] + "..."
    return (
        _time(r.started_at),
        r.job,
        r.table_name,
        status,
        _duration(r.duration_ms),
        _count(r.files_rewritten),
        _count(r.files_added),
        _count(r.files_deleted),
        _bytes(r.bytes_freed),
        error or "-",
    )


def _time(micros: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(micros // 1_000_000))


def _duration(ms: int) -> str:
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    minutes, seconds = divmod(ms // 1000, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size, unit = float(value), 0
    while size >= 1024 and unit < len(_UNITS) - 1:
        size, unit = size / 1024, unit + 1
    return f"{value} B" if unit == 0 else f"{size:.1f} {_UNITS[unit]}"


def run_accuracy(args: argparse.Namespace, catalogs: CatalogsConfig) -> int:
    """Every run the filters select that carried health's prediction, summed per job and table."""
    query = HistoryQuery(
        table=args.table,
        job=args.job,
        since_us=since_micros(args.since),
        limit=args.limit or None,
        jobs=None if args.job else frozenset(PREDICTED_JOBS),
    )
    target = history_target(catalogs, args.ledger_catalog, args.ledger_table)
    rows = accuracy_rows([PastRun.from_row(r) for r in read_runs(load_ledger(catalogs, target), query)])
    if args.json or not sys.stdout.isatty():
        body = {"ledger": str(target), "count": len(rows), "accuracy": [r.to_obj() for r in rows]}
        print(redact(json.dumps(body, default=str, separators=(",", ":"))))
    else:
        print(redact(render_accuracy(rows, str(target))))
    return 0


_SHORT = {"bytes_freed": "BYTES", "files_removed": "FILES", "duration_ms": "TIME"}


def _figure(measure: str, value: float | None) -> str:
    if value is None:
        return "-"
    if measure == "bytes_freed":
        return _bytes(round(value))
    if measure == "duration_ms":
        return _duration(round(value))
    return f"{value:,.0f}" if value == round(value) else f"{value:,.1f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def render_accuracy(rows: Sequence[AccuracyRow], ledger: str) -> str:
    """One line per job and table: runs with a prediction, and per measure the medians predicted
    and actual and the median relative error (the JSON form also has the means)."""
    if not rows:
        return f"no runs with a prediction of health in {ledger} match"
    header = ["JOB", "TABLE", "RUNS"]
    for m in MEASURES:
        header += [f"{_SHORT[m]} PRED", f"{_SHORT[m]} ACTUAL", f"{_SHORT[m]} ERR"]
    lines = [header]
    for r in rows:
        cells = [r.job, r.table, str(r.runs)]
        for m in MEASURES:
            found = r.measures[m]
            cells += [
                _figure(m, found.predicted_median),
                _figure(m, found.actual_median),
                _share(found.median_relative_error),
            ]
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [f"health's predictions against the runs in {ledger} (medians; ERR: median relative error)"]
    for line in lines:
        cells = [c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]) for i, c in enumerate(line)]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)
