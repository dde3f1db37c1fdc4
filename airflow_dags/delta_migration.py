"""Delta -> Iceberg migration DAGs: one per ``migrations`` entry of the tables file,
``tablekeeper_delta_migration__<name>``; without a schedule a DAG runs when triggered (a one-off).

``convert_delta`` runs ``convert-delta --mode incremental``: the first run converts the table in
full, later runs only the Delta versions committed since (a run with nothing new commits nothing).
It passes ``--verify`` (each converted version's live rows per partition checked on both sides
before anything is published) unless the entry's options set ``verify`` (``off``, ``rows``).
``validate_row_counts`` then reads both tables with Spark, the Delta table at the version the
conversion reached and the Iceberg table at the snapshot it committed (both from convert's XCom),
and fails (exit 3, no retry) when their row counts differ.
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG
from tablekeeper_submit import job_task, table_args
from tablekeeper_tables import CONVERT_JOB, Migration, load_tables
from tablekeeper_values import option_args

DAG_PREFIX = "tablekeeper_delta_migration__"
VALIDATION_APP = Path(__file__).resolve().parent / "validate_conversion.py"
CONVERT_TASK = "convert_delta"
# convert-delta's result as JSON, rendered when the validation task starts.
CONVERT_RESULT = "{{ ti.xcom_pull(task_ids='" + CONVERT_TASK + "') | tojson }}"
DEFAULT_VERIFY = "metadata"


def convert_options(spec: Migration) -> list[str]:
    """The entry's options as argv, with verification on unless the entry says otherwise."""
    return option_args({"verify": DEFAULT_VERIFY, **spec.options})


def migration_dag(spec: Migration) -> DAG:
    with DAG(
        dag_id=f"{DAG_PREFIX}{spec.name}",
        description=f"tablekeeper: convert Delta {spec.source} to Iceberg {spec.target}, incrementally",
        schedule=spec.schedule,
        start_date=spec.start_date,
        catchup=False,
        # Two conversions of one table at once would race for the same Delta versions.
        max_active_runs=1,
        tags=["tablekeeper", "migration", *spec.tags],
        doc_md=__doc__,
    ) as dag:
        target = table_args("--target", spec, spec.target)
        convert = job_task(
            task_id=CONVERT_TASK,
            job=CONVERT_JOB,
            table=spec.target,
            args=["--source", spec.source, *target, "--mode", "incremental", *convert_options(spec)],
            entry=spec,
        )
        if spec.validate:
            validate = job_task(
                task_id="validate_row_counts",
                job="validate-conversion",
                table=spec.target,
                application=str(VALIDATION_APP),
                args=["--source", spec.source, *target, "--convert-result", CONVERT_RESULT],
                entry=spec,
            )
            convert >> validate
    return dag


for _spec in load_tables().migrations:
    _dag = migration_dag(_spec)
    globals()[_dag.dag_id] = _dag
