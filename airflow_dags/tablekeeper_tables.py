"""The tables file the tablekeeper DAGs are built from (``conf/tables.example.yaml`` shows every key).

Plain Python and PyYAML only, so the DAG files parse on any Airflow machine; a mistake in the file
is raised as ``TablesFileError`` naming the key, which Airflow shows as the DAG file's import error.
Option names and values of the jobs themselves are checked by ``tablekeeper`` when a job starts
(exit code 2, no retry), not here, so this module never repeats the CLI's option list.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from tablekeeper_values import (
    TablesFileError,
    expand,
    known,
    mapping,
    optional_int,
    optional_str,
    required_str,
    sequence,
    slug,
    start_date,
)

TABLES_ENV = "TABLEKEEPER_TABLES"
HOME_ENV = "TABLEKEEPER_HOME"
# The conf/jars.txt roles a submit ships (tablekeeper.settings.PACKAGE_ROLES; Airflow's venv does
# not import tablekeeper, and the DAG tests check both give the same --packages).
PACKAGE_ROLES = ("delta", "iceberg", "jdbc")
EXAMPLE_FILE = "conf/tables.example.yaml"

# Maintenance jobs in the order a table's DAG runs them: compaction first, then the delete files
# and manifests it left fewer of, so the snapshots these replace expire in the same run; orphans
# after expiry, so files expiry left behind go too; row-lineage backfill on the fewest manifests;
# statistics last, for the snapshot the run ends on.
MAINTENANCE_JOBS = (
    "compact",
    "rewrite-equality-deletes",
    "rewrite-position-deletes",
    "rewrite-manifests",
    "expire-snapshots",
    "remove-orphans",
    "backfill-row-lineage",
    "compute-stats",
)
# Jobs for Iceberg tables only.
ICEBERG_ONLY_JOBS = (
    "rewrite-equality-deletes",
    "rewrite-position-deletes",
    "rewrite-manifests",
    "backfill-row-lineage",
    "compute-stats",
)
CONVERT_JOB = "convert-delta"
HEALTH_JOB = "health"
# The jobs `tablekeeper health` can recommend (remove-orphans on Iceberg only with --list-files,
# backfill-row-lineage only with --v3-readiness); it never judges compute-stats, so a table's DAG
# always runs that and a fleet, which runs only what health recommends, cannot list it.
HEALTH_ASSESSED_JOBS = (
    "compact",
    "rewrite-equality-deletes",
    "rewrite-position-deletes",
    "rewrite-manifests",
    "expire-snapshots",
    "remove-orphans",
    "backfill-row-lineage",
)
# Options the DAGs set themselves: from the table's own keys, or per run (--result-file).
RESERVED_OPTIONS = frozenset({"table", "catalog", "conf-file", "result-file", "source", "target", "mode"})
# SparkSubmitOperator arguments a `submit` section may set, as the operator names them.
SUBMIT_KEYS = frozenset(
    {
        "conn_id",
        "spark_binary",
        "packages",
        "exclude_packages",
        "repositories",
        "jars",
        "py_files",
        "files",
        "archives",
        "conf",
        "env_vars",
        "properties_file",
        "deploy_mode",
        "driver_memory",
        "executor_memory",
        "executor_cores",
        "num_executors",
        "total_executor_cores",
        "yarn_queue",
        "verbose",
    }
)
# Keys of `submit` that are tablekeeper's, not the operator's.
TABLEKEEPER_SUBMIT_KEYS = frozenset({"jobs_dir", "results_dir"})
MERGED_SUBMIT_KEYS = ("conf", "env_vars")
TABLE_KEYS = frozenset(
    {
        "table",
        "name",
        "format",
        "catalog",
        "catalog_file",
        "schedule",
        "start_date",
        "retries",
        "pool",
        "tags",
        "jobs",
        "health",
        "submit",
    }
)
MIGRATION_KEYS = frozenset(
    {
        "source",
        "target",
        "name",
        "catalog",
        "catalog_file",
        "schedule",
        "start_date",
        "retries",
        "pool",
        "tags",
        "options",
        "validate",
        "submit",
    }
)
FLEET_KEYS = frozenset(
    {
        "namespace",
        "tables",
        "limit",
        "name",
        "catalog",
        "catalog_file",
        "schedule",
        "start_date",
        "retries",
        "pool",
        "tags",
        "jobs",
        "health",
        "submit",
        "report_dir",
    }
)
DEFAULT_KEYS = frozenset(
    {"catalog", "catalog_file", "schedule", "start_date", "retries", "pool", "tags", "jobs", "health"}
)
HEALTH_KEYS = frozenset({"enabled", "thresholds", "list_files", "always_run"})
# A fleet is health's choice by nature: only its thresholds can be set.
FLEET_HEALTH_KEYS = frozenset({"thresholds"})
_OPTION_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
# Per job, the options its command line declares, generated from the jobs' own declarations
# (python -m tablekeeper.cli.reference --write): Airflow's environment does not import tablekeeper,
# and an option the job would refuse is better refused when the DAG file loads than at 3 a.m.
JOB_OPTIONS: Mapping[str, frozenset[str]] = {
    job: frozenset(names)
    for job, names in json.loads((Path(__file__).resolve().parent / "job_options.json").read_text()).items()
}
_THRESHOLD_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


@dataclass(frozen=True)
class Submit:
    """How a job is handed to spark-submit: SparkSubmitOperator arguments plus tablekeeper's own."""

    operator_args: Mapping[str, Any]
    jobs_dir: str
    results_dir: str | None = None


