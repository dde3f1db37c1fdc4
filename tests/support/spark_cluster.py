"""A Spark standalone cluster on loopback, from the PySpark install the jobs are submitted with:
one master and two workers, each its own JVM (``spark-class``) in its own process group, each worker
with one core, 1 GiB and its own work and local directories. ``stop()`` ends the process groups."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tablekeeper.spark import class_archive
from tests.support.spark_submit import spark_home

HOST = "127.0.0.1"
# Daemons and executors of seconds-long jobs on a small machine: the C1 JIT and the serial
# collector cost less CPU than the optimizing JIT and the parallel collectors save; the line's
# class archive (make setup), where built, spares each JVM loading Spark's classes.
LEAN_JVM = class_archive.java_options("-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class Worker:
    name: str
    work_dir: Path
    local_dir: Path
    proc: subprocess.Popen[bytes]


@dataclass
class StandaloneCluster:
    root: Path
    workers_wanted: int = 2
    worker_memory: str = "1g"  # what each worker offers its executor
    port: int = 0
    webui_port: int = 0
    master: subprocess.Popen[bytes] | None = None
    workers: list[Worker] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{HOST}:{self.webui_port}/json/", timeout=5) as response:
            state = json.load(response)
        assert isinstance(state, dict)
        return state

    def _env(self, name: str) -> dict[str, str]:
        """No SPARK_*/PYSPARK_* of the test run leaks in; an empty conf dir keeps defaults out."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        conf_dir = self.root / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_CONF_DIR=str(conf_dir),
            SPARK_LOCAL_IP=HOST,
            SPARK_LOG_DIR=str(self.root / "logs"),
            SPARK_DAEMON_MEMORY="256m",
            SPARK_DAEMON_JAVA_OPTS=LEAN_JVM,
            SPARK_LOCAL_DIRS=str(self.root / name / "local"),
            SPARK_WORKER_DIR=str(self.root / name / "work"),
        )
        return env

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        (self.root / name / "local").mkdir(parents=True, exist_ok=True)
        (self.root / name / "work").mkdir(parents=True, exist_ok=True)
        log = (self.root / f"{name}.log").open("wb")
        spark_class = spark_home() / "bin" / "spark-class"
        try:
            return subprocess.Popen(
                [str(spark_class), *args],
                cwd=self.root / name,
                env=self._env(name),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop() ends it and its children
            )
        finally:
            log.close()

    def start(self, timeout: float = 90) -> StandaloneCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        self.port, self.webui_port = free_port(), free_port()
        self.master = self._spawn(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", HOST, "--port", str(self.port), "--webui-port", str(self.webui_port)),
            ],
        )
        for i in range(self.workers_wanted):
            self.workers.append(self._start_worker(f"worker{i}"))
        self._wait_alive(timeout)
        return self

    def _start_worker(self, name: str) -> Worker:
        proc = self._spawn(
            name,
            [
                "org.apache.spark.deploy.worker.Worker",
                *("--host", HOST, "--port", str(free_port()), "--webui-port", str(free_port())),
                *("--cores", "1", "--memory", self.worker_memory),
                *("--work-dir", str(self.root / name / "work")),
                self.url,
            ],
        )
        return Worker(name, self.root / name / "work", self.root / name / "local", proc)

    def kill_worker(self, worker: Worker) -> None:
        """SIGKILL the worker and everything it started (its executors and their Python workers),
        as a machine lost would: no goodbye to the master or the driver."""
        _signal_group(worker.proc, signal.SIGKILL)
        worker.proc.wait(timeout=15)

    def replace_worker(self, worker: Worker, timeout: float = 90) -> Worker:
        """A new worker in the place of a dead one (same directories): the cluster is whole again."""
        assert worker.proc.poll() is not None, f"{worker.name} is still running"
        fresh = self._start_worker(worker.name)
        self.workers[self.workers.index(worker)] = fresh
        self._wait_alive(timeout)
        return fresh

    def _wait_alive(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            for name, proc in [("master", self.master), *((w.name, w.proc) for w in self.workers)]:
                assert proc is not None
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log(name)}")
            try:
                alive = [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]
                last = alive
                if len(alive) >= self.workers_wanted:
                    return
            except OSError as e:  # the master's UI is not up yet
                last = e
            time.sleep(0.5)
        raise TimeoutError(f"{self.workers_wanted} ALIVE workers not seen in {timeout}s ({last})")

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        procs = [w.proc for w in self.workers] + ([self.master] if self.master is not None else [])
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=15)
            # Executors a worker started live in its group: none may outlive the cluster.
            _signal_group(proc, signal.SIGKILL)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
