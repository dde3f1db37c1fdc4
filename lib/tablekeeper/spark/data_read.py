"""Reading a table's data files on Spark as the table's current schema.

Files with Parquet field ids are read by id. Files without any (written by Delta, Hive or other
tools before the table became Iceberg) are read by the physical names the table's name mapping
gives each field id, then renamed to the current names; a field the file does not hold reads as
null, as Iceberg reads it. Each row carries its file's path key and its position in the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.name_mapping import MappedField, NameMapping
from tablekeeper.iceberg.types import IcebergType, NestedField, Schema, StructType
from tablekeeper.io import FileIO
from tablekeeper.spark.schema import spark_schema, spark_type

FILE, POS = "_tk_file", "_tk_pos"
SCHEME_AUTHORITY = r"^[A-Za-z][A-Za-z0-9+.-]*:(//[^/]*)?"
_GLOB = re.compile(r"([\\\[\]{}*?])")
_ARROW_ID = b"PARQUET:field_id"


def path_key(location: str) -> str:
    """A file's path without scheme and authority: how rows of one group name their file
    (unique within a table, and spelled alike by Spark and by the manifests)."""
    return re.sub(SCHEME_AUTHORITY, "", location, count=1)


def spark_path_key(col: Column) -> Column:
    """``path_key`` of the file Spark reports (evaluated per row, so the common spellings take
    plain string operations instead of a regex)."""
    # Spark reports a file as an encoded URI (only '%' starts an escape; '+' is literal).
    decoded = F.when(col.contains("%"), F.url_decode(F.regexp_replace(col, r"\+", "%2B"))).otherwise(col)
    local = decoded.startswith("file:/") & ~decoded.startswith("file://")  # how Spark spells local files
    return F.when(local, F.substring(decoded, 6, 1 << 30)).otherwise(
        F.regexp_replace(decoded, SCHEME_AUTHORITY, "")
    )


def glob_escaped(location: str) -> str:
    return _GLOB.sub(r"\\\1", location)


def _with_position(df: DataFrame) -> DataFrame:
    return df.select(
        "*", spark_path_key(F.col("_metadata.file_path")).alias(FILE), F.col("_metadata.row_index").alias(POS)
    )


def read_by_id(spark: SparkSession, schema: T.StructType, paths: Iterable[str]) -> DataFrame:
    return _with_position(spark.read.schema(schema).parquet(*(glob_escaped(p) for p in paths)))


def _has_ids(t: pa.DataType | pa.Schema) -> bool:
    fields = list(t) if isinstance(t, pa.Schema) else [t.field(i) for i in range(t.num_fields)]
    for f in fields:
        if _ARROW_ID in (f.metadata or {}):
            return True
        if pa.types.is_struct(f.type) and _has_ids(f.type):
            return True
    return False


def _footer_schema(location: str) -> tuple[str, bool, str]:
    """(location, whether the file has field ids, its Arrow schema serialized)."""
    with FileIO.for_location(location).open_input(location) as stream:
        schema = pq.read_schema(stream)
    return location, _has_ids(schema), schema.serialize().to_pybytes().hex()


def _physical(mapped: MappedField | None, arrow: pa.Schema | pa.DataType) -> str | None:
    """The file's name for a field among the names the mapping gives its id."""
    names = (
        [f.name for f in arrow]
        if isinstance(arrow, pa.Schema)
        else [arrow.field(i).name for i in range(arrow.num_fields)]
    )
    for name in mapped.names if mapped is not None else ():
        if name in names:
            return name
    return None


def _arrow_child(arrow: pa.Schema | pa.DataType, name: str) -> pa.DataType:
    if isinstance(arrow, pa.Schema):
        return arrow.field(name).type
    return arrow.field(arrow.get_field_index(name)).type


def _mapped(
    fields: Sequence[NestedField], mapping: NameMapping, arrow: pa.Schema | pa.DataType, source: Column | None
) -> tuple[list[T.StructField], list[Column]]:
    """(physical read fields, columns renaming them to the current fields) for one struct level."""
    read: list[T.StructField] = []
    out: list[Column] = []
    for f in fields:
        mapped = mapping.find_by_id(f.id)
        name = _physical(mapped, arrow)
        current = spark_type(f.type, f.name)
        if name is None:
            out.append(F.lit(None).cast(current).alias(f.name))
            continue
        col = F.col(f"`{name}`") if source is None else source.getField(name)
        t: IcebergType = f.type
        if isinstance(t, StructType):
            child_arrow = _arrow_child(arrow, name)
            child_read, child_cols = _mapped(t.fields, mapping, child_arrow, col)
            read.append(T.StructField(name, T.StructType(child_read), True))
            out.append(
                F.when(col.isNull(), F.lit(None)).otherwise(F.struct(*child_cols)).cast(current).alias(f.name)
            )
        else:
            read.append(T.StructField(name, current, True))
            out.append(col.cast(current).alias(f.name))
    return read, out


def read_mapped(
    spark: SparkSession,
    fields: Sequence[NestedField],
    mapping: NameMapping,
    arrow: pa.Schema,
    paths: Sequence[str],
) -> DataFrame:
    """Files without field ids, all of one physical schema ``arrow``, as the current ``fields``."""
    read, columns = _mapped(fields, mapping, arrow, None)
    df = _with_position(spark.read.schema(T.StructType(read)).parquet(*(glob_escaped(p) for p in paths)))
    return df.select(*columns, FILE, POS)


def read_data_files(
    spark: SparkSession,
    schema: Schema,
    extra: tuple[NestedField, ...],
    mapping: NameMapping | None,
    paths: Sequence[str],
) -> DataFrame:
    """The files as ``schema`` plus ``extra`` fields, with ``FILE`` and ``POS`` columns."""
    by_id = spark_schema(schema, extra)
    if mapping is None:
        return read_by_id(spark, by_id, paths)
    sc = spark.sparkContext
    footers: list[tuple[str, bool, str]] = (
        sc.parallelize(list(paths), max(1, min(len(paths), sc.defaultParallelism)))
        .map(_footer_schema)
        .collect()
    )
    with_ids = [p for p, has, _ in footers if has]
    layouts: dict[str, list[str]] = {}
    for p, has, layout in footers:
        if not has:
            layouts.setdefault(layout, []).append(p)
    parts: list[DataFrame] = [read_by_id(spark, by_id, with_ids)] if with_ids else []
    fields = (*schema.fields, *extra)
    for layout, group in layouts.items():
        arrow = pa.ipc.read_schema(pa.py_buffer(bytes.fromhex(layout)))
        parts.append(read_mapped(spark, fields, mapping, arrow, group))
    if not parts:
        raise CorruptMetadataError("no data files to read")
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out
