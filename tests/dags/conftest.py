"""Real Airflow for the DAG tests: it lives in .airflow-venv (make setup), so tests drive its
``airflow`` and ``python`` as subprocesses, each with its own AIRFLOW_HOME and tables file."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tablekeeper.spark import class_archive
from tablekeeper.spark.session import local_jar_paths
from tests.support.spark_submit import REPO_ROOT, VENV_BIN, build_package, submit_env

AIRFLOW_VENV = REPO_ROOT / ".airflow-venv"
AIRFLOW = AIRFLOW_VENV / "bin" / "airflow"
AIRFLOW_PYTHON = AIRFLOW_VENV / "bin" / "python"
DAGS_FOLDER = REPO_ROOT / "airflow_dags"
LOGICAL_DATE = "2026-01-02"
# The submit section of a tables file for local Spark: spark-submit of the job venv with the settings
# of local sessions (conf/spark-defaults.conf), the confs every job needs, and the jars make setup
# fetched instead of --packages (the README test resolves those; here they would only cost time).
LOCAL_SUBMIT: dict[str, Any] = {
    "spark_binary": str(VENV_BIN / "spark-submit"),
    "properties_file": "${home}/conf/spark-defaults.conf",
    "packages": None,
    "jars": ",".join(str(path) for path in local_jar_paths()),
    "conf": {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension,"
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.log.level": "WARN",
        # Jobs of seconds on tiny tables: the optimizing JIT would cost more CPU than it saves, and
        # the line's class archive (make setup) spares the JVM loading Spark's classes.
        "spark.driver.extraJavaOptions": class_archive.java_options(
            "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
        ),
    },
}


def airflow_env(home: Path, tables: Path) -> dict[str, str]:
    """Airflow on ``home`` with the DAGs of this checkout over ``tables``; the jobs' warehouse comes
    from the tables file (submit.env_vars), as on a real deployment."""
    env = submit_env()
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS_FOLDER),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        # Without a connection the provider submits to YARN.
        AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": "local[2]"}),
        TABLEKEEPER_TABLES=str(tables),
    )
    return env


def write_tables(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def local_tables(
    path: Path,
    warehouse: Path,
    defaults: dict[str, Any],
    *,
    env_vars: dict[str, str] | None = None,
    **sections: Any,
) -> Path:
    """A tables file for local Spark: jobs on ``warehouse`` (and ``env_vars``), runs only when
    tested, no retries."""
    env = {"TABLEKEEPER_WAREHOUSE": str(warehouse), **(env_vars or {})}
    doc = {
        "submit": {**LOCAL_SUBMIT, "env_vars": env},
        "defaults": {"schedule": None, "retries": 0, **defaults},
        **sections,
    }
    return write_tables(path, doc)


@pytest.fixture(scope="session")
def airflow() -> Path:
    if not AIRFLOW.is_file():
        pytest.fail(f"{AIRFLOW} missing: run make setup (it installs Airflow into .airflow-venv)")
    return AIRFLOW


@pytest.fixture(scope="session")
def package() -> None:
    build_package()


@pytest.fixture(scope="session")
def migrated_db(airflow: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One `airflow db migrate` per test run; each test copies the database."""
    home = tmp_path_factory.mktemp("airflow-template")
    env = airflow_env(home, REPO_ROOT / "conf" / "tables.example.yaml")
    proc = subprocess.run(
        [str(airflow), "db", "migrate"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return home / "airflow.db"


@pytest.fixture
def airflow_home(migrated_db: Path, tmp_path: Path) -> Path:
    home = tmp_path / "airflow-home"
    home.mkdir()
    shutil.copy(migrated_db, home / "airflow.db")
    return home


DagTest = Callable[[str, Path], subprocess.CompletedProcess[str]]


@pytest.fixture
def dags_test(airflow: Path, airflow_home: Path, package: None) -> DagTest:
    """`airflow dags test <dag_id> LOGICAL_DATE` over a tables file."""

    def run(dag_id: str, tables: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(airflow), "dags", "test", dag_id, LOGICAL_DATE],
            env=airflow_env(airflow_home, tables),
            cwd=airflow_home,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )

    return run


def task_states(home: Path, dag_id: str) -> dict[str, str | None]:
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ?", (dag_id,)).fetchall()
    return dict(rows)


def xcom_results(home: Path, dag_id: str) -> dict[str, Any]:
    """Each task's XCom return value (stored as JSON)."""
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute(
            "SELECT task_id, value FROM xcom WHERE dag_id = ? AND key = 'return_value'", (dag_id,)
        ).fetchall()
    return {task_id: json.loads(value) for task_id, value in rows}


def mapped_task_states(home: Path, dag_id: str) -> dict[tuple[str, int], tuple[str | None, str | None]]:
    """Per (task, map index): its state and the label of its mapped instance (-1, None: unmapped)."""
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute(
            "SELECT task_id, map_index, state, rendered_map_index FROM task_instance WHERE dag_id = ?",
            (dag_id,),
        ).fetchall()
    return {(task_id, index): (state, label) for task_id, index, state, label in rows}


def dag_run_ids(home: Path, dag_id: str) -> list[str]:
    with sqlite3.connect(home / "airflow.db") as db:
        return [r for (r,) in db.execute("SELECT run_id FROM dag_run WHERE dag_id = ?", (dag_id,))]


def xcoms(home: Path, dag_id: str, key: str) -> dict[tuple[str, int], Any]:
    """Per (task, map index): its XCom under ``key``."""
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute(
            "SELECT task_id, map_index, value FROM xcom WHERE dag_id = ? AND key = ?", (dag_id, key)
        ).fetchall()
    return {(task_id, index): json.loads(value) for task_id, index, value in rows}