@dataclass(frozen=True)
class Entry:
    """What a table and a migration both have: their DAG's name, schedule and task settings."""

    name: str
    catalog: str | None
    catalog_file: str | None
    schedule: str | None
    start_date: dt.datetime
    retries: int | None
    pool: str | None
    tags: tuple[str, ...]
    submit: Submit


@dataclass(frozen=True)
class HealthGate:
    """Whether a table's DAG asks ``tablekeeper health`` first and runs only the jobs it recommends."""

    enabled: bool = True
    # health's --threshold KEY=VALUE (docs/jobs/health.md lists the keys).
    thresholds: Mapping[str, str] = field(default_factory=dict)
    # health lists an Iceberg table's files (--list-files), so remove-orphans is gated as well.
    list_files: bool = False
    # Jobs that run whatever health says: health judges by the table's own properties (e.g.
    # history.expire.*), not by a job's options (expire-snapshots' older-than).
    always_run: tuple[str, ...] = ()


@dataclass(frozen=True)
class MaintainedTable(Entry):
    table: str
    format: str
    # Job -> its options, in MAINTENANCE_JOBS order.
    jobs: Mapping[str, Mapping[str, Any]]
    health: HealthGate = field(default_factory=HealthGate)


@dataclass(frozen=True)
class Migration(Entry):
    source: str
    target: str
    options: Mapping[str, Any]
    validate: bool


@dataclass(frozen=True)
class Fleet(Entry):
    """The tables of a catalog namespace, maintained as ``tablekeeper health`` ranks them."""

    namespace: str
    table_glob: str | None  # the file's `tables`: health's --tables
    limit: int | None
    # Job -> its options, in MAINTENANCE_JOBS order; only HEALTH_ASSESSED_JOBS.
    jobs: Mapping[str, Mapping[str, Any]]
    thresholds: Mapping[str, str]
    # Tables of the same catalog that have their own maintenance DAG or are a migration's target:
    # the fleet leaves them alone, else two DAGs could work on one table at once.
    exclude: tuple[str, ...] = ()
    # Where health writes its HTML report, one per run: <report_dir>/<fleet name>/<run time>.html.
    report_dir: str | None = None


@dataclass(frozen=True)
class TablesFile:
    tables: tuple[MaintainedTable, ...] = ()
    migrations: tuple[Migration, ...] = ()
    fleets: tuple[Fleet, ...] = ()


