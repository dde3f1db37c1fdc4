"""Theta sketches of a snapshot's columns, built on the executors and merged on the driver.

Rows are read through Iceberg Spark at the snapshot, so deletes (position, equality, deletion
vectors) are applied exactly as Iceberg applies them. Each task hashes its Arrow batches and sends
one bounded sketch per column (at most 4096 hashes); the driver unions them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from tablekeeper.iceberg.statistics import (
    DEFAULT_LG_K,
    StatsColumn,
    ThetaAccumulator,
    arrow_theta_hashes,
    merge_sketches,
)

_OUT = pa.schema([("column", pa.int32()), ("sketch", pa.binary())])


@dataclass(frozen=True)
class ColumnSketch:
    column: StatsColumn
    sketch: bytes  # ordered compact theta sketch, serialized uncompressed
    estimate: float


def _select(col: StatsColumn, index: int) -> Column:
    # Field by field, so names holding dots or backticks need no quoting.
    out = F.col(f"`{col.path[0].replace('`', '``')}`")
    for part in col.path[1:]:
        out = out.getField(part)
    return out.alias(f"c{index}")


def theta_sketches(
    spark: SparkSession,
    metadata_location: str,
    snapshot_id: int,
    columns: Sequence[StatsColumn],
    lg_k: int = DEFAULT_LG_K,
) -> list[ColumnSketch]:
    """One merged sketch per column of the rows live in ``snapshot_id`` of the table whose
    metadata file is ``metadata_location`` (read as that file says, whatever the catalog)."""
    types = [c.type for c in columns]
    df = (
        spark.read.format("iceberg")
        .option("versionAsOf", str(snapshot_id))
        .load(metadata_location)
        .select(*(_select(c, i) for i, c in enumerate(columns)))
    )

    def sketch_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        accumulators = [ThetaAccumulator(lg_k) for _ in types]
        for batch in batches:
            for i, t in enumerate(types):
                accumulators[i].add_hashes(arrow_theta_hashes(batch.column(i), t))
        sketches = [acc.result()[0] for acc in accumulators]
        yield pa.RecordBatch.from_arrays(
            [pa.array(range(len(types)), pa.int32()), pa.array(sketches, pa.binary())], schema=_OUT
        )

    parts: list[list[bytes]] = [[] for _ in columns]
    rows = df.mapInArrow(sketch_task, "column int, sketch binary").collect()  # type: ignore[arg-type]
    for row in rows:
        parts[row["column"]].append(bytes(row["sketch"]))
    out = []
    for col, sketches in zip(columns, parts, strict=True):
        merged, estimate = merge_sketches(sketches, lg_k)
        out.append(ColumnSketch(col, merged, estimate))
    return out
