"""The DAG folder as Airflow 3 loads it (probed inside .airflow-venv): every file imports without
errors or deprecation warnings, the task graphs and templated arguments are what the tables file
says (the health gate's task, trigger rules and options; a fleet's health, plan and mapped table
group), every job's arguments are ones tablekeeper's own parser accepts, and a wrong tables file is
an import error naming the mistake. No Spark here."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.cli import JOBS, _job_module, build_parser, given_options
from tablekeeper.jobs.common.formats import check_delta_options
from tablekeeper.spark.session import packages_arg
from tests.dags.conftest import AIRFLOW_PYTHON, DAGS_FOLDER, airflow_env, write_tables
from tests.support.spark_submit import REPO_ROOT

EXAMPLE = REPO_ROOT / "conf" / "tables.example.yaml"
PROBE = Path(__file__).resolve().parent / "airflow_probe.py"
DS = "2026-01-02"  # the probe's logical date
CONVERT_XCOM = {"job": "convert-delta", "metrics": {"delta_version": 4, "snapshot_id": 77}, "status": "ok"}
CHAIN = [
    "compact",
    "rewrite_position_deletes",
    "rewrite_manifests",
    "expire_snapshots",
    "remove_orphans",
    "backfill_row_lineage",
    "compute_stats",
]

TEMPLATED = {
    "submit": {"conn_id": "spark_cluster", "conf": {"spark.executor.cores": "2"}, "results_dir": "/shared/r"},
    "defaults": {
        "catalog": "files",
        "schedule": "@daily",
        "retries": 2,
        "jobs": {"compact": {"min-input-files": 3}, "expire-snapshots": {"older-than": "5d"}},
        "health": {"thresholds": {"compact.min-files": 3}},
    },
    "tables": [
        {
            "table": "db.t",
            "catalog_file": "${home}/conf/catalogs.yaml",
            "pool": "tk_db_t",
            "jobs": {
                "compact": {"where": "day >= '{{ ds }}'", "rewrite-all": True, "partial-progress": False},
                "expire-snapshots": False,
                "backfill-row-lineage": {"branch": ["audit", "dev"]},
            },
            "health": {
                "always_run": ["backfill-row-lineage"],
                "thresholds": {"rewrite-manifests.min-manifests": 50},
            },
            "submit": {"conf": {"spark.executor.memory": "8g"}, "deploy_mode": "cluster"},
        }
    ],
    "migrations": [{"source": "/d/orders", "target": "db.orders", "validate": False, "tags": ["once"]}],
    "fleets": [
        {
            "namespace": "sales",
            "name": "sales_nightly",
            "tables": "o*",
            "limit": 5,
            "pool": "tk_fleet",
            "health": {"thresholds": {"expire-snapshots.min-snapshots": 2}},
            "jobs": {"remove-orphans": {"older-than": "7d"}, "compact": {"target-file-size": "64MB"}},
            "submit": {"executor_memory": "8g", "deploy_mode": "client"},
        }
    ],
}
BAD = {
    "typo": ({"tables": [{"table": "db.t", "schedul": "@daily"}]}, "unknown key schedul"),
    "job": ({"tables": [{"table": "db.t", "jobs": {"vacuum": {}}}]}, "unknown job 'vacuum'"),
    "reserved": (
        {"tables": [{"table": "db.t", "jobs": {"compact": {"table": "x"}}}]},
        "'table' is set by the DAG",
    ),
    "dashes": (
        {"tables": [{"table": "db.t", "jobs": {"compact": {"--where": "x"}}}]},
        "is not an option name",
    ),
    # Another job's option: the job would refuse it at run time; the DAG file refuses it now.
    "option": (
        {"tables": [{"table": "db.t", "jobs": {"compact": {"older-than": "5d"}}}]},
        "compact has no option 'older-than'",
    ),
    "cluster": (
        {"submit": {"deploy_mode": "cluster"}, "tables": [{"table": "db.t", "jobs": {"compact": {}}}]},
        "deploy_mode cluster needs submit.results_dir",
    ),
    "delta": (
        {"tables": [{"table": "db.t", "format": "delta", "jobs": {"compact": {}}}]},
        "named by its path",
    ),
    "health": (
        {"tables": [{"table": "db.t", "jobs": {"compact": {}}, "health": {"list-files": True}}]},
        "unknown key list-files",
    ),
    "fleet-pool": ({"fleets": [{"namespace": "db", "jobs": {"compact": {}}}]}, "a fleet needs a pool"),
    "fleet-job": (
        {"fleets": [{"namespace": "db", "pool": "p", "jobs": {"compute-stats": {}}}]},
        "health never recommends compute-stats",
    ),
}


@pytest.fixture(scope="module")
def probed(airflow: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One Airflow process probing the example, the templated file and every bad file."""
    tmp = tmp_path_factory.mktemp("probe")
    files = {"example": EXAMPLE, "templated": write_tables(tmp / "templated.yaml", TEMPLATED)}
    files |= {name: write_tables(tmp / f"bad-{name}.yaml", doc) for name, (doc, _) in BAD.items()}
    out = tmp / "probe.json"
    proc = subprocess.run(
        [str(AIRFLOW_PYTHON), str(PROBE), str(out), *(str(f) for f in files.values())],
        env=airflow_env(tmp / "airflow-home", EXAMPLE),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    by_path = json.loads(out.read_text())
    return {name: by_path[str(path)] for name, path in files.items()}


def test_every_dag_file_imports_cleanly(probed: dict[str, Any]) -> None:
    example = probed["example"]
    py_files = sorted(p.name for p in DAGS_FOLDER.glob("*.py"))
    assert sorted(example["files"]) == py_files
    # No error and no warning at all, deprecated imports (DeprecatedImportWarning) included.
    assert example["files"] == {name: {"warnings": [], "error": None} for name in py_files}
    assert example["import_errors"] == {}
    assert example["captured_warnings"] == {}


def test_example_tables_file_makes_a_dag_per_table_migration_and_fleet(probed: dict[str, Any]) -> None:
    dags = probed["example"]["dags"]
    assert sorted(dags) == [
        "tablekeeper_delta_migration__db_orders",
        "tablekeeper_fleet__analytics",
        "tablekeeper_maintenance__db_clicks",
        "tablekeeper_maintenance__db_events",
        "tablekeeper_maintenance__delta_sessions",
    ]
    events = dags["tablekeeper_maintenance__db_events"]
    assert (events["schedule"], events["max_active_runs"], events["catchup"]) == ("0 2 * * *", 1, False)
    assert events["fileloc"] == "maintenance.py"
    tasks = events["tasks"]
    # health first, then one job after the other, never two on the table at once.
    gated_chain = ["health", *CHAIN]
    assert [(t, tasks[t]["upstream"]) for t in gated_chain] == [
        (t, [gated_chain[i - 1]] if i else []) for i, t in enumerate(gated_chain)
    ]
    # A skipped job lets the next one run; a failed one (health's too) stops the chain.
    assert {t: tasks[t]["trigger_rule"] for t in gated_chain} == {
        "health": "all_success",
        **dict.fromkeys(CHAIN, "none_failed"),
    }
    # Gated: every job health judges (remove-orphans too, with list_files); compute-stats always runs.
    assert {t: tasks[t]["health_task_id"] for t in CHAIN} == {
        **dict.fromkeys(CHAIN, "health"),
        "compute_stats": None,
    }
    assert tasks["health"]["job"] == "health"
    assert tasks["health"]["args"] == [
        "--table", "db.events", "--catalog", "local",
        "--list-files", "--v3-readiness", "--threshold", "compact.min-files=10",
    ]  # fmt: skip
    for task_id, task in tasks.items():
        assert task["classes"][:2] == ["TablekeeperJobOperator", "SparkSubmitOperator"]
        assert task["pool"] == "tablekeeper_db_events"
        assert task["retries"] == 1
        assert task["application"] == str(REPO_ROOT / "jobs" / f"{task_id}.py")
        assert Path(task["application"]).is_file()
        # The jars are conf/jars.txt's runtime coordinates, the ones `tablekeeper doctor` prints.
        assert task["packages"] == packages_arg()
        assert task["py_files"] == str(REPO_ROOT / "dist" / "tablekeeper.zip")
        assert task["conf"]["spark.jars.ivySettings"] == str(REPO_ROOT / "conf" / "ivysettings.xml")
        assert task["conf"]["spark.sql.extensions"] == (
            "io.delta.sql.DeltaSparkSessionExtension,org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
        )
        assert task["env_vars"] == {"TABLEKEEPER_WAREHOUSE": "/data/warehouse"}
        assert (task["conn_id"], task["spark_binary"]) == ("spark_default", "spark-submit")
        assert "application_args" in task["template_fields"]
    assert tasks["compact"]["args"] == [
        "--table", "db.events", "--catalog", "local",
        "--strategy", "sort", "--sort-order", "event_date ASC, user_id ASC", "--target-file-size", "256MB",
    ]  # fmt: skip
    assert tasks["expire_snapshots"]["args"] == [
        "--table", "db.events", "--catalog", "local", "--older-than", "5d", "--retain-last", "10",
    ]  # fmt: skip

    clicks = dags["tablekeeper_maintenance__db_clicks"]["tasks"]
    # remove-orphans: false; health: false, so no health task and today's all_success chain.
    assert sorted(clicks) == ["compact", "expire_snapshots"]
    assert {(t["trigger_rule"], t["health_task_id"]) for t in clicks.values()} == {("all_success", None)}
    assert clicks["compact"]["raw_args"][-1] == "event_date >= date_sub('{{ ds }}', 7)"
    assert clicks["compact"]["args"][-2:] == ["--where", f"event_date >= date_sub('{DS}', 7)"]
    assert clicks["compact"]["executor_memory"] == "4g"
    assert clicks["compact"]["pool"] == "default_pool"

    sessions = dags["tablekeeper_maintenance__delta_sessions"]
    assert "delta" in sessions["tags"]
    # On Delta health reads the tombstones from the log: VACUUM is gated without a listing.
    assert sessions["tasks"]["health"]["args"] == ["--table", "/data/delta/sessions"]
    assert {t: task["health_task_id"] for t, task in sessions["tasks"].items()} == {
        "health": None,
        "compact": "health",
        "expire_snapshots": "health",
        "remove_orphans": "health",
    }
    assert sessions["tasks"]["remove_orphans"]["args"] == [
        "--table",
        "/data/delta/sessions",
        "--older-than",
        "7d",
    ]


def test_example_fleet_ranks_by_health_then_maps_a_table_group_over_what_it_plans(
    probed: dict[str, Any],
) -> None:
    dag = probed["example"]["dags"]["tablekeeper_fleet__analytics"]
    assert (dag["schedule"], dag["max_active_runs"], dag["fileloc"]) == ("0 4 * * *", 1, "fleet.py")
    assert "fleet" in dag["tags"]
    tasks = dag["tasks"]
    assert sorted(tasks) == [
        "health",
        "plan",
        "table.compact",
        "table.expire_snapshots",
        "table.rewrite_manifests",
    ]
    health = tasks["health"]
    assert health["args"] == [
        "--catalog", "files", "--namespace", "analytics", "--limit", "20", "--sort", "savings",
        "--threshold", "compact.min-files=10",
    ]  # fmt: skip
    assert tasks["plan"]["upstream"] == ["health"]
    # One mapped group, its jobs in the chain's order, each after plan and the job before it.
    chain = ["table.compact", "table.rewrite_manifests", "table.expire_snapshots"]
    assert [(t, tasks[t]["upstream"]) for t in chain] == [
        ("table.compact", ["plan"]),
        ("table.rewrite_manifests", ["plan", "table.compact"]),
        ("table.expire_snapshots", ["plan", "table.rewrite_manifests"]),
    ]
    for task_id in ["health", *chain]:
        task = tasks[task_id]
        # The fleet's pool bounds its jobs; the plan task needs no slot of it.
        assert (task["pool"], task["retries"]) == ("tablekeeper_fleet_analytics", 1)
        assert task["application"] == str(REPO_ROOT / "jobs" / f"{task_id.removeprefix('table.')}.py")
    assert tasks["plan"]["pool"] == "default_pool"
    for task_id in chain:
        assert tasks[task_id]["mapped_group"] == "table"
        assert (tasks[task_id]["trigger_rule"], tasks[task_id]["health_task_id"]) == ("none_failed", "health")
    # The first table instance of the plan of a canned health result: sales.orders, in catalog files.
    assert tasks["table.compact"]["table"] == "sales.orders"
    assert tasks["table.compact"]["args"] == ["--table", "sales.orders", "--catalog", "files"]
    assert tasks["table.expire_snapshots"]["args"] == ["--table", "sales.orders", "--catalog", "files"]


def test_example_migration_converts_incrementally_then_validates_at_the_converted_version(
    probed: dict[str, Any],
) -> None:
    dag = probed["example"]["dags"]["tablekeeper_delta_migration__db_orders"]
    assert (dag["schedule"], dag["max_active_runs"], dag["fileloc"]) == ("@hourly", 1, "delta_migration.py")
    convert, validate = dag["tasks"]["convert_delta"], dag["tasks"]["validate_row_counts"]
    assert validate["upstream"] == ["convert_delta"]
    assert convert["application"] == str(REPO_ROOT / "jobs" / "convert_delta.py")
    assert convert["args"] == [
        "--source", "/data/delta/orders", "--target", "db.orders", "--catalog", "local",
        "--mode", "incremental", "--verify", "metadata", "--format-version", "3", "--history", "all",
    ]  # fmt: skip
    assert validate["application"] == str(DAGS_FOLDER / "validate_conversion.py")
    assert validate["args"][:-1] == [
        "--source", "/data/delta/orders", "--target", "db.orders", "--catalog", "local", "--convert-result",
    ]  # fmt: skip
    # The rendered template hands convert-delta's XCom over as JSON.
    assert json.loads(validate["args"][-1]) == CONVERT_XCOM
    assert validate["raw_args"][-1] == "{{ ti.xcom_pull(task_ids='convert_delta') | tojson }}"


def test_templated_file_merges_defaults_and_table_settings(probed: dict[str, Any]) -> None:
    templated = probed["templated"]
    assert templated["import_errors"] == {}
    dag = templated["dags"]["tablekeeper_maintenance__db_t"]
    tasks = dag["tasks"]
    assert dag["schedule"] == "@daily"
    assert [(t, tasks[t]["upstream"]) for t in tasks] == [
        ("health", []),
        ("compact", ["health"]),
        ("backfill_row_lineage", ["compact"]),
    ]
    # Thresholds merge over the defaults'; backfill-row-lineage runs whatever health says, so
    # health is not asked for v3 readiness.
    assert tasks["health"]["args"][-4:] == [
        "--threshold", "compact.min-files=3", "--threshold", "rewrite-manifests.min-manifests=50",
    ]  # fmt: skip
    assert (tasks["compact"]["health_task_id"], tasks["backfill_row_lineage"]["health_task_id"]) == (
        "health",
        None,
    )
    catalog = [
        "--table",
        "db.t",
        "--catalog",
        "files",
        "--conf-file",
        str(REPO_ROOT / "conf" / "catalogs.yaml"),
    ]
    assert tasks["compact"]["args"] == [
        *catalog,
        "--min-input-files",
        "3",
        "--where",
        f"day >= '{DS}'",
        "--rewrite-all",
    ]
    assert tasks["backfill_row_lineage"]["args"] == [*catalog, "--branch", "audit", "--branch", "dev"]
    assert tasks["health"]["args"][:6] == catalog
    for task in tasks.values():
        assert (task["pool"], task["retries"], task["conn_id"]) == ("tk_db_t", 2, "spark_cluster")
        assert task["conf"] == {"spark.executor.cores": "2", "spark.executor.memory": "8g"}
    migration = templated["dags"]["tablekeeper_delta_migration__db_orders"]
    assert list(migration["tasks"]) == ["convert_delta"]  # validate: false
    assert migration["schedule"] is None  # never the maintenance default
    assert "once" in migration["tags"]

    fleet = templated["dags"]["tablekeeper_fleet__sales_nightly"]
    assert fleet["schedule"] == "@daily"
    assert fleet["tasks"]["health"]["args"] == [
        "--catalog", "files", "--namespace", "sales", "--tables", "o*", "--limit", "5", "--sort", "savings",
        "--list-files",  # remove-orphans is a fleet job: health lists every table's files
        "--threshold", "compact.min-files=3", "--threshold", "expire-snapshots.min-snapshots=2",
    ]  # fmt: skip
    # The fleet's jobs in the chain's order, whatever order the file gives them.
    assert [t for t in fleet["tasks"] if t.startswith("table.")] == ["table.compact", "table.remove_orphans"]
    assert fleet["tasks"]["table.remove_orphans"]["args"] == [
        "--table", "sales.orders", "--catalog", "files", "--older-than", "7d",
    ]  # fmt: skip
    for task in fleet["tasks"].values():
        assert task["pool"] in ("tk_fleet", "default_pool")
        if task["job"]:
            assert (task["executor_memory"], task["retries"]) == ("8g", 2)


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_wrong_tables_file_is_an_import_error_naming_the_mistake(probed: dict[str, Any], name: str) -> None:
    errors = probed[name]["import_errors"]
    assert sorted(errors) == ["delta_migration.py", "fleet.py", "maintenance.py"]
    for error in errors.values():
        assert "TablesFileError" in error and BAD[name][1] in error
    assert probed[name]["dags"] == {}


def _validate_conversion_parser() -> Any:
    spec = importlib.util.spec_from_file_location(
        "validate_conversion", DAGS_FOLDER / "validate_conversion.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_parser()


def _honoured_on_delta(dag: dict[str, Any], job: str, argv: list[str]) -> None:
    """A Delta table's job, or a fleet's (its namespace may hold Delta tables, and health never
    sends them an Iceberg-only job), gives only options a Delta table honours: the job would
    refuse the rest with exit 2 when it starts."""
    declared = _job_module(JOBS[job].module).DELTA_OPTIONS
    fleet_only_iceberg = "fleet" in dag["tags"] and declared is None
    if ("delta" in dag["tags"] or "fleet" in dag["tags"]) and "--table" in argv and not fleet_only_iceberg:
        check_delta_options(job, "a Delta table", declared, given_options([job, *argv]))


@pytest.mark.parametrize(("source", "tasks"), [("example", 20), ("templated", 7)])
def test_every_rendered_job_command_is_accepted_by_its_parser(
    probed: dict[str, Any], source: str, tasks: int
) -> None:
    """What the DAGs submit, with the --result-file the operator adds, parses with the real parsers."""
    validate_parser = _validate_conversion_parser()
    checked = 0
    for dag in probed[source]["dags"].values():
        for task in dag["tasks"].values():
            if task["job"] is None:  # a fleet's plan: Python, no command
                continue
            argv = [*task["args"], "--result-file", "/tmp/result.json"]
            if task["job"] == "validate-conversion":
                parsed = validate_parser.parse_args(argv)
            else:
                parsed = build_parser().parse_args([task["job"], *argv])
                assert parsed.command == task["job"]
                _honoured_on_delta(dag, task["job"], argv)
            assert parsed.result_file == "/tmp/result.json"
            checked += 1
    assert checked == tasks
