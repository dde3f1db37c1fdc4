"""Which data files hold rows matching a Spark SQL predicate (compact's ``--where``): only the
predicate's columns are read, by field id, with identity partition values filled in from each
file's partition tuple (files converted from Delta hold no partition columns)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.content import DataFile
from tablekeeper.iceberg.conversions import to_json
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.types import FixedType, IcebergType, NestedField
from tablekeeper.spark.compat import require_parquet_widening
from tablekeeper.spark.data_read import FILE, path_key, read_data_files
from tablekeeper.spark.rewrite import name_mapping
from tablekeeper.spark.schema import spark_type


def _identity_values(
    spark: SparkSession, df: DataFrame, meta: TableMetadata, files: Sequence[DataFile]
) -> DataFrame:
    """Identity partition columns as Iceberg Java reads them, per file: its partition tuple's
    value in every row, whatever the file holds (files converted from Delta hold none); a file
    whose spec does not partition by the column keeps its own values."""
    schema = meta.schema()
    fields: dict[int, NestedField] = {}
    rows: list[tuple[str, dict[int, Any]]] = []
    for f in files:
        values: dict[int, Any] = {}
        for i, field in meta.spec(f.spec_id).identity_columns(schema):
            fields[field.id] = field
            values[field.id] = f.partition[i]
        rows.append((path_key(f.file_path), values))
    if not fields:
        return df
    ids = sorted(fields)
    text = [
        tuple(
            [key]
            + [None if v.get(i) is None else _text(fields[i].type, v[i]) for i in ids]
            + [i in v for i in ids]
        )
        for key, v in rows
    ]
    consts = spark.createDataFrame(
        text,
        T.StructType(
            [T.StructField(FILE, T.StringType())]
            + [T.StructField(f"_tk_id{i}", T.StringType()) for i in ids]
            + [T.StructField(f"_tk_has{i}", T.BooleanType()) for i in ids]
        ),
    )
    df = df.join(F.broadcast(consts), FILE, "left")
    for i in ids:
        column = fields[i]
        raw = F.col(f"_tk_id{i}")
        value = F.unhex(raw) if _is_binary(column.type) else raw.cast(spark_type(column.type, column.name))
        df = df.withColumn(column.name, F.when(F.col(f"_tk_has{i}"), value).otherwise(F.col(column.name)))
    return df.drop(*(f"_tk_id{i}" for i in ids), *(f"_tk_has{i}" for i in ids))


def _is_binary(t: IcebergType) -> bool:
    return isinstance(t, FixedType) or getattr(t, "name", None) == "binary"


def _text(t: IcebergType, value: Any) -> str:
    """A partition value as text Spark casts to the column's type (hex for binary)."""
    if _is_binary(t):
        return bytes(value).hex()
    out = to_json(t, value)
    return str(out).lower() if isinstance(out, bool) else str(out)


def files_matching(
    spark: SparkSession, meta: TableMetadata, files: Sequence[DataFile], where: str
) -> frozenset[str]:
    """Path keys of the files holding at least one row that satisfies the Spark SQL predicate
    ``where`` (only its columns are read, and Parquet statistics skip most row groups)."""
    if not files:
        return frozenset()
    require_parquet_widening(meta, "compact without --where, or run on Spark 4.0 or later")
    df = read_data_files(spark, meta.schema(), (), name_mapping(meta), [f.file_path for f in files])
    df = _identity_values(spark, df, meta, files)
    try:
        matched = df.where(F.expr(where)).select(FILE).distinct().collect()
    except Exception as err:
        reason = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), err.__class__.__name__)
        raise ConfigError(
            f"--where {where!r} is not a predicate on the table's columns ({reason[:200]}): use Spark SQL, "
            "e.g. \"cat = 'a' AND ts >= '2026-01-01'\""
        ) from err
    return frozenset(str(r[0]) for r in matched)