def project_home() -> Path:
    """The tablekeeper checkout: $TABLEKEEPER_HOME, else the directory above airflow_dags/."""
    env = os.environ.get(HOME_ENV)
    return Path(env).expanduser().resolve() if env else Path(__file__).resolve().parent.parent


def tables_path(home: Path | None = None) -> Path:
    """$TABLEKEEPER_TABLES, else the example file of the checkout."""
    env = os.environ.get(TABLES_ENV)
    return Path(env).expanduser().resolve() if env else (home or project_home()) / EXAMPLE_FILE


def load_tables(path: Path | None = None, home: Path | None = None) -> TablesFile:
    home = home or project_home()
    path = path or tables_path(home)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as err:
        raise TablesFileError(
            f"cannot read the tables file {path}: {err.strerror}; set {TABLES_ENV}"
        ) from err
    except yaml.YAMLError as err:
        raise TablesFileError(f"{path} is not valid YAML: {err}") from err
    where = str(path)
    mapping(doc, where)
    known(doc, {"submit", "defaults", "tables", "migrations", "fleets"}, where)
    variables = {"home": str(home)}
    submit = expand(mapping(doc.get("submit") or {}, f"{where}: submit"), variables)
    known(submit, SUBMIT_KEYS | TABLEKEEPER_SUBMIT_KEYS, f"{where}: submit")
    defaults = expand(mapping(doc.get("defaults") or {}, f"{where}: defaults"), variables)
    known(defaults, DEFAULT_KEYS, f"{where}: defaults")

    def entries(kind: str, build: Callable[..., Any]) -> tuple[Any, ...]:
        return tuple(
            build(
                expand(mapping(entry, f"{where}: {kind}[{i}]"), variables),
                defaults,
                submit,
                home,
                f"{where}: {kind}[{i}]",
            )
            for i, entry in enumerate(sequence(doc.get(kind) or [], f"{where}: {kind}"))
        )

    tables: tuple[MaintainedTable, ...] = entries("tables", _table)
    migrations: tuple[Migration, ...] = entries("migrations", _migration)
    fleets: tuple[Fleet, ...] = entries("fleets", _fleet)
    for kind, names in (
        ("tables", [t.name for t in tables]),
        ("migrations", [m.name for m in migrations]),
        ("fleets", [f.name for f in fleets]),
    ):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise TablesFileError(
                f"{where}: {kind} named {', '.join(twice)} more than once: set 'name' apart"
            )
    _no_overlap(fleets, where)
    fleets = tuple(replace(f, exclude=_claimed(f, tables, migrations)) for f in fleets)
    return TablesFile(tables=tables, migrations=migrations, fleets=fleets)


def _no_overlap(fleets: Sequence[Fleet], where: str) -> None:
    """Two fleets of one namespace would run jobs on its tables at once unless their globs part
    them; the same glob, or none, surely does not."""
    seen: dict[tuple[str | None, str | None, str], list[Fleet]] = {}
    for fleet in fleets:
        seen.setdefault((fleet.catalog, fleet.catalog_file, fleet.namespace), []).append(fleet)
    for (_, _, namespace), same in seen.items():
        globs = [f.table_glob for f in same]
        if len(same) > 1 and (None in globs or len(set(globs)) < len(globs)):
            raise TablesFileError(
                f"{where}: fleets {', '.join(f.name for f in same)} both maintain namespace {namespace}: "
                "give each its own `tables` glob, matching tables apart"
            )


def table_key(name: str) -> str:
    """A table's name as health's fleet results and the tables file can both give it: a Delta
    path with or without ``file:`` and a trailing slash is one table."""
    return re.sub(r"^file:(//)?", "", name).rstrip("/")


def _claimed(
    fleet: Fleet, tables: Sequence[MaintainedTable], migrations: Sequence[Migration]
) -> tuple[str, ...]:
    """The tables of the fleet's catalog another DAG of the file writes."""
    same = (fleet.catalog, fleet.catalog_file)
    names = [t.table for t in tables if t.format == "delta" or (t.catalog, t.catalog_file) == same]
    names += [m.target for m in migrations if (m.catalog, m.catalog_file) == same]
    return tuple(sorted({table_key(n) for n in names}))


