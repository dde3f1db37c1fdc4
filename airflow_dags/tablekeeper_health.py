"""The health gate in plain Python (no Airflow import, so tests call it directly): which of a
table's jobs ``tablekeeper health`` decides, health's command line, whether a job runs given
health's JSON result, and which tables of a fleet get jobs.

A job runs when health recommended it, and also when health could not judge it (the table was
unreadable, the job's estimate failed, no result for the table): the gate only saves work, so it
never stops a job on missing evidence. It is skipped only on health's word that it is not needed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tablekeeper_tables import HEALTH_ASSESSED_JOBS, HealthGate, table_key

HEALTH_TASK = "health"
# Jobs whose health verdict needs more than the table's metadata; without the flag health never
# recommends them, so they run ungated.
NEEDS_LIST_FILES = "remove-orphans"  # on Iceberg: --list-files
NEEDS_V3_READINESS = "backfill-row-lineage"  # --v3-readiness
DELTA_ASSESSED_JOBS = ("compact", "expire-snapshots", "remove-orphans")

# What health measured for a job, worded for the reason a skipped task gives; keys are health's
# per-table metrics. (job, format) first, then (job, None).
_FACTS: dict[tuple[str, str | None], str] = {
    ("compact", None): "{small_files} of {data_files} data files are small (under {small_file_size} bytes)",
    ("expire-snapshots", "iceberg"): (
        "{expirable_snapshots} of {snapshots} snapshots are past the table's history.expire rules"
    ),
    ("expire-snapshots", "delta"): "{commits_since_checkpoint} commits since the last checkpoint",
    ("rewrite-manifests", None): "{data_manifests} data manifests",
    ("rewrite-position-deletes", None): "{position_delete_files} position delete files",
    ("rewrite-equality-deletes", None): "{equality_delete_files} equality delete files",
    ("remove-orphans", "iceberg"): "{orphan_files} orphan files past the orphan age",
    ("remove-orphans", "delta"): (
        "{tombstones_past_retention} removed files past the {deleted_file_retention} retention"
    ),
    ("backfill-row-lineage", None): "format version {format_version}",
}
# The threshold health holds each job's measure against (`--threshold` keys).
_THRESHOLDS: dict[tuple[str, str | None], str] = {
    ("compact", None): "compact.min-files",
    ("expire-snapshots", "iceberg"): "expire-snapshots.min-snapshots",
    ("expire-snapshots", "delta"): "delta.max-commits-since-checkpoint",
    ("rewrite-manifests", None): "rewrite-manifests.min-manifests",
    ("rewrite-position-deletes", None): "rewrite-position-deletes.min-files",
    ("rewrite-equality-deletes", None): "rewrite-equality-deletes.min-files",
    ("remove-orphans", None): "remove-orphans.min-files",
    ("backfill-row-lineage", None): "v3-readiness",
}
# The first word of health's note when it could not estimate a job ("<what> not estimated: ...").
_NOTE_NAMES = {"remove-orphans": "orphans"}


@dataclass(frozen=True)
class Verdict:
    run: bool
    message: str
    # health's recommendation of the job, when it made one.
    recommendation: Mapping[str, Any] | None = None


def gated_jobs(fmt: str | None, jobs: Collection[str], gate: HealthGate) -> frozenset[str]:
    """The jobs of ``jobs`` that run only on health's recommendation. ``fmt`` None: a fleet's mix
    of Iceberg and Delta tables, where remove-orphans is always assessed (health lists files)."""
    assessed: Collection[str] = HEALTH_ASSESSED_JOBS
    if fmt == "delta":
        assessed = DELTA_ASSESSED_JOBS
    elif fmt is not None and not gate.list_files:
        assessed = [j for j in HEALTH_ASSESSED_JOBS if j != NEEDS_LIST_FILES]
    return frozenset(j for j in jobs if j in assessed and j not in gate.always_run)


def health_args(fmt: str | None, gated: Collection[str], thresholds: Mapping[str, str]) -> list[str]:
    """health's options for judging ``gated``: file listing and v3 readiness only when a gated job
    needs them (listing a table is what remove-orphans costs)."""
    args: list[str] = []
    if NEEDS_LIST_FILES in gated and fmt != "delta":
        args.append("--list-files")
    if NEEDS_V3_READINESS in gated:
        args.append("--v3-readiness")
    for key, value in thresholds.items():
        args += ["--threshold", f"{key}={value}"]
    return args


def report_args(report_dir: str | None, fleet: str) -> list[str]:
    """health's ``--html`` for a fleet's run: one report per run, named by the run's logical time
    (rendered by the operator), under the fleet's own directory; none without a report_dir."""
    if not report_dir:
        return []
    return ["--html", f"{report_dir.rstrip('/')}/{fleet}/{{{{ ts_nodash }}}}.html"]


def table_entry(health: Any, table: str) -> Mapping[str, Any] | None:
    """health's entry for ``table``: by name, else the only entry of a one-table result (which
    names a Delta table by its normalized location)."""
    entries = [e for e in (health or {}).get("tables") or [] if isinstance(e, Mapping)]
    for entry in entries:
        if table_key(str(entry.get("table"))) == table_key(table):
            return entry
    if len(entries) == 1 and (health or {}).get("table") == table:
        return entries[0]
    return None


