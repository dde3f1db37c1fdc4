"""Jobs submitted to a Spark standalone cluster (tests/support/spark_cluster.py) as the docs' "Running
on a cluster" says: the script, the zip through --py-files, the runtime jars through --jars (or their
coordinates through --packages), the README's confs, and the catalog file named by the job's
--conf-file (or shipped with --files).

Nothing reaches the executors implicitly: the submit runs from a directory that is not the checkout,
with no TABLEKEEPER_*, SPARK_* or PYSPARK_* variables, and the executors' Python
(spark.pyspark.python) holds tablekeeper's dependencies but not tablekeeper itself (the .venv has it
as an editable install; the wrapper below runs it without site, so that install is not on its
path): tasks import tablekeeper from the submitted zip or fail. Each submit writes its own event
log, from which the tests read which executor ran which task."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tablekeeper.settings import PACKAGE_ROLES, jar_specs, jars_dir
from tablekeeper.spark.session import DELTA_CATALOG, DELTA_EXTENSION, ICEBERG_EXTENSION, packages_arg
from tests.support.spark_cluster import HOST, LEAN_JVM, StandaloneCluster
from tests.support.spark_submit import REPO_ROOT, VENV_BIN, last_json_line

S3_ROLE = "s3"
README_MARKER = "<!-- run as written by tests/cluster/test_cluster_jobs.py"


def runtime_jars(*roles: str) -> list[Path]:
    """The jars of conf/jars.txt's runtime roles (and ``roles``), as `make setup` cached them."""
    wanted = (*PACKAGE_ROLES, *roles)
    return [jars_dir() / s.file_name for s in jar_specs() if s.role in wanted]


