"""The local spark-submit line of docs/deploy/cluster.md, run as written (bash, from the
checkout, with .venv's bin first on PATH as `source .venv/bin/activate` leaves it): compact exactly
as shown, and every other job with its script and options in place of the last line (those in one
application, each script run as spark-submit runs it alone). It submits
dist/tablekeeper.zip (make package) with --packages resolved from conf/jars.txt, so this is the
cluster path on local Spark: the session is spark-submit's, the code the zip's."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

from tablekeeper.spark.session import packages_arg
from tests.support.spark_submit import (
    REPO_ROOT,
    ROWS_PER_FILE,
    VENV_BIN,
    build_package,
    delta_table_in_versions,
    iceberg_table_of_small_files,
    last_json_line,
    live_data_files,
    orphan_path,
    run,
    sql_catalog,
)

MARKER = "<!-- run as written by tests/interop/test_spark_submit_readme.py"
FILES = 6


def readme_block() -> list[str]:
    """The fenced block right after the marker, as lines."""
    text = (REPO_ROOT / "docs" / "deploy" / "cluster.md").read_text(encoding="utf-8")
    assert MARKER in text, "docs/deploy/cluster.md lost the tested spark-submit block"
    match = re.search(r"```\n(.*?)\n```", text.split(MARKER, 1)[1], re.S)
    assert match is not None
    return match.group(1).splitlines()


def activated_env(warehouse: Path) -> dict[str, str]:
    """What `source .venv/bin/activate` sets, and the warehouse conf/catalogs.yaml expands."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.update(
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(VENV_BIN.parent),
        TABLEKEEPER_WAREHOUSE=str(warehouse),
        # Not the command's business, only this test's: jobs of seconds on tiny tables, where the
        # driver JVM's optimizing JIT costs more CPU than it saves.
        SPARK_SUBMIT_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    )
    return env


def submit(command: str, warehouse: Path) -> tuple[dict[str, Any], str]:
    """The job's JSON result and spark-submit's stderr (Spark's log)."""
    proc = run(["bash", "-c", command], env=activated_env(warehouse))
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    result = last_json_line(proc.stdout)
    assert result["status"] == "ok", result
    return result, proc.stderr


def test_readme_spark_submit_line_runs_every_job(tmp_path: Path) -> None:
    build_package()
    block = readme_block()
    assert block[0].startswith("spark-submit ") and "--py-files dist/tablekeeper.zip" in "\n".join(block)
    assert block[-1].strip() == "jobs/compact.py --table db.events"

    # The packages are the coordinates `tablekeeper doctor` prints: the runtime ones, no bench jars.
    awk = re.search(r'"\$\((awk .*? conf/jars\.txt)\)"', "\n".join(block))
    assert awk is not None
    assert run(["bash", "-c", awk.group(1)], env=dict(os.environ)).stdout == packages_arg()

    warehouse = tmp_path / "warehouse"
    catalog = sql_catalog(warehouse)
    delta = tmp_path / "delta" / "orders"
    delta_table_in_versions(delta, 2)
    events = iceberg_table_of_small_files(warehouse, "db.events", files=FILES)
    orphan = orphan_path(events)

    compacted, log = submit("\n".join(block), warehouse)  # the README's own line
    # Spark names the driver code that started each job: tablekeeper ran from the zip.
    assert f"{REPO_ROOT}/dist/tablekeeper.zip/tablekeeper/" in log
    assert compacted["metrics"]["rewritten_data_files_count"] == FILES
    assert len(live_data_files(catalog.load_table("db.events"))) == 1

    # Every other job with its script and options in place of the last line, one application for
    # them all (each script run as spark-submit runs it alone: tests/support/submit_jobs.py), so
    # the test pays for one more driver, not four.
    plan = [
        ["convert_delta.py", ["--source", str(delta), "--target", "db.orders"]],
        ["expire_snapshots.py", ["--table", "db.events", "--older-than", "0s"]],
        ["remove_orphans.py", ["--table", "db.events"]],
        ["backfill_row_lineage.py", ["--table", "db.events"]],
    ]
    driver = REPO_ROOT / "tests" / "support" / "submit_jobs.py"
    others, _ = submit(
        "\n".join([*block[:-1], f"  {driver} jobs {shlex.quote(json.dumps(plan))}"]), warehouse
    )
    runs = others["runs"]
    assert [[r["script"], r["args"]] for r in runs] == plan
    assert all(r["code"] == 0 for r in runs), runs
    converted, expired, removed, backfilled = (r["result"] for r in runs)
    assert converted["metrics"]["delta_version"] == 1
    assert len(catalog.load_table("db.orders").scan().to_arrow()) == 2 * ROWS_PER_FILE
    assert len(expired["metrics"]["expired_snapshot_ids"]) == FILES
    assert removed["metrics"]["orphan_file_count"] == 1
    assert not orphan.exists()
    assert backfilled["job"] == "backfill-row-lineage"
    after = catalog.load_table("db.events")
    assert after.metadata.format_version == 3
    assert sorted(after.scan().to_arrow().column("id").to_pylist()) == list(range(FILES * ROWS_PER_FILE))
