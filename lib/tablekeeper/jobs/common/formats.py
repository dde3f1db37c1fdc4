"""Which of a job's options it honours on a Delta table, declared by the job, checked before it runs.

A job whose ``--table`` may be the path of a Delta table runs it through delta-spark (OPTIMIZE,
VACUUM, a checkpoint and log cleanup), which has settings for some of its options and none for
others. Each such job declares, for every option it takes, how Delta honours it or the fix when
it cannot; the command line refuses an option given explicitly that a Delta table cannot honour
(exit 2, naming the option) before anything reads or changes the table. A job that takes only
Iceberg tables declares ``DELTA_OPTIONS = None`` and refuses a Delta table whole. Iceberg tables
honour every option (that is each job's own path).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tablekeeper.errors import ConfigError


@dataclass(frozen=True)
class OnDelta:
    """One option on a Delta table: honoured (``how``: the setting that takes it) or refused
    (``fix``: what to do instead)."""

    how: str = ""
    fix: str = ""

    def __post_init__(self) -> None:
        if bool(self.how) == bool(self.fix):
            raise ValueError("an option on Delta is either honoured (how) or refused (fix)")

    @property
    def honoured(self) -> bool:
        return bool(self.how)


def honoured(how: str) -> OnDelta:
    return OnDelta(how=how)


def refused(fix: str) -> OnDelta:
    return OnDelta(fix=fix)


# Options every job shares (jobs.common.context's add_table_arguments, add_run_arguments, ledger):
# the command line itself uses them whatever the format.
COMMON: Mapping[str, OnDelta] = MappingProxyType(
    {
        "table": honoured("the Delta table's path"),
        "catalog": honoured("its storage settings reach the table's files"),
        "conf_file": honoured("where the catalog (and its storage settings) is defined"),
        "warehouse": honoured("${warehouse} in the catalog file"),
        "dry_run": honoured("planned, nothing changed"),
        "result_file": honoured("the JSON result is written there"),
        "ledger_catalog": honoured("the result is appended to the ledger"),
        "ledger_table": honoured("the result is appended to the ledger"),
        "lineage_parent": honoured("the run's OpenLineage events name it as their parent"),
    }
)


def delta_options(own: Mapping[str, OnDelta], *, without: Collection[str] = ()) -> Mapping[str, OnDelta]:
    """A job's declaration: the shared options (but those it does not take) and its own."""
    return MappingProxyType({**{k: v for k, v in COMMON.items() if k not in without}, **own})


def check_delta_options(
    job: str, table: str, declared: Mapping[str, OnDelta] | None, given: Collection[str]
) -> None:
    """Refuse (exit 2) what a Delta table cannot honour: the job itself when it takes only
    Iceberg tables, else the first explicitly ``given`` option (by dest) Delta refuses."""
    if declared is None:
        raise ConfigError(
            f"{job} works on Iceberg tables and {table} is a Delta table: convert it with "
            "convert-delta first, or run compact, expire-snapshots, remove-orphans or health on it"
        )
    for dest in sorted(given):
        use = declared.get(dest)
        if use is None:  # a job's declaration misses an option: fail closed, never ignore it
            raise ConfigError(f"{job}: {_flag(dest)} is not declared for Delta tables: not used on {table}")
        if not use.honoured:
            raise ConfigError(f"{job}: {_flag(dest)} does not apply to Delta table {table}: {use.fix}")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")
