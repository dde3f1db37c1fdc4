"""How the job operator turns a failed spark-submit into a task failure (inside .airflow-venv, no
Spark): the reason is the job's own line, whatever Spark logs after it, and only exit codes a retry
can help (1, 4) leave the task to Airflow's retries."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.dags.conftest import AIRFLOW_PYTHON, DAGS_FOLDER, airflow_env

SPARK_TAIL = (
    "26/11/22 14:44:25 INFO SparkContext: Successfully stopped SparkContext\n"
    "26/11/22 14:44:25 INFO ShutdownHookManager: Shutdown hook called\n"
    "26/11/22 14:44:25 INFO ShutdownHookManager: Deleting directory /tmp/spark-1\n"
)
OUTPUTS = {
    # The CLI's reason line, then Spark's shutdown logging.
    "cli": "usage: tablekeeper compact ...\ntablekeeper: --strategy: invalid choice: 'zorder'\n" + SPARK_TAIL,
    # The interpreter failed before the CLI ran (a cluster Python without the dependencies).
    "python": 'Traceback (most recent call last):\nFile "jobs/compact.py", line 5, in <module>\n'
    "from tablekeeper.cli import main\nModuleNotFoundError: No module named 'fastavro'\n" + SPARK_TAIL,
    # spark-submit itself failed (a Java exception with its frames).
    "java": 'Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: x#y;1]\n'
    "at org.apache.spark.deploy.SparkSubmit.submit(SparkSubmit.scala:226)\n... 12 more\n",
}
SCRIPT = """
import json, sys
sys.path.append(sys.argv[1])
from airflow.sdk.exceptions import AirflowException
from tablekeeper_submit import TablekeeperJobOperator

def failure(code, text, result=None):
    tail = f"Cannot execute: spark-submit ... Error code is: {code}.\\nLast spark-submit output:\\n{text}"
    err = op._failure(AirflowException(tail), result)
    return [type(err).__name__, str(err)]

outputs, out = json.loads(sys.argv[2]), {}
op = TablekeeperJobOperator(task_id="compact", job="compact", table="db.t", application="jobs/compact.py")
for name, text in outputs.items():
    for code in (1, 2, 3, 4, 5):
        out[f"{name}-{code}"] = failure(code, text)
out["result"] = failure(3, "x", {"error": "gc off"})
no_code = op._failure(AirflowException("No driver id is known"), None)
out["no-code"] = [type(no_code).__name__, str(no_code)]
print(json.dumps(out))
"""


def test_failure_reason_and_retry_policy(airflow: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(AIRFLOW_PYTHON), "-c", SCRIPT, str(DAGS_FOLDER), json.dumps(OUTPUTS)],
        env=airflow_env(tmp_path / "airflow-home", tmp_path / "unused.yaml"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    reasons = {
        "cli": "--strategy: invalid choice: 'zorder'",
        "python": "ModuleNotFoundError: No module named 'fastavro'",
        "java": 'Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: x#y;1]',
    }
    for name, reason in reasons.items():
        for code in (1, 2, 3, 4, 5):
            kind = "AirflowException" if code in (1, 4) else "AirflowFailException"
            assert got[f"{name}-{code}"] == [kind, f"compact db.t failed (exit {code}): {reason}"]
    # The result file's error wins over the output; without an exit code the provider's error stays.
    assert got["result"] == ["AirflowFailException", "compact db.t failed (exit 3): gc off"]
    assert got["no-code"] == ["AirflowException", "No driver id is known"]
