"""validate-conversion: does the Iceberg table hold as many rows as the Delta table it was converted
from, at the version the conversion reached?

Delta is read by delta-spark at the converted version (``versionAsOf``), Iceberg by Iceberg Spark at
the snapshot convert-delta committed (the current one when that run had nothing new). Both come
from convert-delta's result (``--convert-result``) or are named. Counts that differ end the job with
exit 3 and status ``failed``, both counts in the result. The Delta migration DAG runs it after each
conversion.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tablekeeper.errors import ConfigError, CountsDiffer
from tablekeeper.jobs.common.context import (
    JobContext,
    add_ledger_arguments,
    add_lineage_argument,
    add_table_arguments,
)
from tablekeeper.jobs.common.result import JobClock, JobResult

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOB = "validate-conversion"


@dataclass(frozen=True)
class ValidateConversionOptions:
    source: str
    target: str
    delta_version: int
    snapshot_id: int | None = None
    catalog: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ValidateConversionOptions:
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
        # Checked here, before any JVM: a bad value must be exit 2 naming the option, never a
        # Spark parse error.
        delta_version = _whole(version, "--delta-version")
        if delta_version < 0:
            raise ConfigError(f"--delta-version {delta_version} is negative: Delta versions start at 0")
        snapshot_id = _whole(snapshot, "--snapshot-id") if snapshot is not None else None
        if not str(args.source or "").strip():
            raise ConfigError("--source is empty: give the Delta table's path")
        if not args.target or any(not part.strip() for part in str(args.target).split(".")):
            raise ConfigError(f"--target {args.target!r} is not <namespace>.<table>")
        return cls(
            source=args.source,
            target=args.target,
            delta_version=delta_version,
            snapshot_id=snapshot_id,
            catalog=args.catalog,
        )


_LONG = 1 << 63


def _whole(value: object, flag: str) -> int:
    """An integer (a long), from the command line or convert-delta's JSON; ConfigError if not."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f"{flag} {value!r} is not a whole number")
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{flag} {value!r} is not a whole number") from None
    if not -_LONG <= number < _LONG:
        raise ConfigError(f"{flag} {number} is out of range for a 64-bit id")
    return number


# The options class the command line builds (jobs.common.context's contract).
Options = ValidateConversionOptions
# No --table: --source is a Delta table and --target an Iceberg one by role (jobs.common.formats).
DELTA_OPTIONS = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", required=True, help="the Delta table's path")
    parser.add_argument("--target", required=True, help="<namespace>.<table> in the Iceberg catalog")
    add_table_arguments(parser, flag="--target")
    parser.add_argument(
        "--convert-result", help="convert-delta's JSON result: its delta_version and snapshot_id"
    )
    parser.add_argument(
        "--delta-version", type=int, help="the Delta version converted (wins over the result)"
    )
    parser.add_argument("--snapshot-id", type=int, help="the Iceberg snapshot to read (default: current)")
    parser.add_argument("--result-file", help="also write the JSON result to this file")
    add_ledger_arguments(parser)
    add_lineage_argument(parser)


def count_rows(
    spark: SparkSession, source: str, delta_version: int, iceberg_table: str, snapshot_id: int | None
) -> tuple[int, int]:
    """(Delta rows at the version, Iceberg rows at the snapshot), each read by its own Spark runtime.
    Paths and versions go as reader options, never into SQL text."""
    delta = spark.read.format("delta").option("versionAsOf", str(delta_version)).load(source)
    iceberg = spark.read.format("iceberg")
    if snapshot_id is not None:
        iceberg = iceberg.option("versionAsOf", str(snapshot_id))  # a snapshot id
    return int(delta.count()), int(iceberg.load(iceberg_table).count())


def run(options: ValidateConversionOptions, context: JobContext) -> JobResult:
    from tablekeeper.catalog.spark_conf import iceberg_catalog_conf

    clock = JobClock()
    catalog = context.catalogs.get(options.catalog)
    spark = context.spark()
    # Under spark-submit only the runtimes are on the session; Iceberg Spark needs the catalog too.
    for key, value in iceberg_catalog_conf(catalog).items():
        spark.conf.set(key, value)
    name = ".".join(f"`{part.replace('`', '``')}`" for part in (catalog.name, *options.target.split(".")))
    delta_rows, iceberg_rows = count_rows(
        spark, options.source, options.delta_version, name, options.snapshot_id
    )
    metrics = {
        "delta_version": options.delta_version,
        "snapshot_id": options.snapshot_id,
        "delta_rows": delta_rows,
        "iceberg_rows": iceberg_rows,
    }
    if delta_rows != iceberg_rows:
        at = f"snapshot {options.snapshot_id}" if options.snapshot_id is not None else "its current snapshot"
        raise CountsDiffer(
            f"row counts differ: Delta {options.source} has {delta_rows} rows at version "
            f"{options.delta_version}, Iceberg {options.target} has {iceberg_rows} at {at}",
            metrics,
        )
    return clock.result(JOB, options.target, dry_run=False, metrics=metrics)
