"""health: which tables need which maintenance job, why, and what each would save.

Metadata only: manifest lists and manifests for Iceberg, the log through its last checkpoint for
Delta (``--list-files`` adds a listing, as remove-orphans does). It never writes. One table, or a
catalog's namespaces (``--catalog`` without ``--table``), read by threads on the driver or, when a
Spark session is there (spark-submit) or ``--engine spark`` asks for one, one table per task on
the executors. A table of a fleet that cannot be read is reported with its reason; the others
still are.

With a ledger configured, health reads the ledger's past runs once (``jobs.common.predictions``):
each recommendation gets an expected duration and, beside its estimates, their own error over the
table's last runs of that job; ``--html`` writes a report for people (``jobs.health.html``).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tablekeeper.catalog import catalog_for, looks_like_path
from tablekeeper.catalog.config import CatalogConfig
from tablekeeper.clock import now_ms
from tablekeeper.errors import ConfigError, TablekeeperError, task_error
from tablekeeper.jobs.common.accuracy import PastRun
from tablekeeper.jobs.common.context import (
    JobContext,
    add_engine_argument,
    add_ledger_arguments,
    add_lineage_argument,
    add_table_arguments,
    delta_root,
    options_from_args,
    positive,
)
from tablekeeper.jobs.common.engines import check_engine
from tablekeeper.jobs.common.formats import delta_options, honoured, refused
from tablekeeper.jobs.common.result import JobClock, JobResult
from tablekeeper.jobs.health.estimates import predicted_runs, with_estimates
from tablekeeper.jobs.health.layout import parse_columns
from tablekeeper.jobs.health.model import TableHealth, Thresholds, parse_threshold_args
from tablekeeper.settings import CATALOGS_FILE, conf_dir

log = logging.getLogger(__name__)

JOB = "health"
SORTS = ("savings", "bytes", "files", "small-files", "name")
DRIVER_THREADS = 8
# Fewer tables than this are read on the driver even when a session is there (tasks cost more).
SPARK_MIN_TABLES = 16


@dataclass(frozen=True)
class HealthOptions:
    table: str | None = None
    catalog: str | None = None
    namespace: str | None = None
    tables: str | None = None  # a glob over table names (the part after the namespace)
    list_files: bool = False
    v3_readiness: bool = False
    layout_columns: str | None = None
    thresholds: Mapping[str, str] = field(default_factory=dict, hash=False)
    sort: str = "savings"
    limit: int | None = None
    output: str = "auto"  # auto: a readable table too when stdout is a terminal
    html: str | None = None  # also write an HTML report here (a path or a storage URI)
    engine: str = "auto"
    conf_file: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> HealthOptions:
        return options_from_args(cls, args, thresholds=parse_threshold_args(args.threshold))

    def __post_init__(self) -> None:
        check_engine(self.engine)
        if self.table and (self.namespace or self.tables):
            raise ConfigError("--namespace and --tables choose tables of a catalog: drop them with --table")

    @property
    def cli_thresholds(self) -> dict[str, str]:
        extra = {"v3-readiness": "true"} if self.v3_readiness else {}
        return {**self.thresholds, **extra}


def file_thresholds(conf_file: str | None) -> Thresholds:
    """The defaults with the catalogs file's ``health:`` section applied."""
    path = Path(conf_file) if conf_file else conf_dir() / CATALOGS_FILE
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read {path}: {err}") from None
    section = (doc or {}).get("health") if isinstance(doc, dict) else None
    if section is None:
        return Thresholds()
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: health must map threshold names to values, e.g. compact.min-files: 10")
    return Thresholds().override(
        {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in section.items()}, str(path)
    )


@dataclass(frozen=True)
class _Target:
    """One table to check: an Iceberg identifier in a catalog, or a Delta table's location."""

    name: str
    catalog: CatalogConfig | None  # None: a Delta location
    delta: bool = False


def check_one(
    target: _Target,
    base: Thresholds,
    cli: Mapping[str, str],
    now_ms: int,
    list_files: bool,
    layout: Sequence[str] | None = None,
) -> TableHealth:
    """One table's health; runs on the driver or in an executor task (everything here pickles)."""
    if target.delta:
        from tablekeeper.jobs.health.delta import delta_health

        return delta_health(target.name, base, cli, now_ms=now_ms, layout_columns=layout)
    from tablekeeper.jobs.health.iceberg import iceberg_health

    assert target.catalog is not None
    return iceberg_health(
        catalog_for(target.catalog),
        target.name,
        base,
        cli,
        now_ms=now_ms,
        list_files=list_files,
        layout_columns=layout,
    )


def _checked(
    target: _Target,
    base: Thresholds,
    cli: Mapping[str, str],
    now_ms: int,
    list_files: bool,
    layout: Sequence[str] | None = None,
) -> TableHealth:
    try:
        return check_one(target, base, cli, now_ms, list_files, layout)
    except TablekeeperError as err:
        return TableHealth(target.name, "delta" if target.delta else "iceberg", error=err.message)
    except Exception as err:  # one unreadable table must not hide the fleet's others
        log.debug("health of %s failed", target.name, exc_info=True)
        # A Spark task's typed error (a large table's manifests are read in tasks): as itself.
        from_spark = type(err).__module__.startswith(("py4j", "pyspark"))
        typed = task_error(err) if from_spark else None
        return TableHealth(
            target.name,
            "delta" if target.delta else "iceberg",
            error=typed.message if typed is not None else f"{type(err).__name__}: {err}",
        )


