"""A SparkSubmitOperator for tablekeeper jobs: the job's JSON result is the task's XCom, and a job
that fails fails the task with the job's one-line reason.

Every job takes ``--result-file``; the task points it at a fresh file, reads it once spark-submit
has exited and returns it (XCom ``return_value``). The provider's own error only says "Cannot
execute ... Error code is: N" plus the last lines of output, where Spark's shutdown logging can
follow the reason; the result file (or the ``tablekeeper:`` line of the output, when the job died
before it could write one) gives the reason itself. Exit codes 2 (usage), 3 (refused) and 5
(commit state unknown) need a person, so they fail the task without retries.

Every job gets ``--lineage-parent``: its OpenLineage events (when the job has OpenLineage
configured) nest under this DAG run. With the OpenLineage provider installed the parent is the
task instance as the provider names it (its ``lineage_parent_id`` macro); without it, the DAG run:
namespace ``[openlineage] namespace`` (else OPENLINEAGE_NAMESPACE, else ``default``, the
provider's convention), job name the dag_id, run id ``uuid5(NAMESPACE_URL, "airflow://<dag_id>/<run_id>")``,
the same for every task of the run.

Given ``health_task_id``, a task first asks that task's result (``tablekeeper health``) whether its
job is needed (tablekeeper_health.verdict). Not needed: the task logs health's measure, pushes it
as XCom ``skipped`` ({job, table, reason}) and is skipped. Needed: it logs health's reason and
expected effect, pushes the recommendation as XCom ``health`` and runs the job.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Context, TriggerRule
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException
from tablekeeper_health import describe, flatten, verdict
from tablekeeper_tables import HEALTH_JOB, HOME_ENV, Entry
from tablekeeper_values import TablesFileError, slug

log = logging.getLogger(__name__)

# 1 (unexpected: a lost executor, a storage hiccup) and 4 (another writer won every commit attempt)
# can pass on a later try.
RETRYABLE_EXIT_CODES = frozenset({1, 4})
_EXIT_CODE = re.compile(r"Error code is: (\d+)")
_REASON_PREFIX = "tablekeeper: "
_TAIL_MARKER = "Last spark-submit output:"
# Spark's own log lines ("26/11/22 14:29:11 INFO ShutdownHookManager: ..."), never the reason.
_SPARK_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR) ")
# Java and Python stack frames: where an error happened, not what it was.
_STACK_LINE = re.compile(r"^(at |\.\.\. \d+ more$|File \"|Traceback \(|\^+$)")
LINEAGE_PARENT_OPTION = "--lineage-parent"


class TablekeeperJobOperator(SparkSubmitOperator):
    """spark-submit of one tablekeeper job; returns the job's JSON result."""

    ui_color = "#dcefe3"
    # The table is rendered like the arguments: a fleet's task gets it from its table group.
    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "table")

    def __init__(
        self,
        *,
        job: str,
        table: Any,
        results_dir: str | None = None,
        health_task_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.table = table
        self.results_dir = results_dir
        self.health_task_id = health_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        if self.health_task_id is not None:
            self._gate(context)
        self.application_args = flatten(self.application_args or [])
        self.name = self.name or f"tablekeeper-{self.job}-{slug(str(self.table))}"
        directory = Path(self.results_dir or tempfile.gettempdir())
        directory.mkdir(parents=True, exist_ok=True)
        result_file = directory / f"tablekeeper-{slug(self.dag_id)}-{self.task_id}-{uuid.uuid4().hex}.json"
        self.application_args = [*(self.application_args or []), "--result-file", str(result_file)]
        if LINEAGE_PARENT_OPTION not in self.application_args:  # the tables file may name its own
            self.application_args += [LINEAGE_PARENT_OPTION, lineage_parent(context)]
        try:
            try:
                super().execute(context)
            except AirflowException as err:
                raise self._failure(err, _read_result(result_file)) from err
            result = _read_result(result_file)
        finally:
            result_file.unlink(missing_ok=True)
        if result is None:
            raise AirflowFailException(
                f"{self.job} {self.table}: the job exited 0 but wrote no result to {result_file}: "
                "in cluster deploy mode, submit.results_dir must be storage the driver and this worker share"
            )
        self.log.info(
            "%s %s %s: %s", self.job, self.table, result.get("status"), json.dumps(result.get("metrics"))
        )
        if self.job == HEALTH_JOB:
            for line in describe(result):
                self.log.info("%s", line)
        return result

    def _gate(self, context: Context) -> None:
        """Skip the job unless health, run before it, recommended it (or could not judge it)."""
        ti = context["ti"]
        decision = verdict(ti.xcom_pull(task_ids=self.health_task_id), self.job, str(self.table))
        self.log.info("%s", decision.message)
        if not decision.run:
            ti.xcom_push(
                key="skipped", value={"job": self.job, "table": self.table, "reason": decision.message}
            )
            raise AirflowSkipException(decision.message)
        if decision.recommendation is not None:
            ti.xcom_push(key="health", value={"table": self.table, **decision.recommendation})

    def _failure(self, err: AirflowException, result: Mapping[str, Any] | None) -> AirflowException:
        text = str(err)
        code = _EXIT_CODE.search(text)
        if code is None:
            # spark-submit itself did not run the job (no exit code to report): keep its own error.
            return err
        exit_code = int(code.group(1))
        reason = (result or {}).get("error") or _reason_in_output(text) or "no reason in the job's output"
        message = f"{self.job} {self.table} failed (exit {exit_code}): {reason}"
        self.log.error("%s", message)
        return (
            AirflowException(message) if exit_code in RETRYABLE_EXIT_CODES else AirflowFailException(message)
        )


def job_task(
    *,
    job: str,
    table: Any,
    args: Sequence[Any],
    entry: Entry,
    task_id: str | None = None,
    application: str | None = None,
    health_task_id: str | None = None,
    trigger_rule: TriggerRule = TriggerRule.ALL_SUCCESS,
    **extra: Any,
) -> TablekeeperJobOperator:
    """The task for one job of a table, migration or fleet: ``jobs/<job>.py`` unless another
    application is named, task id the job's name in snake case. ``args`` may hold Jinja (the
    operator renders ``application_args``), and ``table`` and ``args`` a fleet's mapped argument;
    ``health_task_id`` gates the job on that task's health result (see the module docstring)."""
    script = job.replace("-", "_")
    application = application or f"{entry.submit.jobs_dir}/{script}.py"
    if "://" not in application and not Path(application).is_file():
        raise TablesFileError(f"{application} not found for {job}: set submit.jobs_dir or {HOME_ENV}")
    optional: dict[str, Any] = {"pool": entry.pool, "retries": entry.retries}
    return TablekeeperJobOperator(
        task_id=task_id or script,
        job=job,
        table=table,
        application=application,
        application_args=list(args),
        results_dir=entry.submit.results_dir,
        # A fleet's table is known when the task runs, which names the application then.
        name=f"tablekeeper-{job}-{slug(table)}" if isinstance(table, str) else None,
        health_task_id=health_task_id,
        trigger_rule=trigger_rule,
        **entry.submit.operator_args,
        **{key: value for key, value in optional.items() if value is not None},  # else Airflow's defaults
        **extra,
    )


def table_args(table_option: str, entry: Entry, table: str) -> list[str]:
    """How a job names its table: ``--table db.t`` (or ``--target``), the catalog and its file if set."""
    args = [table_option, table]
    if entry.catalog:
        args += ["--catalog", entry.catalog]
    if entry.catalog_file:
        args += ["--conf-file", entry.catalog_file]
    return args


def lineage_parent(context: Context) -> str:
    """``<namespace>/<job name>/<run id>`` of the run a job's OpenLineage events nest under (see the
    module docstring)."""
    try:
        from airflow.providers.openlineage.plugins.macros import lineage_parent_id
    except ImportError:
        pass
    else:
        try:
            return str(lineage_parent_id(context["ti"]))
        except Exception:  # a provider that cannot name the task: the DAG run still can
            log.warning("the OpenLineage provider gave no parent id: using the DAG run", exc_info=True)
    dag_run = context["dag_run"]
    run_id = uuid.uuid5(uuid.NAMESPACE_URL, f"airflow://{dag_run.dag_id}/{dag_run.run_id}")
    return f"{_lineage_namespace()}/{dag_run.dag_id}/{run_id}"


def _lineage_namespace() -> str:
    try:
        from airflow.configuration import conf

        configured = conf.get("openlineage", "namespace", fallback=None)
    except Exception:  # no Airflow configuration in this process
        configured = None
    return configured or os.environ.get("OPENLINEAGE_NAMESPACE") or "default"


def _read_result(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        result = json.loads(text)
    except json.JSONDecodeError:
        log.warning("unreadable result file %s: %r", path, text[:200])
        return None
    return result if isinstance(result, dict) else None


def _reason_in_output(text: str) -> str | None:
    """The job's one-line reason from the output tail in the provider's error: its ``tablekeeper:``
    line; else, when it died before the CLI could answer (spark-submit or the interpreter failed),
    the last line that is neither Spark's logging nor a stack frame."""
    tail = text.split(_TAIL_MARKER, 1)[1] if _TAIL_MARKER in text else ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith(_REASON_PREFIX):
            return line[len(_REASON_PREFIX) :]
    for line in reversed(lines):
        if not _SPARK_LOG_LINE.match(line) and not _STACK_LINE.match(line):
            return line
    return None
