"""A Glue Data Catalog for tests: moto's server mode on a loopback port, in a process of its own.

moto (5.2) answers Glue's API as AWS documents it except in three points this launcher makes good
before serving, each as Glue itself behaves:

- UpdateTable ignores ``VersionId``. Glue refuses an update whose VersionId is not the table's
  current one (ConcurrentModificationException); that refusal is what makes a commit safe against
  a concurrent writer, Iceberg Java's and tablekeeper's alike. Here the check and the update run
  under one lock, so two racing updates of one version cannot both land.
- CreateTable checks for a present table and inserts it in two steps: under the same lock here.
- GetTables and GetDatabases return everything in one answer. Glue pages them (NextToken); here at
  most ``PAGE`` items an answer, so a client that ignores NextToken misses tables.

Usage: python -m tests.support.glue_server <port>
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.object_store import LOOPBACK, free_loopback_port, log_tail, port_open, stop_process

REPO_ROOT = Path(__file__).resolve().parents[2]
PAGE = 2
REGION = "us-east-1"
_START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class GlueEndpoint:
    """Where the test Glue listens, and a fresh identity per run (moto takes any: a random one lets
    a test scan outputs for it)."""

    endpoint: str  # "http://127.0.0.1:PORT"
    access_key: str
    secret_key: str = field(repr=False)
    region: str = REGION

    def env(self) -> dict[str, str]:
        """The AWS credential chain's environment variables for this identity."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,  # the Java SDK's name
            "AWS_DEFAULT_REGION": self.region,  # boto3's
        }

    def client(self) -> Any:
        """A boto3 Glue client of the test's own, to look at or change the tables behind the
        catalog's back."""
        import boto3

        return boto3.session.Session(
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key, region_name=self.region
        ).client("glue", endpoint_url=self.endpoint)


@contextmanager
def run_glue_server(workdir: Path) -> Iterator[GlueEndpoint]:
    port = free_loopback_port()
    glue = GlueEndpoint(
        f"http://{LOOPBACK}:{port}", "AKIA" + secrets.token_hex(8).upper(), secrets.token_hex(20)
    )
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "glue.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH")))),
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.glue_server", str(port)],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not port_open(port):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the Glue server exited with {proc.returncode} at start:\n{log_tail(log)}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Glue server not serving after {_START_TIMEOUT_S:.0f} s:\n{log_tail(log)}"
                )
            time.sleep(0.1)
        yield glue
    finally:
        stop_process(proc)


def _as_glue_does() -> None:
    """moto's Glue, made to behave as Glue in the three points the module's docstring names."""
    from moto.core.exceptions import JsonRESTError
    from moto.core.responses import ActionResult, EmptyResult
    from moto.glue.responses import GlueResponse

    lock = threading.Lock()

    def update_table(self: GlueResponse) -> ActionResult:
        params = self.parameters
        database, table_input = params["DatabaseName"], params["TableInput"]
        with lock:
            table = self.glue_backend.get_table(database, table_input["Name"])
            wanted = params.get("VersionId")
            if wanted is not None and str(wanted) != str(table._current_version):
                raise JsonRESTError(
                    "ConcurrentModificationException",
                    f"Update table failed due to concurrent modifications (version {wanted} is not "
                    f"the table's {table._current_version})",
                )
            self.glue_backend.update_table(database, table_input["Name"], table_input)
        return EmptyResult()

    create_table = GlueResponse.create_table

    def create_table_once(self: GlueResponse) -> ActionResult:
        with lock:
            return create_table(self)

    def paged(items: list[Any], params: dict[str, Any], key: str) -> ActionResult:
        start = int(params.get("NextToken") or 0)
        size = min(int(params.get("MaxResults") or PAGE), PAGE)
        answer: dict[str, Any] = {key: [item.as_dict() for item in items[start : start + size]]}
        if start + size < len(items):
            answer["NextToken"] = str(start + size)
        return ActionResult(answer)

    def get_tables(self: GlueResponse) -> ActionResult:
        params = self.parameters
        tables = self.glue_backend.get_tables(params["DatabaseName"], params.get("Expression"))
        return paged(tables, params, "TableList")

    def get_databases(self: GlueResponse) -> ActionResult:
        return paged(self.glue_backend.get_databases(), self.parameters, "DatabaseList")

    GlueResponse.update_table = update_table  # type: ignore[method-assign]
    GlueResponse.create_table = create_table_once  # type: ignore[method-assign]
    GlueResponse.get_tables = get_tables  # type: ignore[method-assign]
    GlueResponse.get_databases = get_databases  # type: ignore[method-assign]


def main() -> None:
    from moto.server import main as serve

    _as_glue_does()
    serve(["-H", LOOPBACK, "-p", sys.argv[1]])


if __name__ == "__main__":
    main()