def jar_coordinates(home: Path) -> str:
    """The ``--packages`` value: the coordinates of conf/jars.txt's delta, iceberg and jdbc roles
    (not the bench jars, the test servers, or S3A, which clusters bring or add themselves)."""
    path = home / "conf" / "jars.txt"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise TablesFileError(
            f"cannot read {path} for submit.packages: {err.strerror}; set {HOME_ENV}"
        ) from err
    coordinates = []
    for raw in lines:
        fields = raw.split("#", 1)[0].split()
        if len(fields) == 2 and fields[0] in PACKAGE_ROLES:
            coordinates.append(fields[1])
    return ",".join(coordinates)


def _table(
    entry: dict[str, Any], defaults: Mapping[str, Any], submit: Mapping[str, Any], home: Path, where: str
) -> MaintainedTable:
    known(entry, TABLE_KEYS, where)
    table = required_str(entry, "table", where)
    fmt = entry.get("format", "iceberg")
    if fmt not in ("iceberg", "delta"):
        raise TablesFileError(f"{where}: format {fmt!r}: use iceberg or delta")
    if fmt == "delta" and "/" not in table and "://" not in table:
        raise TablesFileError(f"{where}: a delta table is named by its path, not {table!r}")
    jobs = _jobs(defaults.get("jobs") or {}, entry.get("jobs") or {}, where)
    iceberg_only = [j for j in ICEBERG_ONLY_JOBS if j in jobs]
    if fmt == "delta" and iceberg_only:
        raise TablesFileError(f"{where}: {iceberg_only[0]} is for Iceberg tables, not delta")
    if not jobs:
        raise TablesFileError(f"{where}: no jobs: list at least one of {', '.join(MAINTENANCE_JOBS)}")
    merged = {k: v for k, v in {**defaults, **entry}.items() if k != "health"}
    if fmt == "delta":
        merged["catalog"] = None  # a path, no catalog
    return MaintainedTable(
        **_entry(merged, str(entry.get("name") or slug(table)), submit, home, where),
        table=table,
        format=fmt,
        jobs=jobs,
        health=_health(defaults.get("health"), entry.get("health"), where),
    )


def _fleet(
    entry: dict[str, Any], defaults: Mapping[str, Any], submit: Mapping[str, Any], home: Path, where: str
) -> Fleet:
    known(entry, FLEET_KEYS, where)
    namespace = required_str(entry, "namespace", where)
    # The defaults' jobs are a table's; a fleet lists its own (compute-stats, say, cannot be one).
    inherited = {k: v for k, v in defaults.items() if k not in ("jobs", "health")}
    merged = {**inherited, **entry}
    jobs = _jobs({}, entry.get("jobs") or {}, where)
    unassessed = [j for j in jobs if j not in HEALTH_ASSESSED_JOBS]
    if unassessed:
        raise TablesFileError(
            f"{where}: health never recommends {unassessed[0]}, so a fleet would never run it: "
            "give such tables their own entry in `tables`"
        )
    if not jobs:
        raise TablesFileError(f"{where}: no jobs: list at least one of {', '.join(HEALTH_ASSESSED_JOBS)}")
    own_health = entry.get("health")
    if own_health is not None and not isinstance(own_health, dict):
        raise TablesFileError(f"{where}: a fleet always asks health: its health may only set thresholds")
    known(own_health or {}, FLEET_HEALTH_KEYS, f"{where}: health")
    # The defaults' thresholds hold for fleets too; their gate settings are about tables' DAGs.
    default_health = defaults.get("health")
    thresholds = {
        **_thresholds(
            default_health.get("thresholds") if isinstance(default_health, dict) else None,
            f"{where}: defaults.health",
        ),
        **_thresholds((own_health or {}).get("thresholds"), f"{where}: health"),
    }
    limit = optional_int(entry, "limit", where)
    if limit == 0:
        raise TablesFileError(f"{where}: 'limit' must be at least 1 (leave it out for every table)")
    fields = _entry(merged, str(entry.get("name") or slug(namespace)), submit, home, where)
    if not fields["pool"]:
        raise TablesFileError(
            f"{where}: a fleet needs a pool, whose slots bound how many jobs run at once "
            '(airflow pools set <pool> 4 "..."; then pool: <pool>)'
        )
    return Fleet(
        **fields,
        namespace=namespace,
        table_glob=optional_str(entry, "tables", where),
        limit=limit,
        jobs=jobs,
        thresholds=thresholds,
        report_dir=optional_str(entry, "report_dir", where),
    )


