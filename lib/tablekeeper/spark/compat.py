"""What differs between the Spark lines, decided in one place.

Python API gaps are found by feature detection (the attribute is there or not) and bridged where
the older line can do the same thing another way; what a line cannot do at all is refused by name
with ``NotOnThisSparkLine``, naming the line and the fix. The running line's versions are checked
once per session against ``tablekeeper.lines``.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import cast

import pyarrow as pa
import pyspark
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tablekeeper.errors import NotOnThisSparkLine
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.types import DecimalType, IcebergType, NestedField, PrimitiveType, StructType
from tablekeeper.lines import SparkLine, check_runtime, line_named, minor

# Spark 4.0 added the variant type; on 3.5 a variant column cannot be rewritten through Spark.
VARIANT_TYPE: T.DataType | None = T.VariantType() if hasattr(T, "VariantType") else None


def running_line() -> str:
    """The line of the pyspark this process imports (a session's JVM is checked separately)."""
    return minor(pyspark.__version__)


def variant_type(where: str) -> T.DataType:
    if VARIANT_TYPE is None:
        raise NotOnThisSparkLine(
            f"column {where} is a variant, which Spark {running_line()} has no type for: "
            "run tablekeeper on Spark 4.0 or later"
        )
    return VARIANT_TYPE


def inheritable_thread(target: Callable[[], None], spark: SparkSession) -> threading.Thread:
    """A daemon driver thread that inherits the caller's local properties (job group, scheduler
    pool). PySpark 4.0 takes the session explicitly (Spark Connect needs it); 3.5's classic
    ``InheritableThread`` reads the active context and has no such argument."""
    from pyspark import InheritableThread

    if "session" in inspect.signature(InheritableThread.__init__).parameters:
        return InheritableThread(target=target, session=spark, daemon=True)
    return InheritableThread(target=target, daemon=True)


def to_arrow(df: DataFrame) -> pa.Table:
    """``df`` collected as one Arrow table (``DataFrame.toArrow`` from Spark 4.0 on; on 3.5 the
    same Arrow batches through the collect pandas conversion uses, without pandas)."""
    if hasattr(df, "toArrow"):
        return cast("pa.Table", df.toArrow())
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema)
    batches = df._collect_as_arrow()  # type: ignore[operator]
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()


# A '%' not followed by two hex digits: java.net.URLDecoder (url_decode) fails on it.
_BAD_ESCAPE = "%(?![0-9a-fA-F]{2})"


def try_url_decode(col: Column) -> Column:
    """``try_url_decode`` (4.0+): the decoded string, or null where decoding fails. On 3.5 the
    strings URLDecoder would fail on (a stray '%') are nulled before ``url_decode`` sees them,
    so no row can fail the query; escapes of invalid UTF-8 decode to U+FFFD on both."""
    native = cast("Callable[[Column], Column] | None", getattr(F, "try_url_decode", None))
    if native is not None:
        return native(col)
    return F.when(col.rlike(_BAD_ESCAPE), F.lit(None).cast("string")).otherwise(F.url_decode(col))


def check_session_line(spark: SparkSession) -> SparkLine:
    """The session's Spark, Scala, Delta and Iceberg versions against the supported lines, or
    UnsupportedRuntime (exit 2) naming what was found and the fix."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    scala, delta, iceberg = (_jvm_call(jvm, read) for read in (_scala, _delta, _iceberg))
    return check_runtime(spark.version, scala, delta, iceberg)


def _scala(jvm: object) -> str:
    return str(jvm.scala.util.Properties.versionNumberString())  # type: ignore[attr-defined]


def _delta(jvm: object) -> str:
    return str(jvm.io.delta.package.VERSION())  # type: ignore[attr-defined]


def _iceberg(jvm: object) -> str:
    return str(jvm.org.apache.iceberg.IcebergBuild.version())  # type: ignore[attr-defined]


def _jvm_call(jvm: object, read: Callable[[object], str]) -> str | None:
    try:
        return read(jvm)
    except Exception:  # py4j: class or member missing (a runtime absent or of another build)
        return None


def _promotions(meta: TableMetadata) -> list[str]:
    """Columns of the current schema some older schema gave a narrower type: files written then
    hold the narrower physical type (int for a long, float for a double, a smaller decimal)."""
    current = {f.id: (path, f.type) for path, f in _leaves(meta.schema().fields, "")}
    found: list[str] = []
    for schema in meta.schemas:
        for _, f in _leaves(schema.fields, ""):
            now = current.get(f.id)
            # An "unknown" column (v3) is in no file: any type it became reads as null.
            if now is None or f.type == now[1] or f.type == PrimitiveType("unknown"):
                continue
            if _primitive(f.type) and _primitive(now[1]):
                found.append(f"{now[0]} ({f.type} -> {now[1]})")
    return sorted(set(found))


def _primitive(t: IcebergType) -> bool:
    return isinstance(t, (PrimitiveType, DecimalType))


def _leaves(fields: tuple[NestedField, ...], prefix: str) -> list[tuple[str, NestedField]]:
    out: list[tuple[str, NestedField]] = []
    for f in fields:
        out.append((f"{prefix}{f.name}", f))
        if isinstance(f.type, StructType):
            out.extend(_leaves(f.type.fields, f"{prefix}{f.name}."))
    return out


def require_parquet_widening(meta: TableMetadata, fix: str) -> None:
    """Refuse, on a line whose Parquet reader cannot widen a file's type to the column's (3.5), a
    Spark read of a table whose schema promoted a column: the read would fail part way through
    (SchemaColumnConvertNotSupportedException). ``fix`` names what to do instead."""
    line = line_named(running_line())
    if line is None or line.parquet_type_widening:
        return
    promoted = _promotions(meta)
    if promoted:
        raise NotOnThisSparkLine(
            f"Spark {line.name}'s Parquet reader cannot widen promoted columns ({', '.join(promoted)}): {fix}"
        )