def _targets(options: HealthOptions, context: JobContext) -> list[_Target]:
    config = context.catalogs.get(options.catalog)
    catalog = catalog_for(config)
    namespaces = [options.namespace] if options.namespace else catalog.list_namespaces()
    out: list[_Target] = []
    for ns in namespaces:
        names = [(t, False) for t in catalog.list_tables(ns)] + [(d, True) for d in catalog.delta_tables(ns)]
        for name, is_delta in names:
            short = name.rstrip("/").rsplit("/", 1)[-1].rsplit(".", 1)[-1]
            if options.tables and not fnmatch.fnmatchcase(short, options.tables):
                continue
            out.append(_Target(name, None if is_delta else config, is_delta))
    if not out:
        where = f"namespace {options.namespace}" if options.namespace else "any namespace"
        raise ConfigError(
            f"no tables in {where} of catalog {config.name}"
            + (f" match --tables {options.tables}" if options.tables else "")
            + ": check --catalog, --namespace and --tables"
        )
    return out


def _sort_key(sort: str) -> Any:
    if sort == "name":
        return lambda h: h.table
    if sort == "bytes":
        return lambda h: (-h.bytes_freed, h.table)
    if sort == "files":
        return lambda h: (-h.files_removed, h.table)
    if sort == "small-files":
        return lambda h: (-int(h.metrics.get("small_files") or 0), h.table)
    return lambda h: (-h.bytes_freed, -h.files_removed, -len(h.recommendations), h.table)


@dataclass(frozen=True)
class HealthResult(JobResult):
    tables: tuple[TableHealth, ...] = ()

    def to_json(self) -> str:
        body = json.loads(super().to_json())
        ordered = {k: body[k] for k in ("job", "table", "status", "dry_run", "metrics")}
        ordered["tables"] = [t.to_json() for t in self.tables]
        ordered.update((k, v) for k, v in body.items() if k not in ordered)
        return json.dumps(ordered, default=str, separators=(",", ":"))


def _summary(checked: Sequence[TableHealth]) -> dict[str, Any]:
    jobs: dict[str, int] = {}
    for h in checked:
        for r in h.recommendations:
            jobs[r.job] = jobs.get(r.job, 0) + 1
    return {
        "tables_checked": len(checked),
        "tables_needing_work": sum(1 for h in checked if h.recommendations),
        "tables_unreadable": sum(1 for h in checked if h.error),
        "recommendations": dict(sorted(jobs.items())),
        "expected_bytes_freed": sum(h.bytes_freed for h in checked),
        "expected_files_removed": sum(h.files_removed for h in checked),
    }


def run(options: HealthOptions, context: JobContext) -> JobResult:
    clock = JobClock()
    now = now_ms()
    base = file_thresholds(options.conf_file)
    cli = options.cli_thresholds
    read_in: str | None = None  # the catalog the tables were read in, as jobs name it (None: a path)
    if options.table:
        root = delta_root(options.table)
        if root is None and not looks_like_path(options.table):
            read_in = context.catalogs.get(options.catalog).name
        if root is not None:
            from tablekeeper.jobs.health.delta import delta_health

            one = delta_health(
                root, base, cli, now_ms=now, layout_columns=parse_columns(options.layout_columns)
            )
        else:
            from tablekeeper.jobs.health.iceberg import iceberg_health

            catalog, identifier = context.resolve(options.table, options.catalog)
            one = iceberg_health(
                catalog,
                identifier,
                base,
                cli,
                now_ms=now,
                list_files=options.list_files,
                spark=context.session_for(options.engine),  # driver: none; spark: started
                layout_columns=parse_columns(options.layout_columns),
            )
        checked = [one]
        label = options.table
    else:
        targets = _targets(options, context)
        checked = _check_fleet(targets, options, context, base, cli, now)
        read_in = context.catalogs.get(options.catalog).name
        label = read_in + (f".{options.namespace}" if options.namespace else "")
    from tablekeeper.jobs.common.predictions import recent_runs

    rows = recent_runs(context.catalogs, context.ledger_catalog, context.ledger_table, now * 1000)
    past = [PastRun.from_row(r) for r in rows or ()]
    checked = with_estimates(checked, past, read_in)
    ledger = None if rows is None else predicted_runs(past, checked, read_in)
    return _finish(options, clock, checked, label, read_in, ledger)


