"""The one contract every job follows, and what it runs with.

A job module ``jobs/<job>.py`` has:

- ``<Job>Options``: a frozen dataclass of its options, with ``from_args(args)`` building it from
  the parsed command line through ``options_from_args`` (``Options`` names it for the CLI);
- ``add_arguments(parser)``: its options on an argparse parser (the console subcommand and the
  spark-submit script share them);
- ``run(options, context) -> JobResult``: plan, execute, commit, result. Tables given as the path
  of a Delta table are handled there too.

``JobContext`` carries what every job needs beyond its options: the catalogs file and the way to
a Spark session, started only when a job asks for one (so a failure decided from metadata never
starts a JVM).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tablekeeper.catalog import Catalog, catalog_for, looks_like_path, resolve_table
from tablekeeper.catalog.config import DEFAULT_LEDGER_TABLE, CatalogsConfig
from tablekeeper.jobs.common.observe import Parent, parse_parent

_Options = TypeVar("_Options")

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import SparkSession

    from tablekeeper.jobs.common.formats import OnDelta
    from tablekeeper.jobs.common.result import JobResult


@dataclass(frozen=True)
class JobContext:
    catalogs: CatalogsConfig
    # Starts (or reuses) the session the jobs run on: spark-submit's, or a local one.
    spark: Callable[[], SparkSession]
    # The session already there (active, or prepared by spark-submit), without starting one.
    submitted: Callable[[], SparkSession | None]
    # The run's --ledger-catalog/--ledger-table (the catalog file's ledger block fills the rest):
    # health reads past runs from there for its estimates.
    ledger_catalog: str | None = None
    ledger_table: str | None = None

    def catalog(self, name: str | None) -> Catalog:
        return catalog_for(self.catalogs.get(name))

    def resolve(self, table: str, catalog: str | None) -> tuple[Catalog, str]:
        """``--table`` (an identifier or a path) and ``--catalog`` -> the catalog and identifier."""
        return resolve_table(table, catalog, self.catalogs)

    def quarantine(self, chosen: bool | None, table: str, catalog: str | None) -> bool:
        """Whether a destructive run moves its files aside: ``--[no-]quarantine``, else the
        catalog's ``quarantine:`` (a table path has no catalog: no)."""
        if chosen is not None:
            return chosen
        if looks_like_path(table):
            return False
        return self.catalogs.get(catalog).quarantine

    def session_for(self, engine: str) -> SparkSession | None:
        """spark: start or reuse a session; auto: only one that is already there; driver: none."""
        if engine == "spark":
            return self.spark()
        if engine == "auto":
            return self.submitted()
        return None


def delta_root(table: str) -> str | None:
    """The table's root when ``--table`` is the path of a Delta table."""
    from tablekeeper.jobs.common.delta_maintenance import is_delta_table

    if looks_like_path(table) and is_delta_table(table):
        return table.rstrip("/")
    return None


def options_from_args(
    cls: type[_Options], args: argparse.Namespace, *, internal: Collection[str] = (), **given: Any
) -> _Options:
    """A job's options from its parsed command line: each field from the argument of its name (the
    parser's declaration is the one place an option is described), ``given`` for the few the job
    converts itself, ``internal`` for fields no option sets (their defaults). A field with neither
    is a programming error here, not a default silently taken; lists become tuples (frozen)."""
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name in given:
            values[f.name] = given[f.name]
        elif f.name in internal:
            continue
        elif hasattr(args, f.name):
            value = getattr(args, f.name)
            values[f.name] = tuple(value) if isinstance(value, list) else value
        else:
            raise TypeError(f"{cls.__name__}.{f.name} has no command-line option and is not internal")
    return cls(**values)


class JobOptions(Protocol):
    @classmethod
    def from_args(cls, args: argparse.Namespace) -> JobOptions: ...


class JobModule(Protocol):
    """What the CLI finds in a job module (checked by the tests for every job)."""

    JOB: str
    Options: type[JobOptions]
    # Per option, how a Delta --table honours it (jobs.common.formats); None: Iceberg tables only, or
    # no --table at all (convert-delta, validate-conversion: formats fixed by role).
    DELTA_OPTIONS: Mapping[str, OnDelta] | None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, options: object, context: JobContext) -> JobResult: ...


def add_table_arguments(parser: argparse.ArgumentParser, *, flag: str = "--table") -> None:
    """The table and where its catalog is defined, as every job that works on one table takes them."""
    if flag == "--table":
        parser.add_argument(
            "--table", required=True, help="<namespace>.<table> in a catalog, or a table path"
        )
    parser.add_argument("--catalog", help="catalog name from the catalog file (default: its default)")
    parser.add_argument("--conf-file", help="catalog definitions (YAML); default conf/catalogs.yaml")
    parser.add_argument("--warehouse", help="local warehouse for ${warehouse} in the catalog file")


def add_quarantine_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quarantine",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="move what the run would delete into the table's quarantine instead (restore puts "
        "it back, purge deletes it); default: the catalog's 'quarantine:' setting, else no",
    )


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="plan and report; change nothing")
    parser.add_argument("--result-file", help="also write the JSON result to this file")
    add_ledger_arguments(parser)
    add_lineage_argument(parser)


def _parent(text: str) -> Parent:
    try:
        return parse_parent(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_lineage_argument(parser: argparse.ArgumentParser) -> None:
    """The run's OpenLineage parent (the Airflow DAGs pass their DAG run; docs/observability.md)."""
    parser.add_argument(
        "--lineage-parent",
        type=_parent,
        help="the OpenLineage parent run, <namespace>/<job name>/<run id>, of this run's events "
        "(default: OPENLINEAGE_PARENT_ID; used only when OpenLineage is configured)",
    )


def add_ledger_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the run's result is appended (the ledger of runs; also the catalog file's ``ledger:``)."""
    parser.add_argument(
        "--ledger-catalog",
        help="append the result to the ledger table in this catalog (default: the catalog file's "
        "ledger block; neither: no ledger)",
    )
    parser.add_argument(
        "--ledger-table",
        help=f"the ledger table (default: the catalog file's, else {DEFAULT_LEDGER_TABLE})",
    )


def add_engine_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "driver", "spark"],
        help="driver: this process, no Spark; spark: the executors; auto: the driver for tables "
        "reaching up to 200,000 files, else Spark (auto)",
    )


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of snapshot ids") from None
