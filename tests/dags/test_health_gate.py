"""The health gate's decisions and the tables file's health and fleet sections, in plain Python (the
DAG folder's helpers import no Airflow): which jobs are gated and with which health options, why a
job runs or is skipped, which tables of a fleet get jobs, and what a wrong section says."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.dags.conftest import DAGS_FOLDER, write_tables
from tests.support.spark_submit import REPO_ROOT


@pytest.fixture(scope="module")
def gate() -> ModuleType:
    if str(DAGS_FOLDER) not in sys.path:
        sys.path.append(str(DAGS_FOLDER))  # as Airflow imports them: beside the DAG files
    import tablekeeper_health

    return tablekeeper_health


@pytest.fixture(scope="module")
def tables_module(gate: ModuleType) -> ModuleType:
    import tablekeeper_tables

    return tablekeeper_tables


def entry(**fields: Any) -> dict[str, Any]:
    base = {"table": "db.t", "format": "iceberg", "metrics": {}, "recommendations": []}
    return {**base, **fields}


def health(*entries: dict[str, Any], table: str = "db.t") -> dict[str, Any]:
    return {"job": "health", "table": table, "status": "ok", "tables": list(entries)}


COMPACT = {
    "job": "compact",
    "reason": "12 of 12 data files are below 402653184 bytes",
    "threshold": "compact.min-files=5",
    "expected": {"data_files_before": 12, "data_files_after": 1},
}
LAYOUT = {
    "job": "compact",
    "reason": "a point lookup on a opens 6.0 data files of its partition on average",
    "threshold": "compact.max-files-per-lookup=2",
    "expected": {"strategy": "sort", "rewrite_all": True, "sort_order": "zorder(a, b)"},
}


def test_gated_jobs_and_healths_options(gate: ModuleType, tables_module: ModuleType) -> None:
    hg = tables_module.HealthGate
    everything = tables_module.MAINTENANCE_JOBS
    # Iceberg: remove-orphans only with list_files; compute-stats never; always_run never.
    assert gate.gated_jobs("iceberg", everything, hg()) == frozenset(
        {
            "compact",
            "rewrite-equality-deletes",
            "rewrite-position-deletes",
            "rewrite-manifests",
            "expire-snapshots",
            "backfill-row-lineage",
        }
    )
    listed = gate.gated_jobs("iceberg", everything, hg(list_files=True, always_run=("compact",)))
    assert "remove-orphans" in listed and "compact" not in listed
    assert gate.gated_jobs("delta", ["compact", "remove-orphans"], hg()) == {"compact", "remove-orphans"}
    # A fleet (no single format): remove-orphans is judged by listing.
    assert gate.gated_jobs(None, ["remove-orphans"], hg()) == {"remove-orphans"}

    assert gate.health_args(
        "iceberg", {"remove-orphans", "backfill-row-lineage"}, {"compact.min-files": "10"}
    ) == [
        "--list-files",
        "--v3-readiness",
        "--threshold",
        "compact.min-files=10",
    ]
    assert gate.health_args("delta", {"remove-orphans"}, {}) == []  # Delta: tombstones from the log


def test_a_recommended_job_runs_with_healths_reason_and_effect(gate: ModuleType) -> None:
    verdict = gate.verdict(health(entry(recommendations=[COMPACT])), "compact", "db.t")
    assert verdict.run
    assert verdict.recommendation == COMPACT
    assert verdict.message == (
        "health recommends compact for db.t: 12 of 12 data files are below 402653184 bytes "
        "(compact.min-files=5); expected: data_files_before 12, data_files_after 1"
    )


def test_a_job_health_did_not_recommend_is_skipped_with_healths_measure(gate: ModuleType) -> None:
    metrics = {"small_files": 0, "data_files": 1, "small_file_size": 402653184}
    result = health(entry(metrics=metrics, recommendations=[COMPACT | {"job": "rewrite-manifests"}]))
    verdict = gate.verdict(result, "compact", "db.t")
    assert not verdict.run
    assert verdict.message == (
        "health: compact not needed for db.t: 0 of 1 data files are small (under 402653184 bytes) "
        "(threshold compact.min-files)"
    )
    # With the thresholds health applied in its result, their values; a missing metric reads "?".
    with_thresholds = health(entry(metrics=metrics, thresholds={"expire-snapshots.min-snapshots": 1}))
    assert gate.verdict(with_thresholds, "expire-snapshots", "db.t").message == (
        "health: expire-snapshots not needed for db.t: ? of ? snapshots are past the table's "
        "history.expire rules (expire-snapshots.min-snapshots=1)"
    )
    delta = health(entry(table="/d/t", format="delta", metrics={"commits_since_checkpoint": 3}), table="/d/t")
    assert gate.verdict(delta, "expire-snapshots", "/d/t").message == (
        "health: expire-snapshots not needed for /d/t: 3 commits since the last checkpoint "
        "(threshold delta.max-commits-since-checkpoint)"
    )


def test_a_job_health_could_not_judge_runs(gate: ModuleType) -> None:
    noted = entry(metrics={"notes": ["expire-snapshots not estimated: gc.enabled is false"]})
    assert gate.verdict(health(noted), "expire-snapshots", "db.t").run
    assert gate.verdict(health(noted), "compact", "db.t").run is False
    assert gate.verdict(health(entry(error="corrupt manifest")), "compact", "db.t").run
    assert gate.verdict(None, "compact", "db.t").message == "health has no result for db.t: compact runs"
    assert gate.verdict(health(entry(table="db.other"), table="db.x"), "compact", "db.t").run


def test_a_one_table_result_names_a_delta_table_by_its_location(gate: ModuleType) -> None:
    result = health(entry(table="file:///data/delta/t", format="delta"), table="/data/delta/t/")
    assert gate.table_entry(result, "/data/delta/t/")["format"] == "delta"
    # By name in a fleet's result: file: and a trailing slash do not matter.
    fleet = health(entry(table="db.a"), entry(table="file:/w/d/"), table="local.db")
    assert gate.table_entry(fleet, "/w/d")["table"] == "file:/w/d/"
    assert gate.table_entry(fleet, "db.b") is None


def test_fleet_plan_keeps_healths_order_and_says_why_a_table_gets_nothing(gate: ModuleType) -> None:
    result = health(
        entry(table="db.big", recommendations=[{"job": "expire-snapshots"}, COMPACT]),
        entry(table="db.owned", recommendations=[COMPACT]),
        entry(table="db.manifests", recommendations=[{"job": "rewrite-manifests"}]),
        entry(table="/w/db/d", format="delta", recommendations=[COMPACT]),
        entry(table="db.sorted", recommendations=[LAYOUT]),
        entry(table="db.broken", error="corrupt"),
        entry(table="db.fine"),
        table="local.db",
    )
    planned, lines = gate.fleet_plan(
        result, ["compact", "expire-snapshots"], ["db.owned"], "local", "/c/catalogs.yaml"
    )
    assert planned == [
        {
            "table": "db.big",
            "table_args": ["--table", "db.big", "--catalog", "local", "--conf-file", "/c/catalogs.yaml"],
            "compact_args": [],
        },
        {
            "table": "/w/db/d",
            "table_args": ["--table", "/w/db/d", "--conf-file", "/c/catalogs.yaml"],
            "compact_args": [],
        },
        {
            # health's layout check asked compact for a sort of every file: the fleet's compact
            # gets those options before its own.
            "table": "db.sorted",
            "table_args": ["--table", "db.sorted", "--catalog", "local", "--conf-file", "/c/catalogs.yaml"],
            "compact_args": ["--strategy", "sort", "--rewrite-all", "--sort-order", "zorder(a, b)"],
        },
    ]
    assert lines == [
        "db.big: compact, expire-snapshots",  # the chain's order, not health's
        "db.owned: left to its own DAG in the tables file",
        "db.manifests: health recommends rewrite-manifests, which this fleet does not run",
        "/w/db/d: compact",
        "db.sorted: compact",
        "db.broken: unreadable, no jobs: corrupt",
        "db.fine: nothing to do",
    ]


def test_describe_lists_each_tables_recommendations(gate: ModuleType) -> None:
    result = health(
        entry(recommendations=[COMPACT]), entry(table="db.fine"), entry(table="db.x", error="gone")
    )
    assert gate.describe(result) == [
        "db.t: compact: 12 of 12 data files are below 402653184 bytes (compact.min-files=5) -> "
        "data_files_before 12, data_files_after 1",
        "db.fine: no job recommended",
        "db.x: unreadable: gone",
    ]
    assert gate.flatten([["--table", "db.t"], "--where", "x"]) == ["--table", "db.t", "--where", "x"]


def test_tables_file_health_merges_over_the_defaults_and_fleets_leave_claimed_tables(
    tables_module: ModuleType, tmp_path: Path
) -> None:
    doc = {
        "defaults": {
            "catalog": "local",
            "jobs": {"compact": {}},
            "health": {"thresholds": {"compact.min-files": 10, "v3-readiness": True}, "list_files": True},
        },
        "tables": [
            {"table": "db.a", "health": {"thresholds": {"compact.min-files": 3}, "always_run": ["compact"]}},
            {"table": "db.b", "health": False},
            {"table": "db.c", "catalog": "files"},
            {"table": "/d/sessions/", "format": "delta"},
        ],
        "migrations": [{"source": "/d/orders", "target": "db.orders"}],
        "fleets": [
            {"namespace": "db", "pool": "p", "jobs": {"compact": {}}, "health": {"thresholds": {"x.y": 1}}}
        ],
    }
    loaded = tables_module.load_tables(write_tables(tmp_path / "t.yaml", doc), home=REPO_ROOT)
    a, b, c, _ = loaded.tables
    assert a.health == tables_module.HealthGate(
        enabled=True,
        thresholds={"compact.min-files": "3", "v3-readiness": "true"},
        list_files=True,
        always_run=("compact",),
    )
    assert b.health.enabled is False
    assert c.health.thresholds == {"compact.min-files": "10", "v3-readiness": "true"}
    [fleet] = loaded.fleets
    assert (fleet.name, fleet.catalog, fleet.pool, fleet.limit) == ("db", "local", "p", None)
    # The defaults' thresholds, the fleet's over them; never the defaults' jobs.
    assert fleet.thresholds == {"compact.min-files": "10", "v3-readiness": "true", "x.y": "1"}
    # Tables of its catalog with their own DAG, migration targets, and every Delta table by path.
    assert fleet.exclude == ("/d/sessions", "db.a", "db.b", "db.orders")


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"tables": [{"table": "db.t", "jobs": {"compact": {}}, "health": "yes"}]}, "expected a mapping"),
        (
            {"tables": [{"table": "db.t", "jobs": {"compact": {}}, "health": {"enabled": "no"}}]},
            "health.enabled must be true or false",
        ),
        (
            {"tables": [{"table": "db.t", "jobs": {"compact": {}}, "health": {"always_run": ["vacuum"]}}]},
            "health.always_run: unknown job 'vacuum'",
        ),
        (
            {"tables": [{"table": "db.t", "jobs": {"compact": {}}, "health": {"thresholds": {"--x": 1}}}]},
            "is not a threshold name",
        ),
        ({"fleets": [{"pool": "p", "jobs": {"compact": {}}}]}, "'namespace' is required"),
        ({"fleets": [{"namespace": "db", "pool": "p"}]}, "no jobs"),
        ({"fleets": [{"namespace": "db", "pool": "p", "limit": 0, "jobs": {"compact": {}}}]}, "at least 1"),
        (
            {"fleets": [{"namespace": "db", "pool": "p", "health": False, "jobs": {"compact": {}}}]},
            "may only set thresholds",
        ),
        (
            {
                "fleets": [
                    {"namespace": "db", "pool": "p", "health": {"list_files": True}, "jobs": {"compact": {}}}
                ]
            },
            "unknown key list_files",
        ),
        (
            {
                "fleets": [
                    {"namespace": "db", "pool": "p", "jobs": {"compact": {}}},
                    {"namespace": "db", "pool": "p", "jobs": {"compact": {}}},
                ]
            },
            "fleets named db more than once",
        ),
        (
            {
                "fleets": [
                    {"namespace": "db", "pool": "p", "jobs": {"compact": {}}},
                    {"namespace": "db", "name": "db_e", "tables": "e*", "pool": "p", "jobs": {"compact": {}}},
                ]
            },
            "fleets db, db_e both maintain namespace db",
        ),
    ],
)
def test_a_wrong_health_or_fleet_section_names_the_mistake(
    tables_module: ModuleType, tmp_path: Path, section: dict[str, Any], message: str
) -> None:
    path = write_tables(tmp_path / "t.yaml", section)
    with pytest.raises(tables_module.TablesFileError, match=message.replace("(", r"\(")):
        tables_module.load_tables(path, home=REPO_ROOT)


def test_a_fleet_with_a_report_dir_gets_one_html_report_per_run(
    gate: ModuleType, tables_module: ModuleType, tmp_path: Path
) -> None:
    assert gate.report_args(None, "analytics") == []
    assert gate.report_args("s3://b/reports/", "analytics") == [
        "--html",
        "s3://b/reports/analytics/{{ ts_nodash }}.html",
    ]
    doc = {"fleets": [{"namespace": "db", "pool": "p", "jobs": {"compact": {}}, "report_dir": "/r"}]}
    (fleet,) = tables_module.load_tables(write_tables(tmp_path / "t.yaml", doc), home=REPO_ROOT).fleets
    assert (fleet.name, fleet.report_dir) == ("db", "/r")
