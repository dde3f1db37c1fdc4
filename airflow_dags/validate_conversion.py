"""spark-submit application of the Delta migration DAG: does the Iceberg table hold as many rows as
the Delta table it was converted from, at the version the conversion reached?

    spark-submit ... airflow_dags/validate_conversion.py --source /data/delta/t --target db.t \
        [--catalog C] [--conf-file F] (--convert-result '<convert-delta JSON>' | --delta-version N \
        [--snapshot-id S]) [--result-file F]

Delta is read by delta-spark at ``VERSION AS OF`` the converted version, Iceberg by Iceberg Spark
at the snapshot convert-delta committed (the current one when that run had nothing new). Prints one
JSON result line like the jobs (``job`` is ``validate-conversion``), exits 0 when the counts agree
and 3 when they differ. Importing this module does nothing: it sits in the DAG folder, where Airflow
imports every file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOB = "validate-conversion"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="validate_conversion", description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="the Delta table's path")
    parser.add_argument("--target", required=True, help="<namespace>.<table> in the Iceberg catalog")
    parser.add_argument("--catalog", help="catalog name from the catalog file (default: its default)")
    parser.add_argument("--conf-file", help="catalog definitions (YAML); default conf/catalogs.yaml")
    parser.add_argument(
        "--convert-result", help="convert-delta's JSON result: its delta_version and snapshot_id"
    )
    parser.add_argument(
        "--delta-version", type=int, help="the Delta version converted (wins over the result)"
    )
    parser.add_argument("--snapshot-id", type=int, help="the Iceberg snapshot to read (default: current)")
    parser.add_argument("--result-file", help="also write the JSON result to this file")
    return parser


def count_rows(
    spark: SparkSession, source: str, delta_version: int, iceberg_table: str, snapshot_id: int | None
) -> tuple[int, int]:
    """(Delta rows at the version, Iceberg rows at the snapshot), each read by its own Spark runtime."""
    delta_path = source.replace("`", "``")
    delta = spark.sql(f"SELECT count(*) FROM delta.`{delta_path}` VERSION AS OF {delta_version}").first()
    at = f" VERSION AS OF {snapshot_id}" if snapshot_id is not None else ""
    iceberg = spark.sql(f"SELECT count(*) FROM {iceberg_table}{at}").first()
    assert delta is not None and iceberg is not None  # count(*) always returns one row
    return int(delta[0]), int(iceberg[0])


def _versions(args: argparse.Namespace) -> tuple[int, int | None]:
    from tablekeeper.errors import ConfigError

    metrics: dict[str, Any] = {}
    if args.convert_result:
        try:
            metrics = json.loads(args.convert_result).get("metrics") or {}
        except (json.JSONDecodeError, AttributeError):
            raise ConfigError("--convert-result is not convert-delta's JSON result") from None
    version = args.delta_version if args.delta_version is not None else metrics.get("delta_version")
    snapshot = args.snapshot_id if args.snapshot_id is not None else metrics.get("snapshot_id")
    if version is None:
        raise ConfigError("no Delta version to compare at: pass --convert-result or --delta-version")
    return int(version), int(snapshot) if snapshot is not None else None


def _validate(args: argparse.Namespace) -> tuple[dict[str, Any], str | None]:
    from pathlib import Path

    from tablekeeper.catalog.config import load_catalogs
    from tablekeeper.spark import get_spark
    from tablekeeper.spark.session import iceberg_catalog_conf

    delta_version, snapshot_id = _versions(args)
    catalogs = load_catalogs(Path(args.conf_file) if args.conf_file else None)
    catalog = catalogs.get(args.catalog)
    spark = get_spark(JOB, catalogs=catalogs)
    # Under spark-submit only the runtimes are on the session; Iceberg Spark needs the catalog too.
    for key, value in iceberg_catalog_conf(catalog).items():
        spark.conf.set(key, value)
    name = ".".join(f"`{part.replace('`', '``')}`" for part in (catalog.name, *args.target.split(".")))
    delta_rows, iceberg_rows = count_rows(spark, args.source, delta_version, name, snapshot_id)
    metrics = {
        "delta_version": delta_version,
        "snapshot_id": snapshot_id,
        "delta_rows": delta_rows,
        "iceberg_rows": iceberg_rows,
    }
    if delta_rows == iceberg_rows:
        return metrics, None
    at = f"snapshot {snapshot_id}" if snapshot_id is not None else "its current snapshot"
    return metrics, (
        f"row counts differ: Delta {args.source} has {delta_rows} rows at version {delta_version}, "
        f"Iceberg {args.target} has {iceberg_rows} at {at}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    from dataclasses import replace
    from pathlib import Path

    from tablekeeper.errors import ExitCode, TablekeeperError, exit_code
    from tablekeeper.jobs.result import JobClock

    args = build_parser().parse_args(argv)
    clock = JobClock()
    try:
        metrics, problem = _validate(args)
        code = ExitCode.REFUSED if problem else ExitCode.OK
    except Exception as err:  # like the jobs: a result and a one-line reason, whatever happened
        metrics, code = {}, exit_code(err)
        problem = (
            err.message
            if isinstance(err, TablekeeperError)
            else " ".join(f"{type(err).__name__}: {err}".split())[:500]
        )
    result = clock.result(JOB, args.target, dry_run=False, metrics=metrics)
    if problem:
        result = replace(result, status="failed", error=problem)
    print(result.to_json())
    if args.result_file:
        Path(args.result_file).write_text(result.to_json() + "\n", encoding="utf-8")
    if problem:
        sys.stderr.write(f"tablekeeper: {problem}\n")
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
