"""The fleet DAG under `airflow dags test` on local Spark: health over a namespace of four tables
plans jobs only for the tables that need them, each table's jobs run in one mapped instance of the
table group (labelled with the table), a job health did not recommend there is skipped, the
healthy table gets no task, and a table with its own DAG in the tables file is left to it."""

from __future__ import annotations

from pathlib import Path

from tests.dags.conftest import DagTest, local_tables, mapped_task_states, xcom_results, xcoms
from tests.support.spark_submit import iceberg_table_of_small_files, live_data_files, sql_catalog

# fleet.big and fleet.mid need compaction (6 and 5 small files, compact.min-files defaults to 5),
# fleet.small does not; fleet.own would, but has its own maintenance DAG.
FILES = {"fleet.big": 6, "fleet.mid": 5, "fleet.small": 1, "fleet.own": 6}


def test_fleet_dag_runs_only_the_recommended_jobs_of_the_tables_that_need_work(
    tmp_path: Path, dags_test: DagTest, airflow_home: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    before = {name: iceberg_table_of_small_files(warehouse, name, files) for name, files in FILES.items()}
    tables = local_tables(
        tmp_path / "tables.yaml",
        warehouse,
        {"jobs": {"compact": {}}},
        tables=[{"table": "fleet.own"}],
        fleets=[
            {
                "namespace": "fleet",
                "pool": "default_pool",
                # Fresh snapshots: health recommends expiry nowhere, so each table's is skipped.
                "jobs": {"compact": {}, "expire-snapshots": {"older-than": "5d"}},
            }
        ],
    )
    dag_id = "tablekeeper_fleet__fleet"

    proc = dags_test(dag_id, tables)

    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    # health's order: most files removed first.
    assert mapped_task_states(airflow_home, dag_id) == {
        ("health", -1): ("success", None),
        ("plan", -1): ("success", None),
        ("table.compact", 0): ("success", "fleet.big"),
        ("table.compact", 1): ("success", "fleet.mid"),
        ("table.expire_snapshots", 0): ("skipped", "fleet.big"),
        ("table.expire_snapshots", 1): ("skipped", "fleet.mid"),
    }
    results = xcom_results(airflow_home, dag_id)
    ranked = [t["table"] for t in results["health"]["tables"]]
    assert ranked == ["fleet.big", "fleet.own", "fleet.mid", "fleet.small"]
    assert [t["table"] for t in results["plan"]] == ["fleet.big", "fleet.mid"]
    # No catalog in the file: the default one, as health used.
    assert results["plan"][0]["table_args"] == ["--table", "fleet.big"]
    compacted = {
        index: r
        for (task, index), r in xcoms(airflow_home, dag_id, "return_value").items()
        if task == "table.compact"
    }
    assert {i: (r["table"], r["metrics"]["rewritten_data_files_count"]) for i, r in compacted.items()} == {
        0: ("fleet.big", 6),
        1: ("fleet.mid", 5),
    }
    skipped = xcoms(airflow_home, dag_id, "skipped")
    assert sorted(s["table"] for s in skipped.values()) == ["fleet.big", "fleet.mid"]
    assert all(
        s["reason"].startswith("health: expire-snapshots not needed for fleet.") for s in skipped.values()
    )
    for line in ("fleet.small: nothing to do", "fleet.own: left to its own DAG in the tables file"):
        assert line in output, output[-5000:]

    catalog = sql_catalog(warehouse)
    files_after = {name: len(live_data_files(catalog.load_table(name))) for name in FILES}
    assert files_after == {"fleet.big": 1, "fleet.mid": 1, "fleet.small": 1, "fleet.own": 6}
    assert live_data_files(catalog.load_table("fleet.small")) == live_data_files(before["fleet.small"])


def test_a_fleet_whose_tables_need_nothing_runs_no_job_and_succeeds(
    tmp_path: Path, dags_test: DagTest, airflow_home: Path
) -> None:
    """The steady state: health plans nothing, the table group expands to no instance."""
    warehouse = tmp_path / "warehouse"
    iceberg_table_of_small_files(warehouse, "calm.one", 1)
    tables = local_tables(
        tmp_path / "tables.yaml",
        warehouse,
        {},
        fleets=[{"namespace": "calm", "pool": "default_pool", "jobs": {"compact": {}}}],
    )
    dag_id = "tablekeeper_fleet__calm"

    proc = dags_test(dag_id, tables)

    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    # No instance: Airflow marks the unexpanded task skipped, and the run succeeds.
    assert mapped_task_states(airflow_home, dag_id) == {
        ("health", -1): ("success", None),
        ("plan", -1): ("success", None),
        ("table.compact", -1): ("skipped", None),
    }
    assert xcom_results(airflow_home, dag_id)["plan"] == []
    assert "calm.one: nothing to do" in proc.stdout + proc.stderr