def _health(default: Any, own: Any, where: str) -> HealthGate:
    """The table's health gate: its `health` over the defaults' (true/false, or a mapping whose
    thresholds merge key by key)."""
    layers = [
        _health_layer(default, f"{where}: defaults.health"),
        _health_layer(own, f"{where}: health"),
    ]
    merged: dict[str, Any] = {}
    thresholds: dict[str, str] = {}
    for name, layer in layers:
        thresholds.update(_thresholds(layer.get("thresholds"), name))
        merged.update((k, v) for k, v in layer.items() if k != "thresholds")
    for key in ("enabled", "list_files"):
        if not isinstance(merged.get(key, False), bool):
            raise TablesFileError(f"{where}: health.{key} must be true or false")
    always = sequence(merged.get("always_run") or [], f"{where}: health.always_run")
    unknown = [str(j) for j in always if j not in MAINTENANCE_JOBS]
    if unknown:
        raise TablesFileError(
            f"{where}: health.always_run: unknown job {unknown[0]!r}: use {', '.join(MAINTENANCE_JOBS)}"
        )
    return HealthGate(
        enabled=merged.get("enabled", True),
        thresholds=thresholds,
        list_files=merged.get("list_files", False),
        always_run=tuple(str(j) for j in always),
    )


def _health_layer(value: Any, where: str) -> tuple[str, dict[str, Any]]:
    if value is None:
        return where, {}
    if isinstance(value, bool):
        return where, {"enabled": value}
    layer = mapping(value, where)
    known(layer, HEALTH_KEYS, where)
    return where, layer


def _thresholds(value: Any, where: str) -> dict[str, str]:
    """health's thresholds as its command line takes them: KEY -> VALUE text."""
    out: dict[str, str] = {}
    for key, raw in mapping(value or {}, f"{where}.thresholds").items():
        if not isinstance(key, str) or not _THRESHOLD_NAME.match(key):
            raise TablesFileError(
                f"{where}.thresholds: {key!r} is not a threshold name: write it as health's "
                "--threshold takes it (compact.min-files: 10)"
            )
        if isinstance(raw, (dict, list)) or raw is None:
            raise TablesFileError(f"{where}.thresholds: {key} must be one value")
        out[key] = str(raw).lower() if isinstance(raw, bool) else str(raw)
    return out


def _migration(
    entry: dict[str, Any], defaults: Mapping[str, Any], submit: Mapping[str, Any], home: Path, where: str
) -> Migration:
    known(entry, MIGRATION_KEYS, where)
    # A migration runs when asked, or on its own schedule: never on the maintenance default one.
    inherited = {k: v for k, v in defaults.items() if k not in ("schedule", "jobs", "health")}
    merged = {**inherited, **entry}
    options = _options(entry.get("options") or {}, f"{where}: options", CONVERT_JOB)
    validate = merged.get("validate", True)
    if not isinstance(validate, bool):
        raise TablesFileError(f"{where}: validate must be true or false")
    target = required_str(entry, "target", where)
    return Migration(
        **_entry(merged, str(entry.get("name") or slug(target)), submit, home, where),
        source=required_str(entry, "source", where),
        target=target,
        options=options,
        validate=validate,
    )


