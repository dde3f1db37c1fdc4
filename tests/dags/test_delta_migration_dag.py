"""The Delta migration DAG under `airflow dags test` on local Spark: convert-delta turns a delta-rs
table into an Iceberg table and the validation reads both with Spark at the converted version. The
validation application itself, in the shared Spark session, fails when the counts differ."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from tablekeeper.cli import main as tablekeeper
from tests.dags.conftest import DAGS_FOLDER, DagTest, local_tables, task_states, xcom_results
from tests.support.spark_submit import ROWS_PER_FILE, delta_table_in_versions, sql_catalog

VERSIONS = 3


def test_migration_converts_then_validates_row_counts_at_the_converted_version(
    tmp_path: Path, dags_test: DagTest, airflow_home: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    source = tmp_path / "delta" / "orders"
    delta_table_in_versions(source, VERSIONS)
    migration = {"source": str(source), "target": "db.orders", "options": {"format-version": 3}}
    tables = local_tables(tmp_path / "tables.yaml", warehouse, {}, migrations=[migration])
    dag_id = "tablekeeper_delta_migration__db_orders"

    proc = dags_test(dag_id, tables)

    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    assert task_states(airflow_home, dag_id) == {"convert_delta": "success", "validate_row_counts": "success"}
    results = xcom_results(airflow_home, dag_id)
    convert, validate = results["convert_delta"], results["validate_row_counts"]
    assert (convert["job"], convert["status"]) == ("convert-delta", "ok")
    assert convert["metrics"]["delta_version"] == VERSIONS - 1
    # The DAG verifies by default: every converted version's partitions were checked.
    assert convert["metrics"]["verified"]["mode"] == "metadata"
    assert convert["metrics"]["verified"]["versions_verified"] >= 1
    assert (validate["job"], validate["status"]) == ("validate-conversion", "ok")
    assert validate["metrics"] == {
        "delta_version": VERSIONS - 1,
        "snapshot_id": convert["metrics"]["snapshot_id"],
        "delta_rows": VERSIONS * ROWS_PER_FILE,
        "iceberg_rows": VERSIONS * ROWS_PER_FILE,
    }
    converted = sql_catalog(warehouse).load_table("db.orders")
    assert converted.metadata.format_version == 3
    assert converted.current_snapshot().snapshot_id == convert["metrics"]["snapshot_id"]


def _validate_conversion() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "validate_conversion", DAGS_FOLDER / "validate_conversion.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.spark
def test_validation_fails_when_the_counts_differ(
    spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "delta" / "orders"
    delta_table_in_versions(source, VERSIONS)
    # A catalog name of its own: the validation registers it in the shared session.
    catalogs = tmp_path / "catalogs.yaml"
    catalogs.write_text(
        f"default: migration_check\ncatalogs:\n  migration_check:\n    type: sql\n"
        f"    uri: sqlite:///{tmp_path}/catalog.db\n    warehouse: {tmp_path}/sql\n"
    )
    common = ["--source", str(source), "--target", "db.orders", "--conf-file", str(catalogs)]
    convert_file = tmp_path / "convert.json"
    converted = tablekeeper(
        ["convert-delta", *common, "--engine", "driver", "--result-file", str(convert_file)]
    )
    assert converted == 0
    convert = json.loads(convert_file.read_text())
    validate = _validate_conversion()
    capsys.readouterr()

    assert validate.main([*common, "--convert-result", json.dumps(convert)]) == 0
    agreed = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert agreed["status"] == "ok"
    assert agreed["metrics"] == {
        "delta_version": VERSIONS - 1,
        "snapshot_id": convert["metrics"]["snapshot_id"],
        "delta_rows": VERSIONS * ROWS_PER_FILE,
        "iceberg_rows": VERSIONS * ROWS_PER_FILE,
    }

    result_file = tmp_path / "mismatch.json"
    argv = [*common, "--delta-version", "0", "--result-file", str(result_file)]
    assert validate.main(argv) == 3
    reason = (  # no snapshot named: the current one
        f"row counts differ: Delta {source} has {ROWS_PER_FILE} rows at version 0, "
        f"Iceberg db.orders has {VERSIONS * ROWS_PER_FILE} at its current snapshot"
    )
    out = capsys.readouterr()
    assert out.err.splitlines()[-1] == f"tablekeeper: {reason}"
    result = json.loads(result_file.read_text())
    assert json.loads(out.out.splitlines()[-1]) == result
    assert (result["status"], result["error"]) == ("failed", reason)
    assert result["metrics"] == {
        "delta_version": 0,
        "snapshot_id": None,
        "delta_rows": ROWS_PER_FILE,
        "iceberg_rows": VERSIONS * ROWS_PER_FILE,
    }
