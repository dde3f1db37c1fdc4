"""Test support for jobs run through spark-submit (the README line, the Airflow DAGs): the
environment a local spark-submit of this checkout needs, and small tables made without a JVM
(PyIceberg and delta-rs), in a warehouse laid out as conf/catalogs.yaml's ``local`` catalog expects.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
# The job environment: spark-submit and the interpreter of this test run (make setup's .venv).
VENV_BIN = Path(sys.executable).parent
CATALOG = "local"  # the default catalog of conf/catalogs.yaml
ROWS_PER_FILE = 10
_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def build_package() -> Path:
    """``make package`` (nothing to do when dist/ is current): the zip jobs are submitted with."""
    proc = subprocess.run(
        ["make", "--no-print-directory", "package"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, f"make package failed:\n{proc.stdout}\n{proc.stderr}"
    return REPO_ROOT / "dist" / "tablekeeper.zip"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def submit_env(warehouse: Path | None = None) -> dict[str, str]:
    """spark-submit from the PySpark install on local Spark (and jobs finding ``warehouse``)."""
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    if warehouse is not None:
        env["TABLEKEEPER_WAREHOUSE"] = str(warehouse)
    return env


def sql_catalog(warehouse: Path) -> Any:
    """PyIceberg on the sqlite catalog tablekeeper's ``local`` catalog reads (same file, same name)."""
    from pyiceberg.catalog.sql import SqlCatalog

    (warehouse / "sql").mkdir(parents=True, exist_ok=True)
    return SqlCatalog(CATALOG, uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}/sql")


def iceberg_table_of_small_files(
    warehouse: Path, identifier: str, files: int, rows_per_file: int = ROWS_PER_FILE
) -> Any:
    """A v2 table with one small file and one snapshot per append, plus an orphan file old enough
    for remove-orphans' default 3-day floor; returns the PyIceberg table."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    catalog = sql_catalog(warehouse)
    namespace = identifier.rsplit(".", 1)[0]
    if (namespace,) not in catalog.list_namespaces():
        catalog.create_namespace(namespace)
    schema = Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType(), required=False)
    )
    table = catalog.create_table(identifier, schema=schema)
    for i in range(files):
        ids = range(i * rows_per_file, (i + 1) * rows_per_file)
        table.append(pa.table({"id": list(ids), "name": [f"n{j}" for j in ids]}, schema=_SCHEMA))
    orphan = orphan_path(table)
    orphan.write_bytes(b"left behind by a failed writer")
    week_ago = time.time() - 7 * 86400
    os.utime(orphan, (week_ago, week_ago))
    return catalog.load_table(identifier)


def orphan_path(table: Any) -> Path:
    return Path(table.location().removeprefix("file://")) / "data" / "orphan-from-a-failed-write.parquet"


def live_data_files(table: Any) -> list[str]:
    return [task.file.file_path for task in table.scan().plan_files()]


def delta_table_in_versions(path: Path, versions: int) -> None:
    """A Delta table written by delta-rs: version v adds ROWS_PER_FILE rows."""
    from deltalake import write_deltalake

    for v in range(versions):
        ids = range(v * ROWS_PER_FILE, (v + 1) * ROWS_PER_FILE)
        rows = pa.table({"id": list(ids), "name": [f"n{j}" for j in ids]}, schema=_SCHEMA)
        write_deltalake(str(path), rows, mode="append")


def last_json_line(stdout: str) -> dict[str, Any]:
    """A job's result: the last line of its stdout."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert lines, "the job printed nothing on stdout"
    result = json.loads(lines[-1])
    assert isinstance(result, dict)
    return result


def run(cmd: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``cmd`` from the checkout, its output captured."""
    return subprocess.run(
        cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
