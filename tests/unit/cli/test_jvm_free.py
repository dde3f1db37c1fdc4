"""Failures knowable without Spark, and small dry runs, never start a JVM.

Each case runs the console script in its own interpreter, with ``JAVA_HOME`` pointing nowhere (a
job that tried to start Spark would fail differently), and asks PySpark afterwards whether a
gateway or a SparkContext was ever created in that process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from deltalake import write_deltalake

from tests.conftest import REPO_ROOT
from tests.support.small_tables import sql_table

PROBE = """
import json, sys
from tablekeeper.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as stop:
    code = stop.code
spark = sys.modules.get("pyspark")
started = spark is not None and (
    spark.SparkContext._gateway is not None or spark.SparkContext._active_spark_context is not None
)
sys.stderr.write("jvm-probe " + json.dumps({"code": code, "spark_started": started}) + "\\n")
"""


def _probe(*args: str) -> tuple[dict[str, Any], str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "JAVA_HOME": "/nonexistent-java-home"},
        timeout=120,
        check=False,
    )
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("jvm-probe "), proc.stderr[-2000:]
    reason = lines[-2] if len(lines) > 1 else ""
    return json.loads(lines[-1].removeprefix("jvm-probe ")), reason, proc.stdout


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A small v2 table with three snapshots and an old orphan (in a sqlite catalog), a corrupt
    and a future-version copy of it read by path, and Delta sources."""
    root = tmp_path_factory.mktemp("jvm-free")
    files = [(f"{i}.parquet", 7, 100) for i in range(3)]
    conf, location = sql_table(root, files, format_version=2, write_files=True)
    data = Path(location.removeprefix("file://")) / "data"
    orphan = data / "orphan.parquet"
    orphan.write_bytes(b"left behind")
    week_ago = time.time() - 7 * 86400
    os.utime(orphan, (week_ago, week_ago))

    table_dir = Path(location.removeprefix("file://"))
    newest = sorted((table_dir / "metadata").glob("*.metadata.json"))[-1]
    corrupt = root / "corrupt"
    shutil.copytree(table_dir / "metadata", corrupt / "metadata")
    (corrupt / "metadata" / newest.name).write_text('{"format-version": 2, "table-')
    future = root / "future"
    shutil.copytree(table_dir / "metadata", future / "metadata")
    text = json.loads(newest.read_text())
    text["format-version"] = 9
    (future / "metadata" / newest.name).write_text(json.dumps(text))
    copied = root / "copied"  # its metadata still names the original's location
    shutil.copytree(table_dir, copied)
    # Delta tables written here (delta-rs, and a log by hand): the unit tier reads no ../shared.
    delta = root / "delta"
    write_deltalake(str(delta), pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    features = root / "features"  # reader version 5 with a reader feature nobody knows
    (features / "_delta_log").mkdir(parents=True)
    (features / "_delta_log" / "00000000000000000000.json").write_text(
        json.dumps(
            {"protocol": {"minReaderVersion": 5, "minWriterVersion": 7, "readerFeatures": ["blahabl"]}}
        )
        + "\n"
        + json.dumps(
            {
                "metaData": {
                    "id": "5fba94ed-9794-4965-ba6e-6ee3c0d22af9",
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": json.dumps({"type": "struct", "fields": []}),
                    "partitionColumns": [],
                    "configuration": {},
                }
            }
        )
        + "\n"
    )
    bad_yaml = root / "bad.yaml"
    bad_yaml.write_text("catalogs: [\n")
    doc = yaml.safe_load(Path(conf).read_text())
    for body in doc["catalogs"].values():
        body["delta-partition-timezone"] = "America/NewYork"
    bad_zone = root / "bad-zone.yaml"
    bad_zone.write_text(yaml.safe_dump(doc))
    return {
        "conf": str(conf),
        "wh": str(root),
        "corrupt": str(corrupt),
        "future": str(future),
        "copied": str(copied),
        "delta": str(delta),
        "features": str(features),
        "bad_yaml": str(bad_yaml),
        "bad_zone": str(bad_zone),
        # A cutoff every snapshot is older than, however soon after the fixture a case runs.
        "an_hour_on": str(int(time.time() * 1000) + 3_600_000),
        "missing": str(root / "nowhere"),
    }


CONVERT_ON_SPARK = ["convert-delta", "--source", "{delta}", "--target", "db.x", "--engine", "spark"]

# (case, argv with {placeholders}, exit code, words of stderr's last line; None: a dry run's JSON)
CASES: list[tuple[str, list[str], int, str | None]] = [
    *(
        (f"missing-table-{job}", [job, "--table", "db.missing"], 2, "not found in catalog c")
        for job in (
            "expire-snapshots",
            "remove-orphans",
            "compact",
            "backfill-row-lineage",
            "compute-stats",
            "rewrite-position-deletes",
            "rewrite-manifests",
            "health",
        )
    ),
    ("missing-path-table", ["remove-orphans", "--table", "{missing}"], 2, "is not an Iceberg table"),
    (
        "missing-delta-source",
        ["convert-delta", "--source", "{missing}", "--target", "db.x"],
        2,
        "not a Delta table",
    ),
    *(
        (f"corrupt-metadata-{job}", [job, "--table", "{corrupt}"], 3, "is not valid JSON")
        for job in ("expire-snapshots", "remove-orphans", "compact", "health")
    ),
    *(
        (f"future-format-{job}", [job, "--table", "{future}"], 3, "format version 9 is not supported")
        for job in ("expire-snapshots", "remove-orphans", "compact")
    ),
    (
        "unknown-catalog",
        ["expire-snapshots", "--table", "db.t", "--catalog", "nope"],
        2,
        "unknown catalog 'nope'",
    ),
    (
        "invalid-catalog-file",
        ["compact", "--table", "db.t", "--conf-file", "{bad_yaml}"],
        2,
        "is not valid YAML",
    ),
    (
        "bad-retain-last",
        ["expire-snapshots", "--table", "db.t", "--retain-last", "0"],
        2,
        "must be at least 1",
    ),
    (
        "bad-older-than",
        ["expire-snapshots", "--table", "db.t", "--older-than", "soon"],
        2,
        "is not a timestamp",
    ),
    (
        "bad-partition-timezone",
        [*CONVERT_ON_SPARK, "--partition-timezone", "America/NewYork"],
        2,
        "'America/NewYork' is not a time zone name",
    ),
    (
        "bad-catalog-partition-timezone",
        [*CONVERT_ON_SPARK, "--conf-file", "{bad_zone}"],
        2,
        "delta-partition-timezone: 'America/NewYork' is not a time zone name",
    ),
    ("bad-size", ["compact", "--table", "db.t", "--target-file-size", "big"], 2, "is not a size"),
    ("bad-engine", ["remove-orphans", "--table", "db.t", "--engine", "gpu"], 2, "invalid choice: 'gpu'"),
    ("short-retention", ["remove-orphans", "--table", "db.t", "--older-than", "2h"], 3, "under 24 hours"),
    ("copied-table-orphans", ["remove-orphans", "--table", "{copied}"], 3, "copied or moved"),
    (
        "unsupported-delta-reader",
        ["convert-delta", "--source", "{features}", "--target", "db.y"],
        3,
        "reader version",
    ),
    (
        "dry-run-expire",
        ["expire-snapshots", "--table", "db.t", "--older-than", "{an_hour_on}", "--dry-run"],
        0,
        None,
    ),
    ("dry-run-orphans", ["remove-orphans", "--table", "db.t", "--dry-run"], 0, None),
    ("dry-run-convert", ["convert-delta", "--source", "{delta}", "--target", "db.z", "--dry-run"], 0, None),
    ("health-report", ["health", "--table", "db.t"], 0, None),
]


@pytest.mark.parametrize(("case", "argv", "code", "reason"), CASES, ids=[c[0] for c in CASES])
def test_no_spark_session_is_created(
    tables: dict[str, str], case: str, argv: list[str], code: int, reason: str | None
) -> None:
    args = [a.format(**tables) for a in argv]
    if "--conf-file" not in args:
        args += ["--conf-file", tables["conf"]]
    args += ["--warehouse", tables["wh"]]
    probe, last_line, stdout = _probe(*args)
    assert probe["code"] == code, (case, last_line)
    assert probe["spark_started"] is False, case
    if reason is not None:
        assert reason in last_line, (case, last_line)
    result = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    if code == 0:
        assert result is not None and result["status"] in ("dry_run", "ok", "noop"), result
    if code == 0 and case.startswith("dry-run-") and case != "dry-run-convert":
        assert result is not None and result["metrics"]["engine"] == "driver", result
    if case == "dry-run-expire":
        assert result is not None and result["metrics"]["expired_snapshots_count"] == 2, result
    if case == "dry-run-orphans":
        assert result is not None and result["metrics"]["orphan_file_count"] == 1, result