def verdict(health: Any, job: str, table: str) -> Verdict:
    """Whether ``job`` runs on ``table`` given health's result, and the line that says why."""
    entry = table_entry(health, table)
    if entry is None:
        return Verdict(True, f"health has no result for {table}: {job} runs")
    if entry.get("error"):
        return Verdict(True, f"health could not read {table} ({entry['error']}): {job} runs")
    for recommendation in entry.get("recommendations") or []:
        if recommendation.get("job") == job:
            expected = ", ".join(f"{k} {v}" for k, v in (recommendation.get("expected") or {}).items())
            return Verdict(
                True,
                f"health recommends {job} for {table}: {recommendation.get('reason')} "
                f"({recommendation.get('threshold')}); expected: {expected or 'n/a'}",
                recommendation,
            )
    fmt = str(entry.get("format") or "iceberg")
    note = _not_estimated(entry, job)
    if note is not None:
        return Verdict(True, f"health could not estimate {job} for {table} ({note}): it runs")
    facts = _lookup(_FACTS, job, fmt)
    metrics = _Metrics(entry.get("metrics") or {})
    measured = facts.format_map(metrics) if facts else "no measure of it"
    return Verdict(
        False,
        f"health: {job} not needed for {table}: {measured} ({_threshold(entry, job, fmt)})",
    )


def fleet_plan(
    health: Any,
    jobs: Collection[str],
    exclude: Collection[str],
    catalog: str | None,
    catalog_file: str | None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The tables of a fleet's health result that get job tasks, in health's order, each as the
    keyword arguments of the fleet's table group (``table``, ``table_args``: how a job names it,
    ``compact_args``: the sort health's layout check asks of compact, if any);
    and one line per table saying what it gets or why nothing."""
    planned: list[dict[str, Any]] = []
    lines: list[str] = []
    claimed = {table_key(t) for t in exclude}
    for entry in (health or {}).get("tables") or []:
        name = str(entry.get("table"))
        recommended = [str(r.get("job")) for r in entry.get("recommendations") or []]
        wanted = [j for j in jobs if j in recommended]  # the fleet's (chain) order
        if table_key(name) in claimed:
            lines.append(f"{name}: left to its own DAG in the tables file")
        elif entry.get("error"):
            lines.append(f"{name}: unreadable, no jobs: {entry['error']}")
        elif not recommended:
            lines.append(f"{name}: nothing to do")
        elif not wanted:
            lines.append(f"{name}: health recommends {', '.join(recommended)}, which this fleet does not run")
        else:
            args = ["--table", name]
            if catalog and entry.get("format") != "delta":
                args += ["--catalog", catalog]
            if catalog_file:
                args += ["--conf-file", catalog_file]
            planned.append({"table": name, "table_args": args, "compact_args": compact_args(entry)})
            lines.append(f"{name}: {', '.join(wanted)}")
    return planned, lines


def compact_args(entry: Any) -> list[str]:
    """The options health's compact advice names for this table when it is a layout's: a sort or
    Z-order rewrite (``--strategy sort``, ``--rewrite-all``, ``--sort-order``), which a bin-pack
    with the fleet's options would not do. The fleet's own compact options come after, so an
    explicit choice there still wins."""
    for r in (entry or {}).get("recommendations") or []:
        expected = r.get("expected") or {}
        if r.get("job") != "compact" or expected.get("strategy") != "sort":
            continue
        args = ["--strategy", "sort"]
        if expected.get("rewrite_all"):
            args.append("--rewrite-all")
        if expected.get("sort_order"):
            args += ["--sort-order", str(expected["sort_order"])]
        return args
    return []


def describe(health: Any) -> list[str]:
    """health's findings as log lines: each table's recommendations with reason and effect."""
    lines: list[str] = []
    for entry in (health or {}).get("tables") or []:
        name = entry.get("table")
        if entry.get("error"):
            lines.append(f"{name}: unreadable: {entry['error']}")
            continue
        recommendations = entry.get("recommendations") or []
        if not recommendations:
            lines.append(f"{name}: no job recommended")
        for r in recommendations:
            expected = ", ".join(f"{k} {v}" for k, v in (r.get("expected") or {}).items())
            lines.append(f"{name}: {r.get('job')}: {r.get('reason')} ({r.get('threshold')}) -> {expected}")
    return lines


def flatten(args: Iterable[Any]) -> list[Any]:
    """Arguments with any list among them spliced in: a fleet's job gets its table's arguments as
    one list (the table group's mapped argument) before its own options."""
    out: list[Any] = []
    for arg in args:
        if isinstance(arg, (list, tuple)):
            out.extend(arg)
        else:
            out.append(arg)
    return out


class _Metrics(dict[str, Any]):
    """A metric health did not report reads as "?" instead of failing the reason."""

    def __missing__(self, key: str) -> str:
        return "?"


def _lookup(table: Mapping[tuple[str, str | None], str], job: str, fmt: str) -> str | None:
    return table.get((job, fmt)) or table.get((job, None))


def _threshold(entry: Mapping[str, Any], job: str, fmt: str) -> str:
    key = _lookup(_THRESHOLDS, job, fmt)
    if key is None:
        return "not recommended"
    # health reports the thresholds it applied when it does; else only the key is known here.
    value = (entry.get("thresholds") or {}).get(key)
    return f"{key}={value}" if value is not None else f"threshold {key}"


def _not_estimated(entry: Mapping[str, Any], job: str) -> str | None:
    prefix = f"{_NOTE_NAMES.get(job, job)} not estimated"
    notes: Sequence[Any] = (entry.get("metrics") or {}).get("notes") or []
    return next((str(n) for n in notes if str(n).startswith(prefix)), None)
