"""Soak: destructive jobs killed at random phases while Iceberg Spark appends to the same table.

``python -m bench.soak [--kills 200] [--seed 19]`` builds a v2 table in a JDBC/sqlite catalog under
``bench/out/soak/``, starts Iceberg Spark appending one row every 0.2 s, and runs expire-snapshots,
remove-orphans and compact one after another as ``python -m tablekeeper``, each killed (SIGKILL, its
whole process group) at a random phase boundary, until ``--kills`` runs died. Then every job runs
once more and the end state is checked (``tests/support/soak.py``): every appended row present,
no referenced file missing, nothing older than the young-file window left unreferenced. Prints a
table of kills by job and phase and writes ``bench/out/soak.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=19)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.support.soak import soak

    from bench.child import bench_catalogs
    from tablekeeper.catalog import catalog_for
    from tablekeeper.spark.session import get_spark

    work = OUT / "soak"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    catalogs = bench_catalogs(work)
    spark = get_spark("bench-soak", catalogs=catalogs)
    table = "b.db.soak"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING, v DOUBLE) USING iceberg PARTITIONED BY (cat) "
        "TBLPROPERTIES ('format-version'='2', 'commit.retry.num-retries'='20')"
    )
    for i in range(6):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, 'a', 1.0), ({i + 100}, 'b', 2.0)")
    root = Path(catalog_for(catalogs.get("b")).require("db.soak").metadata.location)
    conf = work / "catalogs.yaml"
    conf.write_text(
        f"default: b\ncatalogs:\n  b:\n    type: sql\n    uri: sqlite:///{work}/catalog.db\n"
        f"    warehouse: {work}/wh\n"
    )
    started = time.monotonic()
    report = soak(
        spark,
        table,
        "db.soak",
        root,
        ["--conf-file", str(conf)],
        kills=args.kills,
        seed=args.seed,
        progress=lambda line: print(f"{time.monotonic() - started:7.0f}s  {line}", file=sys.stderr),
    )
    result = report.to_json()
    print(f"\nsoak: {result['kills']} kills in {result['seconds']}s, all checks passed\n")
    print(f"{'job':<18} {'phase':<26} {'kills':>6}")
    for key, n in result["by_job_and_phase"].items():
        job, phase = key.split(" ", 1)
        print(f"{job:<18} {phase:<26} {n:>6}")
    print(
        f"\nruns that ended before their phase: {sum(result['runs_that_finished_first'].values())}; "
        f"rows Iceberg Spark appended: {result['rows_appended']} (commits it lost: "
        f"{result['append_commits_lost']}); end-state checks: {result['checks']}"
    )
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "soak.json").write_text(json.dumps(result, indent=2))
    print(f"wrote {OUT / 'soak.json'}")
    spark.stop()


if __name__ == "__main__":
    main()
