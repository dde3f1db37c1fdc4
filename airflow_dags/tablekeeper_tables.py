"""The tables file the tablekeeper DAGs are built from (``conf/tables.example.yaml`` shows every key).

Plain Python and PyYAML only, so the DAG files parse on any Airflow machine; a mistake in the file
is raised as ``TablesFileError`` naming the key, which Airflow shows as the DAG file's import error.
Option names and values of the jobs themselves are checked by ``tablekeeper`` when a job starts
(exit code 2, no retry), not here, so this module never repeats the CLI's option list.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

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
    "rewrite-position-deletes",
    "rewrite-manifests",
    "expire-snapshots",
    "remove-orphans",
    "backfill-row-lineage",
    "compute-stats",
)
# Jobs for Iceberg tables only.
ICEBERG_ONLY_JOBS = ("rewrite-position-deletes", "rewrite-manifests", "backfill-row-lineage", "compute-stats")
CONVERT_JOB = "convert-delta"
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
DEFAULT_KEYS = frozenset(
    {"catalog", "catalog_file", "schedule", "start_date", "retries", "pool", "tags", "jobs"}
)
DEFAULT_START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
_OPTION_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
_VARIABLE = re.compile(r"\$\{(\w+)\}")


class TablesFileError(ValueError):
    """The tables file is wrong; the message names the file and the key."""


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
class MaintainedTable(Entry):
    table: str
    format: str
    # Job -> its options, in MAINTENANCE_JOBS order.
    jobs: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Migration(Entry):
    source: str
    target: str
    options: Mapping[str, Any]
    validate: bool


@dataclass(frozen=True)
class TablesFile:
    tables: tuple[MaintainedTable, ...] = ()
    migrations: tuple[Migration, ...] = ()


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
    _mapping(doc, where)
    _known(doc, {"submit", "defaults", "tables", "migrations"}, where)
    variables = {"home": str(home)}
    submit = _expand(_mapping(doc.get("submit") or {}, f"{where}: submit"), variables)
    _known(submit, SUBMIT_KEYS | TABLEKEEPER_SUBMIT_KEYS, f"{where}: submit")
    defaults = _expand(_mapping(doc.get("defaults") or {}, f"{where}: defaults"), variables)
    _known(defaults, DEFAULT_KEYS, f"{where}: defaults")

    def entries(kind: str, build: Callable[..., Any]) -> tuple[Any, ...]:
        return tuple(
            build(
                _expand(_mapping(entry, f"{where}: {kind}[{i}]"), variables),
                defaults,
                submit,
                home,
                f"{where}: {kind}[{i}]",
            )
            for i, entry in enumerate(_sequence(doc.get(kind) or [], f"{where}: {kind}"))
        )

    tables: tuple[MaintainedTable, ...] = entries("tables", _table)
    migrations: tuple[Migration, ...] = entries("migrations", _migration)
    for kind, names in (("tables", [t.name for t in tables]), ("migrations", [m.name for m in migrations])):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise TablesFileError(
                f"{where}: {kind} named {', '.join(twice)} more than once: set 'name' apart"
            )
    return TablesFile(tables=tables, migrations=migrations)


def option_args(options: Mapping[str, Any]) -> list[str]:
    """Job options as argv: ``key: value`` -> ``--key value``, ``true`` -> ``--key``, lists repeat."""
    args: list[str] = []
    for key, value in options.items():
        flag = f"--{key}"
        if value is True:
            args.append(flag)
        elif value is None or value is False:
            continue
        elif isinstance(value, list):
            for item in value:
                args += [flag, str(item)]
        else:
            args += [flag, str(value)]
    return args


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


def slug(text: str) -> str:
    """A DAG-id-safe form of a table name or path: ``db.events`` -> ``db_events``."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")


def _table(
    entry: dict[str, Any], defaults: Mapping[str, Any], submit: Mapping[str, Any], home: Path, where: str
) -> MaintainedTable:
    _known(entry, TABLE_KEYS, where)
    table = _required_str(entry, "table", where)
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
    merged = {**defaults, **entry}
    if fmt == "delta":
        merged["catalog"] = None  # a path, no catalog
    return MaintainedTable(
        **_entry(merged, str(entry.get("name") or slug(table)), submit, home, where),
        table=table,
        format=fmt,
        jobs=jobs,
    )


