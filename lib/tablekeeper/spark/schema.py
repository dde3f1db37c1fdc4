"""Iceberg schemas as Spark schemas whose fields carry their Iceberg ids, so Spark's Parquet
reader resolves columns by id (renames, reorders, added and dropped columns) and its writer
writes the ids into new files."""

from __future__ import annotations

from pyspark.sql import types as T

from tablekeeper.errors import UnsupportedFeatureError
from tablekeeper.iceberg.types import (
    DecimalType,
    FixedType,
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    Schema,
    StructType,
)
from tablekeeper.spark.compat import variant_type

FIELD_ID = "parquet.field.id"
ROW_ID = NestedField(2147483540, "_row_id", PrimitiveType("long"))
LAST_UPDATED = NestedField(2147483539, "_last_updated_sequence_number", PrimitiveType("long"))

_PRIMITIVES: dict[str, T.DataType] = {
    "boolean": T.BooleanType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "date": T.DateType(),
    "timestamp": T.TimestampNTZType(),
    "timestamptz": T.TimestampType(),
    "string": T.StringType(),
    "binary": T.BinaryType(),
}

# Spark's settings for reading and writing Iceberg data files by id.
READ_WRITE_CONF = {
    "spark.sql.parquet.fieldId.read.enabled": "true",
    "spark.sql.parquet.fieldId.write.enabled": "true",
    # Iceberg stores timestamps as int64 microseconds, never INT96.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # Decimals as the spec's Parquet appendix stores them (int32 up to precision 9, int64 up to
    # 18): the legacy format writes fixed_len_byte_array at every precision.
    "spark.sql.parquet.writeLegacyFormat": "false",
    # Pruned nested fields lose their ids and then match by name: renamed struct fields would
    # read as nulls.
    "spark.sql.optimizer.nestedSchemaPruning.enabled": "false",
    # A missing or unreadable file must fail the rewrite, never read as no rows or as nulls:
    # its rows (or its deletes) would be lost when the commit replaces it.
    "spark.sql.files.ignoreMissingFiles": "false",
    "spark.sql.files.ignoreCorruptFiles": "false",
    "spark.sql.parquet.fieldId.read.ignoreMissing": "false",
    # Iceberg dates and timestamps are proleptic Gregorian: never rebased.
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
}


def spark_type(t: IcebergType, where: str) -> T.DataType:
    if t == PrimitiveType("variant"):
        # Spark 4.1 reads Iceberg's variant columns and writes them annotated VARIANT (shredded);
        # Spark 3.5 has no variant type (refused by name there).
        return variant_type(where)
    if isinstance(t, PrimitiveType):
        found = _PRIMITIVES.get(t.name)
        if found is None:
            raise UnsupportedFeatureError(
                f"column {where} has type {t.name}, which tablekeeper cannot rewrite through Spark yet"
            )
        return found
    if isinstance(t, DecimalType):
        return T.DecimalType(t.precision, t.scale)
    if isinstance(t, FixedType):
        raise UnsupportedFeatureError(f"column {where} has type {t}, which tablekeeper cannot rewrite yet")
    if isinstance(t, StructType):
        return T.StructType([spark_field(f, f"{where}.{f.name}") for f in t.fields])
    if isinstance(t, (ListType, MapType)):
        # Spark writes no ids for list elements and map keys and values: the files would not
        # read back by id in every engine.
        raise UnsupportedFeatureError(
            f"column {where} is a {'list' if isinstance(t, ListType) else 'map'}: Spark cannot write the "
            "field ids of its elements, so tablekeeper does not rewrite such tables yet"
        )
    raise UnsupportedFeatureError(f"column {where} has unknown type {t}")


def spark_field(f: NestedField, where: str | None = None) -> T.StructField:
    return T.StructField(
        f.name, spark_type(f.type, where or f.name), nullable=not f.required, metadata={FIELD_ID: f.id}
    )


def spark_schema(schema: Schema, extra: tuple[NestedField, ...] = ()) -> T.StructType:
    """The Spark schema of ``schema`` (plus ``extra`` fields), every field with its id; required
    fields read as nullable (a file may predate the column)."""
    fields = [spark_field(f) for f in (*schema.fields, *extra)]
    return T.StructType([T.StructField(f.name, f.dataType, True, f.metadata) for f in fields])
