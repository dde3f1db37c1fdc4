"""What a Spark line lacks is refused by name on that line, decided without a JVM."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tablekeeper.errors import NotOnThisSparkLine, UnsupportedFeatureError
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.types import (
    DOUBLE,
    FLOAT,
    INT,
    LONG,
    STRING,
    UNKNOWN,
    VARIANT,
    DecimalType,
    ListType,
    MapType,
    NestedField,
    Schema,
    StructType,
)
from tablekeeper.iceberg.updates import new_table_metadata
from tablekeeper.spark import compat
from tablekeeper.spark.schema import spark_type

pytestmark = pytest.mark.unit


def _table(*history: tuple[NestedField, ...]) -> TableMetadata:
    """A table whose schemas are ``history`` in order, the last current."""
    schemas = tuple(Schema(i, fields) for i, fields in enumerate(history))
    meta = new_table_metadata(schema=schemas[0], location="/t", timestamp_ms=0, format_version=3)
    return replace(meta, schemas=schemas, current_schema_id=schemas[-1].schema_id)


def _on(monkeypatch: pytest.MonkeyPatch, line: str) -> None:
    monkeypatch.setattr(compat, "running_line", lambda: line)


PROMOTED = _table(
    (
        NestedField(1, "id", INT),
        NestedField(2, "score", FLOAT),
        NestedField(3, "s", StructType((NestedField(4, "amount", DecimalType(9, 2)),))),
    ),
    (
        NestedField(1, "id", LONG),
        NestedField(2, "score", DOUBLE),
        NestedField(3, "s", StructType((NestedField(4, "amount", DecimalType(18, 2)),))),
    ),
)


def test_promoted_columns_are_refused_by_name_on_spark_3_5(monkeypatch: pytest.MonkeyPatch) -> None:
    _on(monkeypatch, "3.5")
    with pytest.raises(NotOnThisSparkLine) as caught:
        compat.require_parquet_widening(PROMOTED, "use the Arrow writer")
    message = caught.value.message
    assert message.startswith("Spark 3.5's Parquet reader cannot widen promoted columns (")
    widened = ("id (int -> long)", "score (float -> double)", "s.amount (decimal(9, 2) -> decimal(18, 2))")
    for named in widened:
        assert named in message
    assert message.endswith(": use the Arrow writer")
    assert isinstance(caught.value, UnsupportedFeatureError)


@pytest.mark.parametrize("line", ["4.0", "4.1"])
def test_lines_that_widen_read_promoted_columns(monkeypatch: pytest.MonkeyPatch, line: str) -> None:
    _on(monkeypatch, line)
    compat.require_parquet_widening(PROMOTED, "unused")


def test_tables_without_a_promotion_pass_on_spark_3_5(monkeypatch: pytest.MonkeyPatch) -> None:
    _on(monkeypatch, "3.5")
    # A column added later, one dropped, and a v3 unknown column given a type: no file holds a
    # narrower physical type for any of them.
    compat.require_parquet_widening(
        _table(
            (NestedField(1, "id", LONG), NestedField(2, "gone", INT), NestedField(5, "later", UNKNOWN)),
            (NestedField(1, "id", LONG), NestedField(3, "added", INT), NestedField(5, "later", LONG)),
        ),
        "unused",
    )


def test_variant_columns_are_refused_by_name_where_spark_has_no_variant_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compat, "VARIANT_TYPE", None)
    _on(monkeypatch, "3.5")
    refused = r"column doc is a variant, which Spark 3\.5 has no type for: run"
    with pytest.raises(NotOnThisSparkLine, match=refused):
        spark_type(VARIANT, "doc")


@pytest.mark.parametrize(
    "column",
    [
        NestedField(2, "v", VARIANT),
        NestedField(2, "vs", ListType(3, VARIANT)),
        NestedField(2, "m", MapType(3, STRING, 4, VARIANT)),
        NestedField(2, "s", StructType((NestedField(3, "v", VARIANT), NestedField(4, "x", LONG)))),
    ],
    ids=["top", "list", "map", "struct"],
)
def test_compact_names_the_line_for_a_variant_anywhere_in_the_schema(
    monkeypatch: pytest.MonkeyPatch, column: NestedField
) -> None:
    """A variant nested in a list or map was refused as "pyarrow cannot write VARIANT (Spark's
    writer can)", which is untrue on a line whose Spark has no variant type."""
    from tablekeeper.jobs.compact.options import CompactOptions
    from tablekeeper.jobs.compact.order import refuse_unwritable, resolve

    monkeypatch.setattr(compat, "VARIANT_TYPE", None)
    _on(monkeypatch, "3.5")
    meta = _table((NestedField(1, "id", LONG), column))
    options = CompactOptions(table="db.t")
    with pytest.raises(NotOnThisSparkLine, match=r"Spark 3\.5 has no type for"):
        refuse_unwritable(options, meta, resolve(options, meta))