def _migration(
    entry: dict[str, Any], defaults: Mapping[str, Any], submit: Mapping[str, Any], home: Path, where: str
) -> Migration:
    _known(entry, MIGRATION_KEYS, where)
    # A migration runs when asked, or on its own schedule: never on the maintenance default one.
    inherited = {k: v for k, v in defaults.items() if k not in ("schedule", "jobs")}
    merged = {**inherited, **entry}
    options = _options(entry.get("options") or {}, f"{where}: options")
    validate = merged.get("validate", True)
    if not isinstance(validate, bool):
        raise TablesFileError(f"{where}: validate must be true or false")
    target = _required_str(entry, "target", where)
    return Migration(
        **_entry(merged, str(entry.get("name") or slug(target)), submit, home, where),
        source=_required_str(entry, "source", where),
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
        "catalog": _optional_str(merged, "catalog", where),
        "catalog_file": _optional_str(merged, "catalog_file", where),
        "schedule": _optional_str(merged, "schedule", where),
        "start_date": _start_date(merged.get("start_date"), where),
        "retries": _optional_int(merged, "retries", where),
        "pool": _optional_str(merged, "pool", where),
        "tags": tuple(str(t) for t in _sequence(merged.get("tags") or [], f"{where}: tags")),
        "submit": _submit(submit, merged.get("submit"), home, where),
    }


def _jobs(defaults: Any, own: Any, where: str) -> dict[str, Mapping[str, Any]]:
    """Per job, the table's options over the defaults'. ``job:`` alone runs it with no options;
    ``job: false`` drops it (a default job the table does not want)."""
    layers = (
        ("defaults.jobs", _mapping(defaults, f"{where}: defaults.jobs")),
        ("jobs", _mapping(own, f"{where}: jobs")),
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
                options.update(_options(value or {}, f"{where}: {name}.{job}"))
        jobs[job] = options
    return jobs


def _options(options: Any, where: str) -> dict[str, Any]:
    options = _mapping(options, where)
    for key, value in options.items():
        if not isinstance(key, str) or not _OPTION_NAME.match(key):
            raise TablesFileError(
                f"{where}: {key!r} is not an option name: write it as on the command line, "
                "without the dashes (older-than: 5d)"
            )
        if key in RESERVED_OPTIONS:
            raise TablesFileError(f"{where}: {key!r} is set by the DAG; use the table's own keys")
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, (dict, list)) for v in values):
            raise TablesFileError(f"{where}: {key} must be a value, a list of values or true/false")
    return options


def _submit(base: Mapping[str, Any], own: Any, home: Path, where: str) -> Submit:
    merged = dict(base)
    for key, value in _mapping(own or {}, f"{where}: submit").items():
        if key in MERGED_SUBMIT_KEYS and isinstance(value, dict):
            merged[key] = {**_mapping(merged.get(key) or {}, f"submit.{key}"), **value}
        else:
            merged[key] = value
    _known(merged, SUBMIT_KEYS | TABLEKEEPER_SUBMIT_KEYS, f"{where}: submit")
    for key in MERGED_SUBMIT_KEYS:
        merged[key] = {
            str(k): str(v) for k, v in _mapping(merged.get(key) or {}, f"{where}: submit.{key}").items()
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


def _start_date(value: Any, where: str) -> dt.datetime:
    if value is None:
        return DEFAULT_START
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise TablesFileError(f"{where}: start_date {value!r} is not a date (2024-01-01)") from None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.timezone.utc)
    raise TablesFileError(f"{where}: start_date {value!r} is not a date (2024-01-01)")


def _expand(value: Any, variables: Mapping[str, str]) -> Any:
    """``${home}`` in any string becomes the tablekeeper checkout (as ``${warehouse}`` in catalogs.yaml)."""
    if isinstance(value, str):
        return _VARIABLE.sub(lambda m: variables.get(m.group(1), m.group(0)), value)
    if isinstance(value, list):
        return [_expand(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, variables) for k, v in value.items()}
    return value


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TablesFileError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _sequence(value: Any, where: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise TablesFileError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _known(entry: Mapping[str, Any], keys: frozenset[str] | set[str], where: str) -> None:
    unknown = sorted(str(k) for k in entry if k not in keys)
    if unknown:
        raise TablesFileError(f"{where}: unknown key {', '.join(unknown)} (known: {', '.join(sorted(keys))})")


def _required_str(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise TablesFileError(f"{where}: '{key}' is required")
    return value


def _optional_str(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise TablesFileError(f"{where}: '{key}' must be a string")
    return value


def _optional_int(entry: Mapping[str, Any], key: str, where: str) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TablesFileError(f"{where}: '{key}' must be a whole number >= 0")
    return value
