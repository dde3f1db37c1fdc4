"""A job run's metrics and lineage events, as the command line wires them around the run.

``observer(...)`` is None unless OTLP metrics or OpenLineage are configured (jobs.common.observe):
then nothing beyond the standard library is imported. Otherwise ``started()`` goes before the job
(OpenLineage START) and ``finished(result)`` after its result is printed and recorded (COMPLETE or
FAIL, then the metrics export); neither ever raises or changes the result or the exit code.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tablekeeper.jobs.common.observe import Targets, targets

if TYPE_CHECKING:
    from tablekeeper.catalog.config import CatalogsConfig
    from tablekeeper.jobs.common.lineage import LineageRun, TableRef
    from tablekeeper.jobs.common.result import JobResult

log = logging.getLogger(__name__)


def table_refs(args: argparse.Namespace, job: str) -> tuple[tuple[TableRef, ...], tuple[TableRef, ...]]:
    """The tables the run reads and those it writes (a dry run and the read-only jobs write none)."""
    from tablekeeper.jobs.common.lineage import READ_ONLY_JOBS, TableRef

    catalog = getattr(args, "catalog", None)
    source, target, table = (getattr(args, name, None) for name in ("source", "target", "table"))
    reads: tuple[TableRef, ...]
    writes: tuple[TableRef, ...]
    if source and target:  # convert-delta, validate-conversion: Delta in, Iceberg out
        src, tgt = TableRef(source, delta_source=True), TableRef(target, catalog)
        reads, writes = ((src, tgt), ()) if job in READ_ONLY_JOBS else ((src,), (tgt,))
    elif table:
        reads = writes = (TableRef(table, catalog),)
    else:
        return (), ()  # health over a whole catalog
    if job in READ_ONLY_JOBS or getattr(args, "dry_run", False):
        writes = ()
    return reads, writes


@dataclass
class Observer:
    chosen: Targets
    lineage: LineageRun | None

    def started(self) -> None:
        if self.lineage is not None:
            try:
                self.lineage.start()
            except Exception:  # never the job's failure
                log.warning("OpenLineage START event not sent", exc_info=log.isEnabledFor(logging.DEBUG))

    def finished(self, result: JobResult, stack_trace: str | None = None) -> None:
        if self.lineage is not None:
            try:
                self.lineage.finish(result, stack_trace if log.isEnabledFor(logging.DEBUG) else None)
            except Exception:
                log.warning("OpenLineage end event not sent", exc_info=log.isEnabledFor(logging.DEBUG))
        if self.chosen.metrics is not None:
            try:
                from tablekeeper.jobs.common.telemetry import export

                export(result, self.chosen.metrics)
            except Exception:
                log.warning("OTLP metrics not exported", exc_info=log.isEnabledFor(logging.DEBUG))


def observer(
    args: argparse.Namespace,
    job: str,
    table: str,
    run_id: str,
    catalog_file: Callable[[], CatalogsConfig],
    catalogs: Callable[[], CatalogsConfig],
) -> Observer | None:
    """The run's observer, or None when nothing is configured. ``catalog_file`` is the run's catalog
    file as parsed (its ``telemetry:`` block); ``catalogs`` the same with its storage settings in
    force, for loading the tables' metadata."""
    try:
        return _observer(args, job, table, run_id, catalog_file, catalogs)
    except Exception:  # a bug here is a warning: the job runs unobserved, its outcome untouched
        log.warning("metrics and lineage are off for this run", exc_info=log.isEnabledFor(logging.DEBUG))
        return None


def _observer(
    args: argparse.Namespace,
    job: str,
    table: str,
    run_id: str,
    catalog_file: Callable[[], CatalogsConfig],
    catalogs: Callable[[], CatalogsConfig],
) -> Observer | None:
    try:
        config = catalog_file()
    except Exception:  # the job itself reports an unreadable catalog file
        config = None
    if config is not None and config.telemetry_error is not None:
        log.warning("%s", config.telemetry_error)
    chosen = targets(os.environ, config.telemetry if config else None, getattr(args, "lineage_parent", None))
    for problem in chosen.problems:
        log.warning("%s", problem)
    if not chosen.any:
        return None
    lineage = None
    if chosen.lineage is not None:
        from tablekeeper.jobs.common.lineage import LineageRun

        reads, writes = table_refs(args, job)
        lineage = LineageRun(
            chosen.lineage,
            run_id=run_id,
            job=job,
            table=table,
            reads=reads,
            writes=writes,
            catalogs=catalogs,
        )
    return Observer(chosen, lineage)
