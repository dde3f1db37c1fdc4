"""The job registry is the one list of jobs: the command line, the spark-submit scripts, the
Airflow tasks and the documentation all follow it."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

from tablekeeper.jobs import JOBS, register_job

ROOT = Path(__file__).resolve().parents[3]


def test_a_job_registered_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="registered already"):
        register_job("compact", "elsewhere", "a second compact")


@pytest.mark.parametrize("name", sorted(JOBS))
def test_each_job_has_its_spark_submit_script_running_its_subcommand(name: str) -> None:
    script = ROOT / JOBS[name].script
    tree = ast.parse(script.read_text())
    subcommands = [
        node.elts[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant)
    ]
    assert subcommands == [name]


def test_every_spark_submit_script_is_a_registered_job() -> None:
    scripts = {p.name for p in (ROOT / "jobs").glob("*.py") if p.name != "__init__.py"}
    assert scripts == {Path(e.script).name for e in JOBS.values()}


@pytest.mark.parametrize("name", sorted(JOBS))
def test_each_job_has_a_documentation_page_or_section(name: str) -> None:
    pages = ROOT / "docs" / "jobs"
    own = pages / f"{name}.md"
    assert own.exists() or any(f"\n## {name}\n" in p.read_text() for p in pages.glob("*.md"))


def test_the_airflow_dags_name_only_registered_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "airflow_dags"))
    sys.modules.pop("tablekeeper_tables", None)
    tables = importlib.import_module("tablekeeper_tables")
    named = {
        *tables.MAINTENANCE_JOBS,
        *tables.ICEBERG_ONLY_JOBS,
        *tables.HEALTH_ASSESSED_JOBS,
        tables.CONVERT_JOB,
        tables.HEALTH_JOB,
    }
    assert named <= set(JOBS)
