"""Runs inside .airflow-venv (not the job venv): loads airflow_dags/ the way Airflow does and writes
what the DAG tests assert on as JSON.

    .airflow-venv/bin/python tests/dags/airflow_probe.py OUT.json TABLES.yaml [TABLES.yaml ...]

For each tables file (set as $TABLEKEEPER_TABLES): every .py file of the DAG folder imported on its
own with every warning recorded, then the folder through Airflow's BundleDagBag (import errors, the
warnings it captured), and per DAG its settings and per task its class, edges and the operator's
arguments, templated fields rendered for a fixed logical date and a canned convert-delta XCom.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

DAGS = Path(__file__).resolve().parent.parent.parent / "airflow_dags"
DS = "2026-01-02"
CONVERT_RESULT = {"job": "convert-delta", "status": "ok", "metrics": {"delta_version": 4, "snapshot_id": 77}}


class CannedTaskInstance:
    """What templates see as ``ti``: XComs of the tasks they name."""

    def xcom_pull(self, task_ids: str | None = None, key: str = "return_value", **_: Any) -> Any:
        return CONVERT_RESULT if task_ids == "convert_delta" and key == "return_value" else None


def import_each_file() -> dict[str, dict[str, Any]]:
    """Per DAG-folder file imported by itself: the warnings it raised ('Category: message') and
    the error that stopped it, if any."""
    if str(DAGS) not in sys.path:
        sys.path.append(str(DAGS))  # as Airflow's bundle loader does
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(DAGS.glob("*.py")):
        error = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            spec = importlib.util.spec_from_file_location(f"probe_{path.stem}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # dataclasses look their module up there, as in any import
            try:
                spec.loader.exec_module(module)
            except Exception as err:
                error = f"{type(err).__name__}: {err}"
        found[path.name] = {
            "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
            "error": error,
        }
    return found


def describe_task(task: Any) -> dict[str, Any]:
    raw_args = list(task.application_args or [])
    task.render_template_fields({"ds": DS, "ti": CannedTaskInstance()})
    return {
        "classes": [cls.__name__ for cls in type(task).__mro__],
        "upstream": sorted(task.upstream_task_ids),
        "downstream": sorted(task.downstream_task_ids),
        "pool": task.pool,
        "retries": task.retries,
        "job": getattr(task, "job", None),
        "table": getattr(task, "table", None),
        "application": task.application,
        "raw_args": raw_args,
        "args": task.application_args,
        "conf": task.conf,
        "env_vars": task.env_vars,
        "packages": task.packages,
        "py_files": task.py_files,
        "name": task.name,
        "conn_id": task._conn_id,
        "spark_binary": task._spark_binary,
        "executor_memory": task._executor_memory,
        "template_fields": list(task.template_fields),
    }


def probe(tables: str) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import BundleDagBag

    os.environ["TABLEKEEPER_TABLES"] = tables
    per_file_warnings = import_each_file()
    bag = BundleDagBag(dag_folder=DAGS, bundle_path=DAGS, safe_mode=False)
    dags = {
        dag.dag_id: {
            "schedule": dag.schedule if dag.schedule is None else str(dag.schedule),
            "max_active_runs": dag.max_active_runs,
            "catchup": dag.catchup,
            "tags": sorted(dag.tags),
            "start_date": dag.start_date.isoformat() if dag.start_date else None,
            "fileloc": Path(dag.fileloc).name,
            "tasks": {task.task_id: describe_task(task) for task in dag.tasks},
        }
        for dag in bag.dags.values()
    }
    return {
        "files": per_file_warnings,
        "import_errors": {Path(k).name: v for k, v in bag.import_errors.items()},
        "captured_warnings": {Path(k).name: list(v) for k, v in bag.captured_warnings.items()},
        "dags": dags,
    }


def main() -> int:
    out, *tables_files = sys.argv[1:]
    Path(out).write_text(json.dumps({t: probe(t) for t in tables_files}, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
