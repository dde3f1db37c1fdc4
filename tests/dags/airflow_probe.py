"""Runs inside .airflow-venv (not the job venv): loads airflow_dags/ the way Airflow does and writes
what the DAG tests assert on as JSON.

    .airflow-venv/bin/python tests/dags/airflow_probe.py OUT.json TABLES.yaml [TABLES.yaml ...]

For each tables file (set as $TABLEKEEPER_TABLES): every .py file of the DAG folder imported on its
own with every warning recorded, then the folder through Airflow's BundleDagBag (import errors, the
warnings it captured), and per DAG its settings and per task its class, edges and the operator's
arguments, templated fields rendered for a fixed logical date, canned convert-delta and health
XComs and, for a fleet's mapped table group, its first instance of the plan those make.
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
# A fleet's health: one table needing compaction, one needing nothing.
HEALTH_RESULT = {
    "job": "health",
    "table": "local.sales",
    "status": "ok",
    "tables": [
        {
            "table": "sales.orders",
            "format": "iceberg",
            "metrics": {"data_files": 12, "small_files": 12},
            "recommendations": [
                {"job": "compact", "reason": "12 of 12 small", "threshold": "compact.min-files=5"}
            ],
        },
        {"table": "sales.refunds", "format": "iceberg", "metrics": {}, "recommendations": []},
    ],
}


class CannedTaskInstance:
    """What templates see as ``ti``: XComs of the tasks they name, as the first instance of a
    mapped task (a fleet's table group) sees them; the fleet's plan is its own plan task's answer
    to the canned health result."""

    map_index = 0

    def __init__(self, task: Any) -> None:
        self.task = task

    def xcom_pull(self, task_ids: str | None = None, key: str = "return_value", **_: Any) -> Any:
        if key != "return_value":
            return None
        if task_ids == "convert_delta":
            return CONVERT_RESULT
        if task_ids == "health":
            return HEALTH_RESULT
        if task_ids == "plan":
            return self.task.dag.get_task("plan").python_callable(HEALTH_RESULT)
        return None


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
    from tablekeeper_health import flatten  # beside the DAG files, on sys.path once they are imported

    common = {
        "classes": [cls.__name__ for cls in type(task).__mro__],
        "upstream": sorted(task.upstream_task_ids),
        "downstream": sorted(task.downstream_task_ids),
        "pool": task.pool,
        "trigger_rule": getattr(task.trigger_rule, "value", task.trigger_rule),
        "mapped_group": group.group_id if (group := task.get_closest_mapped_task_group()) else None,
    }
    if not hasattr(task, "application_args"):  # a Python task (a fleet's plan)
        return {**common, "job": None}
    raw_args = [a if isinstance(a, str) else repr(a) for a in task.application_args or []]
    task.render_template_fields({"ds": DS, "ti": CannedTaskInstance(task)})
    return {
        **common,
        "retries": task.retries,
        "health_task_id": getattr(task, "health_task_id", None),
        "job": getattr(task, "job", None),
        "table": getattr(task, "table", None),
        "application": task.application,
        "raw_args": raw_args,
        # As the operator submits them: a fleet's table arguments spliced in.
        "args": flatten(task.application_args or []),
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
