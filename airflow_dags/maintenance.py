"""Maintenance DAGs: one per table of the tables file ($TABLEKEEPER_TABLES, else
conf/tables.example.yaml), ``tablekeeper_maintenance__<name>``.

Each runs the table's jobs one after the other, compact -> rewrite-position-deletes ->
rewrite-manifests -> expire-snapshots -> remove-orphans -> backfill-row-lineage -> compute-stats
(those the table lists), each a spark-submit of ``jobs/<job>.py`` whose JSON
result is the task's XCom. Two jobs never touch one table at once: the chain orders one run's jobs,
``max_active_runs=1`` keeps runs apart, and a table's ``pool`` (a pool of one slot, created with
``airflow pools set <pool> 1 ...``) also keeps out other tasks given that pool, such as the table's
migration.

**The health gate** (on unless the table or the defaults say ``health: false``): the first task,
``health``, runs ``tablekeeper health --table ...`` (metadata only, it never writes), and each job
health can judge runs only when health recommended it; otherwise its task is skipped, the reason
(health's measure, e.g. ``health: compact not needed for db.events: 1 of 1 data files are small
...``) in its log and in XCom ``skipped``. A job that runs logs health's reason and expected effect
(XCom ``health``). Jobs health does not judge (compute-stats, and the ``always_run`` ones) always
run. The jobs after health use the trigger rule ``none_failed``: a skipped job does not skip the
rest of the chain, while a failure (health's included) still stops it (``upstream_failed``).

health judges by its thresholds (``health.thresholds`` of the tables file, the table's
``tablekeeper.health.*`` properties, the catalogs file's ``health:``) and the table's own settings,
not by the jobs' options: expire-snapshots is judged by the table's ``history.expire.*``
properties, not by its ``older-than``. Where a job's options differ from the table's settings, set
the table's properties to match or list the job in ``health.always_run``.

``--v3-readiness`` is passed when the table lists backfill-row-lineage (health recommends it below
format version 3). ``--list-files`` is passed only with ``health.list_files: true``: that listing
of the table's location is what remove-orphans itself costs, so on a table with orphans gating
would list it twice, and health's dry run uses remove-orphans' default age, not the job's
``older-than``. Without it remove-orphans on Iceberg runs every time, its own listing being its
check; on Delta, health reads the tombstones from the log, so VACUUM is always gated.
"""

from __future__ import annotations

from airflow.sdk import DAG, TriggerRule, chain
from tablekeeper_health import HEALTH_TASK, gated_jobs, health_args
from tablekeeper_submit import TablekeeperJobOperator, job_task, table_args
from tablekeeper_tables import HEALTH_JOB, MaintainedTable, load_tables
from tablekeeper_values import option_args

DAG_PREFIX = "tablekeeper_maintenance__"


def maintenance_dag(spec: MaintainedTable) -> DAG:
    gated = gated_jobs(spec.format, spec.jobs, spec.health) if spec.health.enabled else frozenset()
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
        table = table_args("--table", spec, spec.table)
        tasks: list[TablekeeperJobOperator] = []
        if gated:  # no health task when it would decide nothing
            tasks.append(
                job_task(
                    task_id=HEALTH_TASK,
                    job=HEALTH_JOB,
                    table=spec.table,
                    args=[*table, *health_args(spec.format, gated, spec.health.thresholds)],
                    entry=spec,
                )
            )
        tasks += [
            job_task(
                job=job,
                table=spec.table,
                args=[*table, *option_args(options)],
                entry=spec,
                health_task_id=HEALTH_TASK if job in gated else None,
                # A skipped job must not skip the ones after it; a failed one still stops them.
                trigger_rule=TriggerRule.NONE_FAILED if gated else TriggerRule.ALL_SUCCESS,
            )
            for job, options in spec.jobs.items()
        ]
        chain(*tasks)
    return dag


for _spec in load_tables().tables:
    _dag = maintenance_dag(_spec)
    globals()[_dag.dag_id] = _dag
