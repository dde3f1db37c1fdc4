"""The console script as a user runs it: a real subprocess, real stdout/stderr and exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.small_tables import sql_table

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


def test_doctor_without_jars_exits_non_zero_with_the_fix(tmp_path: Path) -> None:
    proc = run("doctor", "--json", env={"TABLEKEEPER_JARS_DIR": str(tmp_path / "gone")})
    assert proc.returncode == 2
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"] is False
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tablekeeper: jars missing from")
    # The default line's setup, or another line's (make setup SPARK=3.5).
    assert re.search(r"run make setup( SPARK=\d\.\d+)?$", last), last
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


def _table_with_one_file(tmp_path: Path) -> tuple[Path, str]:
    return sql_table(tmp_path, [("a.parquet", 7, 700)], format_version=3)


def test_inspect_prints_metadata_tables_as_json(tmp_path: Path) -> None:
    conf, location = _table_with_one_file(tmp_path)
    common = ["--table", "db.t", "--conf-file", str(conf), "--warehouse", str(tmp_path)]
    proc = run("inspect", *common, "--what", "all", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["metadata"]["format-version"] == 3
    assert [s["operation"] for s in out["snapshots"]] == ["append"]
    assert out["refs"]["main"]["snapshot_id"] == out["snapshot_id"]
    assert [(f["file_path"], f["record_count"], f["first_row_id"]) for f in out["files"]] == [
        (f"{location}/data/a.parquet", 7, 0)
    ]
    assert out["manifests"][0]["added_data_files_count"] == 1
    # The same table by its path, read-only.
    by_path = json.loads(run("inspect", "--table", location, "--what", "refs").stdout)
    assert by_path["refs"] == out["refs"]


def test_inspect_bad_input_is_one_line_with_its_exit_code(tmp_path: Path) -> None:
    conf, location = _table_with_one_file(tmp_path)
    common = ["--conf-file", str(conf), "--warehouse", str(tmp_path)]
    missing = run("inspect", "--table", "db.nope", *common)
    assert missing.returncode == 2
    assert (
        missing.stderr.strip()
        .splitlines()[-1]
        .startswith("tablekeeper: table db.nope not found in catalog c")
    )
    not_table = run("inspect", "--table", str(tmp_path))
    assert not_table.returncode == 2
    assert "is not an Iceberg table" in not_table.stderr.strip().splitlines()[-1]
    current = sorted(Path(location, "metadata").glob("*.metadata.json"))[-1]
    current.write_text(current.read_text()[:50])
    corrupt = run("inspect", "--table", "db.t", *common)
    assert corrupt.returncode == 3
    last = corrupt.stderr.strip().splitlines()[-1]
    assert "is not valid JSON" in last and "Traceback" not in corrupt.stderr


@pytest.mark.corpus  # reads ../shared
def test_convert_delta_prints_one_json_result_and_writes_the_result_file(tmp_path: Path) -> None:
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(
        "default: c\ncatalogs:\n"
        "  c: {type: sql, uri: 'sqlite:///${warehouse}/c.db', warehouse: '${warehouse}'}\n"
    )
    source = REPO_ROOT.parent / "shared" / "delta-tables" / "delta-rs" / "table-with-dv-small"
    common = ["--conf-file", str(conf), "--warehouse", str(tmp_path)]
    dry = run("convert-delta", "--source", str(source), "--target", "db.t", *common, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout.strip().splitlines()[-1])
    assert planned["status"] == "dry_run" and planned["metrics"]["files_with_deletion_vectors"] == 1
    out = tmp_path / "result.json"
    real = run(
        "convert-delta",
        "--source",
        str(source),
        "--target",
        "db.t",
        *common,
        "--format-version",
        "3",
        "--result-file",
        str(out),
    )
    assert real.returncode == 0, real.stderr
    result = json.loads(real.stdout.strip().splitlines()[-1])
    assert result == json.loads(out.read_text())
    assert result["status"] == "ok" and result["metrics"]["delete_files"] == 1
    assert result["metrics"]["manifest_writer"] == "driver"
    again = run("convert-delta", "--source", str(source), "--target", "db.t", *common)
    assert again.returncode == 2
    assert json.loads(again.stdout.strip().splitlines()[-1])["status"] == "failed"
    assert again.stderr.strip().splitlines()[-1].startswith("tablekeeper: target db.t already exists")


@pytest.mark.corpus  # reads ../shared
def test_convert_delta_refuses_unsupported_options_and_tables(tmp_path: Path) -> None:
    source = REPO_ROOT.parent / "shared" / "delta-tables" / "delta-rs"
    conf = tmp_path / "catalogs.yaml"
    conf.write_text("catalogs:\n  c: {type: filesystem, warehouse: '${warehouse}'}\n")
    common = ["--target", "db.t", "--conf-file", str(conf), "--warehouse", str(tmp_path)]
    simple = ["convert-delta", "--source", str(source / "simple_table"), *common]
    # Incremental into a target that does not exist yet is a full conversion.
    planned = run(*simple, "--mode", "incremental", "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout.strip().splitlines()[-1])["metrics"]["mode"] == "full"
    assert run(*simple).returncode == 0
    # The same command again (as after a kill that came once the conversion was visible) finds
    # its work done; a full conversion asking for something else is told to go incremental.
    again = run(*simple)
    assert again.returncode == 0, again.stderr
    done = json.loads(again.stdout.strip().splitlines()[-1])["metrics"]
    assert done["note"] == "already converted" and done["snapshots_committed"] == 0
    other_format = run(*simple, "--format-version", "3")
    assert other_format.returncode == 2
    assert "use --mode incremental" in other_format.stderr.strip().splitlines()[-1]
    caught_up = run(*simple, "--mode", "incremental")
    assert caught_up.returncode == 0
    assert json.loads(caught_up.stdout.strip().splitlines()[-1])["metrics"]["snapshots_committed"] == 0
    other = [*common[2:], "--target", "db.other"]
    refused = run("convert-delta", "--source", str(source / "simple_table_features"), *other)
    assert refused.returncode == 3
    assert json.loads(refused.stdout.strip().splitlines()[-1])["status"] == "refused"
    assert "Delta reader version 5" in refused.stderr.strip().splitlines()[-1]


def test_destructive_jobs_reject_malformed_options_before_starting_spark(tmp_path: Path) -> None:
    cases = [
        (("expire-snapshots", "--table", "db.t", "--retain-last", "0"), "must be at least 1"),
        (("expire-snapshots", "--table", "db.t", "--snapshot-ids", "1,x"), "comma-separated list"),
        (("remove-orphans", "--table", "db.t", "--prefix-mismatch", "maybe"), "invalid choice: 'maybe'"),
        (("remove-orphans", "--table", "db.t", "--max-concurrent-deletes", "-2"), "must be at least 1"),
    ]
    for args, reason in cases:
        proc = run(*args)
        assert proc.returncode == 2, args
        assert reason in proc.stderr.strip().splitlines()[-1], args
    proc = run(
        "remove-orphans",
        "--table",
        "db.t",
        "--equal-schemes",
        "s3a",
        "--conf-file",
        str(tmp_path / "none.yaml"),
    )
    assert proc.returncode == 2
    assert "is not name=name: use e.g. s3a=s3" in proc.stderr.strip().splitlines()[-1]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["job"] == "remove-orphans" and result["status"] == "failed"


def test_metadata_failures_answer_without_starting_spark(tmp_path: Path) -> None:
    """A missing table, or a refusal decided from metadata, is answered before any JVM starts."""
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(f"default: fs\ncatalogs:\n  fs:\n    type: filesystem\n    warehouse: {tmp_path}/wh\n")
    for job in ("expire-snapshots", "remove-orphans", "compact"):
        proc = run(job, "--table", "db.missing", "--conf-file", str(conf))
        assert proc.returncode == 2, (job, proc.stderr)
        assert "not found in catalog fs" in proc.stderr.strip().splitlines()[-1]
        assert "log4j" not in proc.stderr and "SparkContext" not in proc.stderr, job
    table_conf, _ = _table_with_one_file(tmp_path)
    common = ["--table", "db.t", "--conf-file", str(table_conf), "--warehouse", str(tmp_path)]
    proc = run("remove-orphans", *common, "--older-than", "2h")
    assert proc.returncode == 3 and "under 24 hours" in proc.stderr.strip().splitlines()[-1]
    assert "log4j" not in proc.stderr
    # A small table's dry runs need no Spark at all.
    for job in ("expire-snapshots", "remove-orphans"):
        proc = run(job, *common, "--dry-run")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.strip().splitlines()[-1])["metrics"]["engine"] == "driver"
        assert "log4j" not in proc.stderr


def test_an_unexpected_failure_still_ends_with_one_json_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schedulers parse stdout's last line: a failure no typed error describes ends with a JSON
    result too (status failed, exit 1), scrubbed like the stderr line (there was none before)."""
    from tablekeeper.cli import main
    from tablekeeper.jobs import expire_snapshots

    sql_table(tmp_path, [("a.parquet", 1, 10)], format_version=2)
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(
        f"catalogs:\n  c: {{type: sql, uri: 'sqlite:///{tmp_path}/c.db', warehouse: {tmp_path}}}\n"
    )

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire at http://u:hunter22@h/x")

    monkeypatch.setattr(expire_snapshots, "run_expire", boom)
    argv = ["expire-snapshots", "--table", "db.t", "--catalog", "c", "--engine", "driver"]
    code = main([*argv, "--conf-file", str(conf)])
    out, err = capsys.readouterr()
    assert code == 1
    result = json.loads(out.strip().splitlines()[-1])
    assert result["status"] == "failed" and result["job"] == "expire-snapshots"
    assert result["error"] == "unexpected RuntimeError: disk on fire at http://u:***@h/x"
    assert err.strip().splitlines()[-1].startswith("tablekeeper: unexpected RuntimeError: disk on fire")
    assert "hunter22" not in out + err
