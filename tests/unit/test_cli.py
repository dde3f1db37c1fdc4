"""The console script as a user runs it: a real subprocess, real stdout/stderr and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

TABLEKEEPER = [sys.executable, "-m", "tablekeeper"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TABLEKEEPER, *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )


def test_doctor_json_reports_versions_and_exits_zero() -> None:
    proc = run("doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"] is True
    assert report["spark"].startswith("4.1.")
    assert report["delta"] == report["delta_python"]
    assert report["iceberg"].startswith("1.1")
    assert int(report["java"].split(".")[0]) >= 17
    assert all(j["present"] and Path(j["path"]).is_file() for j in report["jars"])
    assert "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13" in report["packages"]


def test_doctor_without_jars_exits_non_zero_with_the_fix(tmp_path: Path) -> None:
    proc = run("doctor", "--json", env={"TABLEKEEPER_JARS_DIR": str(tmp_path / "gone")})
    assert proc.returncode == 2
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"] is False
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tablekeeper: jars missing from")
    assert last.endswith("run make setup")
    assert "Traceback" not in proc.stderr


def test_doctor_without_java_names_the_fix(tmp_path: Path) -> None:
    env = {"JAVA_HOME": str(tmp_path), "PATH": str(Path(sys.executable).parent)}
    proc = run("doctor", env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "tablekeeper: Java 17+ not found: install a JDK 17 and set JAVA_HOME"
    )


def test_unknown_command_is_a_usage_error_with_one_line_reason() -> None:
    proc = run("frobnicate")
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert "invalid choice: 'frobnicate'" in last
    assert last.endswith("see 'tablekeeper --help'")