def _check_fleet(
    targets: Sequence[_Target],
    options: HealthOptions,
    context: JobContext,
    base: Thresholds,
    cli: Mapping[str, str],
    now: int,
) -> list[TableHealth]:
    layout = parse_columns(options.layout_columns)
    session = context.session_for(options.engine)
    if session is not None and (options.engine == "spark" or len(targets) >= SPARK_MIN_TABLES):
        sc = session.sparkContext
        sc.setJobDescription(f"{JOB}: {len(targets)} tables")
        list_files = options.list_files
        found: list[TableHealth] = (
            sc.parallelize(list(targets), min(len(targets), max(1, sc.defaultParallelism * 4)))
            .map(lambda t: _checked(t, base, cli, now, list_files, layout))
            .collect()
        )
        return found
    with ThreadPoolExecutor(DRIVER_THREADS) as pool:
        return list(pool.map(lambda t: _checked(t, base, cli, now, options.list_files, layout), targets))


def _finish(
    options: HealthOptions,
    clock: JobClock,
    checked: Sequence[TableHealth],
    label: str,
    catalog: str | None,
    ledger: Sequence[PastRun] | None,
) -> JobResult:
    ranked = sorted(checked, key=_sort_key(options.sort))
    shown = ranked[: options.limit] if options.limit else ranked
    metrics = _summary(checked) | {"sort": options.sort, "tables_shown": len(shown), "catalog": catalog}
    if options.output == "table" or (options.output == "auto" and sys.stdout.isatty()):
        from tablekeeper.jobs.health.report import render

        print(render(shown))
    base = clock.result(JOB, label, dry_run=False, metrics=metrics)
    if options.html:
        from tablekeeper.jobs.health.html import render_report

        _write_html(options.html, render_report(label, shown, metrics, ledger, generated_at=base.started_at))
    return HealthResult(**{f: getattr(base, f) for f in base.__dataclass_fields__}, tables=tuple(shown))


def _write_html(where: str, text: str) -> None:
    """The report written whole (locally: a new file renamed over the old), or a ConfigError."""
    from tablekeeper.io import FileIO

    location = where if "://" in where or where.startswith("file:") else str(Path(where).resolve())
    try:
        FileIO.for_location(location).write(location, text.encode("utf-8"))
    except (OSError, TablekeeperError) as err:
        reason = err.message if isinstance(err, TablekeeperError) else (err.strerror or str(err))
        raise ConfigError(f"cannot write the HTML report to {where}: {reason}") from None
    log.info("health report written to %s", where)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_table_arguments(parser)
    for action in parser._actions:  # --table is one way to choose; --catalog alone is the other
        if action.dest == "table":
            action.required = False
            action.help = "one table: <namespace>.<table> in a catalog, or a table path (Iceberg or Delta)"
    parser.add_argument(
        "--namespace", help="with --catalog and no --table: only this namespace (default: all)"
    )
    parser.add_argument(
        "--tables", help="with --catalog: only tables whose name matches this glob, e.g. 'events_*'"
    )
    parser.add_argument(
        "--list-files",
        action="store_true",
        help="also list each Iceberg table's location for orphan files (as remove-orphans does; slower)",
    )
    parser.add_argument(
        "--v3-readiness",
        action="store_true",
        help="recommend backfill-row-lineage for tables below format version 3",
    )
    parser.add_argument(
        "--layout-columns",
        metavar="C1,C2",
        help="judge the layout by point lookups on these columns (default: each table's sort order; "
        "several columns: a Z-order is what would serve them)",
    )
    parser.add_argument(
        "--threshold",
        action="append",
        metavar="KEY=VALUE",
        help="override a threshold, e.g. compact.min-files=10 (repeatable; see the health docs for the keys)",
    )
    parser.add_argument(
        "--sort", default="savings", choices=SORTS, help="order of the tables (default savings)"
    )
    parser.add_argument("--limit", type=positive, help="report only the first N tables in that order")
    parser.add_argument(
        "--output",
        default="auto",
        choices=["auto", "table", "json"],
        help="auto: a readable table before the JSON line when stdout is a terminal",
    )
    parser.add_argument(
        "--html",
        metavar="PATH",
        help="also write a self-contained HTML report (charts, ledger runs) to this file or storage URI",
    )
    parser.add_argument("--result-file", help="also write the JSON result to this file")
    add_ledger_arguments(parser)
    add_lineage_argument(parser)
    add_engine_argument(parser)


Options = HealthOptions
# health of one Delta table reads its log (jobs.health.delta); a catalog's Delta tables are
# checked with its Iceberg ones, and these options then apply to the Iceberg ones.
DELTA_OPTIONS = delta_options(
    {
        "threshold": honoured("the Delta checks' thresholds"),
        "sort": honoured("orders the report"),
        "limit": honoured("bounds the report"),
        "output": honoured("how the report is shown"),
        "html": honoured("the HTML report shows the Delta table's metrics"),
        "list_files": refused("the Delta checks count VACUUM's files from the log; drop it"),
        "v3_readiness": refused("row lineage is an Iceberg v3 feature: convert-delta --format-version 3"),
        "namespace": refused("with --table there is one table; use --catalog without --table"),
        "tables": refused("with --table there is one table; use --catalog without --table"),
        "engine": refused("one Delta table is checked on the driver; drop it"),
        "layout_columns": honoured(
            "the files' min and max values of these columns (default: its clustering columns)"
        ),
    },
    without=("dry_run",),  # health changes nothing: it takes no --dry-run
)
