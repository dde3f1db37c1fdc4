"""Fleet DAGs: one per ``fleets`` entry of the tables file, ``tablekeeper_fleet__<name>``: the
tables of a catalog namespace, maintained as ``tablekeeper health`` ranks them.

1. ``health`` runs ``tablekeeper health --catalog C --namespace NS [--tables GLOB] [--limit N]``:
   one entry per table (the catalog's Iceberg tables and, in a filesystem catalog, the Delta tables
   of the namespace's directory), most savings first, the first ``limit`` only.
2. ``plan`` keeps those health recommends one of the fleet's jobs for, in health's order, and logs
   one line per table: its jobs, or why none (nothing to do, unreadable, a job the fleet does not
   run, left to its own DAG).
3. ``table``, a task group mapped over the planned tables (``expand_kwargs``: one instance per
   table, labelled with its name): a task per fleet job in the maintenance chain's order, each
   gated like a table's DAG: it runs only when health recommended that job for its table, and is
   skipped otherwise, the reason in its log and XCom ``skipped``. A table that needs nothing gets
   no instance, so no task. A compact health asked for because of the table's layout (a sort or
   Z-order of every file) gets those options before the fleet's own compact options.

Two jobs never touch one table at once: in a table's instance the jobs are chained (trigger rule
``none_failed``: a skipped job lets the next one run, a failed one stops that table's later jobs
and no other table's), ``max_active_runs=1`` keeps runs apart, and a table that has its own
maintenance DAG or is a migration's target in the tables file is left to that DAG. The fleet's
``pool`` bounds how many jobs run at once over all its tables: each job task takes one of its slots
(``airflow pools set <pool> 4 ...`` for four).

With ``report_dir`` set, health also writes its HTML report (``--html``) for people, one per run:
``<report_dir>/<fleet name>/<logical time, e.g. 20260501T040000>.html``, a path the driver can write
(a storage URI such as ``s3://bucket/reports`` works wherever the driver runs).

health gets ``--list-files`` when the fleet lists remove-orphans (the only way it judges orphans of
Iceberg tables: a listing of each table's location, what remove-orphans itself costs) and
``--v3-readiness`` when it lists backfill-row-lineage. A job's options hold for every table of the
fleet, Iceberg and Delta alike: give only options a Delta table honours too
(docs/reference/reading-delta.md, "Options on Delta tables"), or its job exits 2 naming the option.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import DAG, TriggerRule, chain, task, task_group
from tablekeeper_health import HEALTH_TASK, fleet_plan, gated_jobs, health_args, report_args
from tablekeeper_submit import job_task
from tablekeeper_tables import HEALTH_JOB, Fleet, HealthGate, load_tables
from tablekeeper_values import option_args

DAG_PREFIX = "tablekeeper_fleet__"
PLAN_TASK = "plan"
TABLE_GROUP = "table"

log = logging.getLogger(__name__)


def health_command(spec: Fleet) -> list[str]:
    """health's arguments for the fleet: its namespace, ranked by savings."""
    args: list[str] = []
    if spec.catalog:
        args += ["--catalog", spec.catalog]
    if spec.catalog_file:
        args += ["--conf-file", spec.catalog_file]
    args += ["--namespace", spec.namespace]
    if spec.table_glob:
        args += ["--tables", spec.table_glob]
    if spec.limit:
        args += ["--limit", str(spec.limit)]
    args += ["--sort", "savings", *report_args(spec.report_dir, spec.name)]
    return [*args, *health_args(None, gated_jobs(None, spec.jobs, HealthGate()), spec.thresholds)]


def fleet_dag(spec: Fleet) -> DAG:
    with DAG(
        dag_id=f"{DAG_PREFIX}{spec.name}",
        description=f"tablekeeper: {', '.join(spec.jobs)} where health recommends them in {spec.namespace}",
        schedule=spec.schedule,
        start_date=spec.start_date,
        catchup=False,
        # Two runs would plan the same tables and work on them at once.
        max_active_runs=1,
        tags=["tablekeeper", "fleet", *spec.tags],
        doc_md=__doc__,
    ) as dag:
        health = job_task(
            task_id=HEALTH_TASK,
            job=HEALTH_JOB,
            table=f"{spec.catalog}.{spec.namespace}" if spec.catalog else spec.namespace,
            args=health_command(spec),
            entry=spec,
        )

        @task(task_id=PLAN_TASK)
        def plan(result: dict[str, Any]) -> list[dict[str, Any]]:
            """The tables that get jobs, each as its table group's arguments."""
            planned, lines = fleet_plan(result, spec.jobs, spec.exclude, spec.catalog, spec.catalog_file)
            for line in lines:
                log.info("%s", line)
            return planned

        @task_group(group_id=TABLE_GROUP)
        def maintain(table: str, table_args: list[str], compact_args: list[str]) -> None:
            """One table's recommended jobs, one after the other (compact with the sort or Z-order
            health's layout check asked for, when it did)."""
            chain(
                *(
                    job_task(
                        job=job,
                        table=table,
                        # The table's arguments arrive as one list; the operator splices it in.
                        args=[
                            table_args,
                            *([compact_args] if job == "compact" else []),
                            *option_args(options),
                        ],
                        entry=spec,
                        health_task_id=HEALTH_TASK,
                        trigger_rule=TriggerRule.NONE_FAILED,
                        map_index_template="{{ task.table }}",
                    )
                    for job, options in spec.jobs.items()
                )
            )

        planned = plan(health.output)
        planned >> maintain.expand_kwargs(planned)
    return dag


for _spec in load_tables().fleets:
    _dag = fleet_dag(_spec)
    globals()[_dag.dag_id] = _dag