def executor_python(directory: Path) -> Path:
    """The venv's interpreter and its site-packages without site's .pth files (the editable
    tablekeeper install among them): the README's "Python holding tablekeeper's dependencies"."""
    wrapper = directory / "executor-python"
    if wrapper.exists():
        return wrapper
    directory.mkdir(parents=True, exist_ok=True)
    site_packages = sysconfig.get_paths()["purelib"]
    wrapper.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site_packages}" exec {VENV_BIN / "python"} -S "$@"\n'
    )
    wrapper.chmod(0o755)
    probe = subprocess.run(
        [str(wrapper), "-c", "import pyarrow, pyspark\nimport tablekeeper"],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode != 0 and "No module named 'tablekeeper'" in probe.stderr, probe.stderr
    return wrapper


def local_catalog_file(path: Path, warehouse: Path) -> Path:
    """A catalog file whose default catalog ``local`` is the sqlite catalog of ``warehouse`` (where
    tests.support.spark_submit's tables are)."""
    path.write_text(
        "default: local\ncatalogs:\n  local:\n    type: sql\n"
        f"    uri: sqlite:///{warehouse}/catalog.db\n    warehouse: {warehouse}/sql\n"
    )
    return path


def submit_env() -> dict[str, str]:
    """The caller's environment without anything tablekeeper or Spark would read from it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TABLEKEEPER_", "SPARK_", "PYSPARK_"))}
    env.update(
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(VENV_BIN.parent),
        SPARK_SUBMIT_OPTS=LEAN_JVM,  # the driver JVM: test economy, not the command's business
    )
    return env


@dataclass(frozen=True)
class Submission:
    """Where one submit runs from and logs to."""

    cluster: StandaloneCluster
    workdir: Path  # the submit's working directory (outside the checkout)
    events: Path  # this submit's event log directory

    @classmethod
    def under(cls, cluster: StandaloneCluster, root: Path, name: str) -> Submission:
        workdir, events = root / "submit", root / "events" / name
        workdir.mkdir(parents=True, exist_ok=True)
        events.mkdir(parents=True)
        return cls(cluster, workdir, events)

    def command(
        self,
        script: str,
        args: Sequence[str],
        *,
        jars: Sequence[Path] | None = None,
        packages: bool = False,
        files: Sequence[Path] = (),
        conf: dict[str, str] | None = None,
    ) -> list[str]:
        """spark-submit in client mode: the README's options, and this test's cluster settings."""
        ivy = f"spark.jars.ivySettings={REPO_ROOT / 'conf' / 'ivysettings.xml'}"
        shipped = (
            ["--packages", packages_arg(), "--conf", ivy]
            if packages
            else ["--jars", ",".join(str(j) for j in (jars if jars is not None else runtime_jars()))]
        )
        settings = {
            "spark.sql.extensions": f"{DELTA_EXTENSION},{ICEBERG_EXTENSION}",
            "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
            "spark.sql.session.timeZone": "UTC",
            "spark.pyspark.python": str(executor_python(self.workdir)),
            **self.test_settings(),
            **(conf or {}),
        }
        return [
            str(VENV_BIN / "spark-submit"),
            *("--master", self.cluster.url, "--deploy-mode", "client"),
            *shipped,
            *(a for key, value in settings.items() for a in ("--conf", f"{key}={value}")),
            *(["--files", ",".join(str(f) for f in files)] if files else []),
            *("--py-files", str(REPO_ROOT / "dist" / "tablekeeper.zip")),
            str(REPO_ROOT / "jobs" / script),
            *args,
        ]

    def test_settings(self) -> dict[str, str]:
        """What these tests add to the README's command: loopback, small executors, an event log."""
        return {
            "spark.pyspark.driver.python": str(VENV_BIN / "python"),
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.executor.memory": "512m",
            "spark.ui.enabled": "false",
            "spark.executor.extraJavaOptions": LEAN_JVM,
            # No task before both executors registered: each one gets the first offer.
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": self.events.as_uri(),
            # One plain JSON-lines file per application (Spark 4 rolls and zstd-compresses by default).
            "spark.eventLog.rolling.enabled": "false",
            "spark.eventLog.compress": "false",
        }

    def readme_command(self, catalog_file: Path) -> str:
        """README's standalone block as bash runs it: its placeholders filled in, the checkout's
        relative paths made absolute (the submit runs elsewhere), this test's settings added."""
        text = (REPO_ROOT / "docs" / "deploy" / "cluster.md").read_text(encoding="utf-8")
        assert README_MARKER in text, "docs/deploy/cluster.md lost the standalone cluster block"
        match = re.search(r"```\n(.*?)\n```", text.split(README_MARKER, 1)[1], re.S)
        assert match is not None
        lines = match.group(1).splitlines()
        filled = {
            "spark://<master-host>:7077": self.cluster.url,
            "<executors' python>": str(executor_python(self.workdir)),
            "<dir>/catalogs.yaml": str(catalog_file),
            " conf/": f" {REPO_ROOT}/conf/",
            "=conf/": f"={REPO_ROOT}/conf/",
            " dist/": f" {REPO_ROOT}/dist/",
            "  jobs/": f"  {REPO_ROOT}/jobs/",
        }
        for placeholder, value in filled.items():
            assert any(placeholder in line for line in lines), placeholder
            lines = [line.replace(placeholder, value) for line in lines]
        extra = [f"  --conf {shlex.quote(f'{k}={v}')} \\" for k, v in self.test_settings().items()]
        return "\n".join([*lines[:-1], *extra, lines[-1]])

    def run_shell(self, command: str) -> Submitted:
        proc = subprocess.run(
            ["bash", "-c", command],
            cwd=self.workdir,
            env=submit_env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        return self.finished(command, proc.returncode, proc.stdout, proc.stderr)

    def run_plan(self, plan: Sequence[tuple[str, Sequence[str]]], **options: Any) -> Submitted:
        """Several job scripts (``jobs/<script>`` with its arguments) in one application, one after
        another, each as spark-submit runs it alone (tests/support/submit_jobs.py): one driver and
        one executor start for them all."""
        driver = REPO_ROOT / "tests" / "support" / "submit_jobs.py"
        steps = json.dumps([[script, list(args)] for script, args in plan])
        return self.run(str(driver), str(REPO_ROOT / "jobs"), steps, **options)

    def run(self, script: str, *args: str, **options: Any) -> Submitted:
        """Submit and wait; the job must end ``ok``."""
        cmd = self.command(script, args, **options)
        proc = subprocess.run(
            cmd, cwd=self.workdir, env=submit_env(), capture_output=True, text=True, timeout=300, check=False
        )
        return self.finished(" ".join(cmd), proc.returncode, proc.stdout, proc.stderr)

    def finished(self, command: str, returncode: int, stdout: str, stderr: str) -> Submitted:
        """The submit's outcome: it exited 0 and its job's JSON result says ``ok``."""
        assert returncode == 0, f"{command}\n{stdout[-3000:]}\n{stderr[-5000:]}"
        result = last_json_line(stdout)
        assert result["status"] == "ok", result
        return Submitted(result, stderr, self)


@dataclass(frozen=True)
class Submitted:
    result: dict[str, Any]
    log: str  # Spark's log (the driver's stderr)
    submission: Submission

    @property
    def metrics(self) -> dict[str, Any]:
        metrics = self.result["metrics"]
        assert isinstance(metrics, dict)
        return metrics

    def tasks(self) -> TaskLog:
        return task_log(self.submission.events)

    def runs(self) -> list[dict[str, Any]]:
        """A plan's runs (tests/support/submit_jobs.py), each job's result ``ok``."""
        runs: list[dict[str, Any]] = self.result["runs"]
        for run in runs:
            assert run["code"] == 0 and run["result"]["status"] == "ok", run
        return runs

    def assert_both_workers_ran_tasks_of(self, run: dict[str, Any]) -> None:
        """One job of a plan ran tasks on both executors (each on its own worker, as
        ``assert_both_workers_ran_tasks`` checks for the application)."""
        start, end = run["ms"]
        ran = {executor for launched, executor in self.tasks().launches if start <= launched <= end}
        assert len(ran) == 2, (run["script"], ran)

    def assert_both_workers_ran_tasks(self) -> None:
        """The application ran tasks on two executors, each on its own worker (one core each, so one
        executor each): that worker's work directory holds <app id>/<executor id>."""
        log = self.tasks()
        assert len(log.succeeded) == 2, log
        for worker in self.submission.cluster.workers:
            launched = [p.name for p in (worker.work_dir / log.app).iterdir()]
            assert len(launched) == 1 and launched[0] in log.succeeded, (worker.name, launched, log)


@dataclass(frozen=True)
class TaskLog:
    """One application's tasks from its event log."""

    app: str
    succeeded: dict[str, int]  # executor id -> tasks that ended in success there
    failed: dict[str, int]  # reason (ExecutorLostFailure, ...) -> tasks that ended so
    executors_removed: int
    launches: tuple[tuple[int, str], ...] = ()  # (launch time in epoch ms, executor id) of successes


def task_log(events: Path) -> TaskLog:
    logs = [p for p in events.iterdir() if not p.name.startswith(".")]  # Hadoop may write .crc files
    assert len(logs) == 1, logs
    succeeded: dict[str, int] = {}
    failed: dict[str, int] = {}
    removed = 0
    launches: list[tuple[int, str]] = []
    for line in logs[0].read_text().splitlines():
        event = json.loads(line)
        if event["Event"] == "SparkListenerExecutorRemoved":
            removed += 1
        if event["Event"] != "SparkListenerTaskEnd":
            continue
        assert event["Task Info"]["Host"] == HOST
        reason = event["Task End Reason"]["Reason"]
        if reason == "Success":
            executor = event["Task Info"]["Executor ID"]
            succeeded[executor] = succeeded.get(executor, 0) + 1
            launches.append((int(event["Task Info"]["Launch Time"]), executor))
        else:
            failed[reason] = failed.get(reason, 0) + 1
    return TaskLog(logs[0].name.removesuffix(".inprogress"), succeeded, failed, removed, tuple(launches))
