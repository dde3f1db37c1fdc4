"""Maintenance DAGs: one per table of the tables file ($TABLEKEEPER_TABLES, else
conf/tables.example.yaml), ``tablekeeper_maintenance__<name>``.

Each runs the table's jobs one after the other, compact -> rewrite-position-deletes ->
rewrite-manifests -> expire-snapshots -> remove-orphans -> backfill-row-lineage -> compute-stats
(those the table lists), each a spark-submit of ``jobs/<job>.py`` whose JSON
result is the task's XCom. Two jobs never touch one table at once: the chain orders one run's jobs,
``max_active_runs=1`` keeps runs apart, and a table's ``pool`` (a pool of one slot, created with
``airflow pools set <pool> 1 ...``) also keeps out other tasks given that pool, such as the table's
migration.
"""

from __future__ import annotations

from airflow.sdk import DAG, chain
from tablekeeper_submit import job_task, table_args
from tablekeeper_tables import MaintainedTable, load_tables, option_args

DAG_PREFIX = "tablekeeper_maintenance__"


def maintenance_dag(spec: MaintainedTable) -> DAG:
    with DAG(
        dag_id=f"{DAG_PREFIX}{spec.name}",
        description=f"tablekeeper maintenance of {spec.table}: {', '.join(spec.jobs)}",
        schedule=spec.schedule,
        start_date=spec.start_date,
        catchup=False,
        # A slow run must not overlap the next one: their jobs would work on the table at once.
        max_active_runs=1,
        tags=["tablekeeper", "maintenance", spec.format, *spec.tags],
        doc_md=__doc__,
    ) as dag:
        tasks = [
            job_task(
                job=job,
                table=spec.table,
                args=[*table_args("--table", spec, spec.table), *option_args(options)],
                entry=spec,
            )
            for job, options in spec.jobs.items()
        ]
        chain(*tasks)
    return dag


for _spec in load_tables().tables:
    _dag = maintenance_dag(_spec)
    globals()[_dag.dag_id] = _dag