def _entry(
    merged: Mapping[str, Any], name: str, submit: Mapping[str, Any], home: Path, where: str
) -> dict[str, Any]:
    """The Entry fields of a table or migration whose keys were merged over the defaults."""
    return {
        "name": name,
        "catalog": optional_str(merged, "catalog", where),
        "catalog_file": optional_str(merged, "catalog_file", where),
        "schedule": optional_str(merged, "schedule", where),
        "start_date": start_date(merged.get("start_date"), where),
        "retries": optional_int(merged, "retries", where),
        "pool": optional_str(merged, "pool", where),
        "tags": tuple(str(t) for t in sequence(merged.get("tags") or [], f"{where}: tags")),
        "submit": _submit(submit, merged.get("submit"), home, where),
    }


def _jobs(defaults: Any, own: Any, where: str) -> dict[str, Mapping[str, Any]]:
    """Per job, the table's options over the defaults'. ``job:`` alone runs it with no options;
    ``job: false`` drops it (a default job the table does not want)."""
    layers = (
        ("defaults.jobs", mapping(defaults, f"{where}: defaults.jobs")),
        ("jobs", mapping(own, f"{where}: jobs")),
    )
    for _, layer in layers:
        for job in layer:
            if job not in MAINTENANCE_JOBS:
                raise TablesFileError(f"{where}: unknown job {job!r}: use {', '.join(MAINTENANCE_JOBS)}")
    jobs: dict[str, Mapping[str, Any]] = {}
    for job in MAINTENANCE_JOBS:
        present = [(name, layer[job]) for name, layer in layers if job in layer]
        if not present or present[-1][1] is False:
            continue
        options: dict[str, Any] = {}
        for name, value in present:
            if value is not False:
                options.update(_options(value or {}, f"{where}: {name}.{job}", job))
        jobs[job] = options
    return jobs


def _options(options: Any, where: str, job: str) -> dict[str, Any]:
    options = mapping(options, where)
    for key, value in options.items():
        if not isinstance(key, str) or not _OPTION_NAME.match(key):
            raise TablesFileError(
                f"{where}: {key!r} is not an option name: write it as on the command line, "
                "without the dashes (older-than: 5d)"
            )
        if key in RESERVED_OPTIONS:
            raise TablesFileError(f"{where}: {key!r} is set by the DAG; use the table's own keys")
        if key not in JOB_OPTIONS[job]:
            raise TablesFileError(
                f"{where}: {job} has no option {key!r}: use one of "
                f"{', '.join(sorted(JOB_OPTIONS[job] - RESERVED_OPTIONS))} (docs/reference/options.md)"
            )
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, (dict, list)) for v in values):
            raise TablesFileError(f"{where}: {key} must be a value, a list of values or true/false")
    return options


def _submit(base: Mapping[str, Any], own: Any, home: Path, where: str) -> Submit:
    merged = dict(base)
    for key, value in mapping(own or {}, f"{where}: submit").items():
        if key in MERGED_SUBMIT_KEYS and isinstance(value, dict):
            merged[key] = {**mapping(merged.get(key) or {}, f"submit.{key}"), **value}
        else:
            merged[key] = value
    known(merged, SUBMIT_KEYS | TABLEKEEPER_SUBMIT_KEYS, f"{where}: submit")
    for key in MERGED_SUBMIT_KEYS:
        merged[key] = {
            str(k): str(v) for k, v in mapping(merged.get(key) or {}, f"{where}: submit.{key}").items()
        }
    if "packages" not in merged:
        merged["packages"] = jar_coordinates(home)
    if merged.get("deploy_mode") == "cluster" and not merged.get("results_dir"):
        # The driver runs elsewhere and writes the result there: it must land where this worker reads.
        raise TablesFileError(
            f"{where}: deploy_mode cluster needs submit.results_dir on storage the "
            "driver and the Airflow worker share"
        )
    jobs_dir = str(merged.pop("jobs_dir", None) or home / "jobs")
    results_dir = merged.pop("results_dir", None)
    merged.setdefault("py_files", str(home / "dist" / "tablekeeper.zip"))
    return Submit(
        operator_args=merged, jobs_dir=jobs_dir, results_dir=str(results_dir) if results_dir else None
    )
