"""compact on tables holding every Iceberg type: nested lists, maps and structs (nulls and empties
at every level, schema evolution inside the structs), uuid, fixed, binary, decimals, time, with
merge-on-read deletes. Iceberg Spark and PyIceberg must read the same rows after as before, and
on v3 every row keeps its lineage."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pyarrow as pa
import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.errors import ConfigError, UnsupportedFeatureError
from tablekeeper.jobs.compact import CompactOptions, run_compact
from tests.conftest import SQL_CATALOG

NS = "types"


def _py_catalog(catalogs: Any) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    conf = catalogs.get(SQL_CATALOG)
    return SqlCatalog(SQL_CATALOG, uri=conf.uri, warehouse=conf.warehouse)


def _nested_schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType,
        DateType,
        DecimalType,
        DoubleType,
        FixedType,
        FloatType,
        IntegerType,
        ListType,
        LongType,
        MapType,
        NestedField,
        StringType,
        StructType,
        TimestampType,
        TimestamptzType,
        UUIDType,
    )

    return Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(
            2,
            "l",
            ListType(
                3,
                StructType(
                    NestedField(4, "a", IntegerType(), required=False),
                    NestedField(
                        5,
                        "inner",
                        ListType(6, ListType(7, LongType(), element_required=False), element_required=False),
                        required=False,
                    ),
                ),
                element_required=False,
            ),
            required=False,
        ),
        NestedField(
            8,
            "m",
            MapType(
                9,
                StringType(),
                10,
                StructType(
                    NestedField(11, "x", DoubleType(), required=False),
                    NestedField(
                        12, "tags", ListType(13, StringType(), element_required=False), required=False
                    ),
                ),
                value_required=False,
            ),
            required=False,
        ),
        NestedField(
            14,
            "s",
            StructType(
                NestedField(
                    15, "p", StructType(NestedField(16, "q", IntegerType(), required=False)), required=False
                ),
                NestedField(
                    17,
                    "r",
                    ListType(
                        18,
                        MapType(19, StringType(), 20, IntegerType(), value_required=False),
                        element_required=False,
                    ),
                    required=False,
                ),
            ),
            required=False,
        ),
        NestedField(21, "u", UUIDType(), required=False),
        NestedField(22, "f", FixedType(4), required=False),
        NestedField(23, "bin", BinaryType(), required=False),
        NestedField(24, "d1", DecimalType(9, 2), required=False),
        NestedField(25, "d2", DecimalType(18, 4), required=False),
        NestedField(26, "d3", DecimalType(38, 10), required=False),
        NestedField(27, "flt", FloatType(), required=False),
        NestedField(28, "dbl", DoubleType(), required=False),
        NestedField(29, "ts", TimestampType(), required=False),
        NestedField(30, "tstz", TimestamptzType(), required=False),
        NestedField(31, "dt", DateType(), required=False),
    )


_ROW = """
SELECT
  id,
  CASE WHEN id % 5 = 0 THEN NULL WHEN id % 5 = 1 THEN array()
       ELSE array(named_struct('a', CAST(id AS INT),
                               'inner', array(array(id, NULL), array(), NULL)), NULL) END,
  CASE WHEN id % 4 = 0 THEN NULL WHEN id % 4 = 1 THEN map()
       ELSE map(concat('k', id), named_struct('x', id * 0.5, 'tags', array('t', NULL)), 'none', NULL) END,
  CASE WHEN id % 6 = 0 THEN NULL
       ELSE named_struct('p', IF(id % 3 = 0, NULL, named_struct('q', CAST(id AS INT))),
                         'r', IF(id % 2 = 0, array(), array(map('z', CAST(id AS INT)), NULL))) END,
  IF(id % 7 = 3, NULL, uuid()),
  IF(id % 3 = 0, NULL, unhex(lpad(hex(id), 8, '0'))),
  IF(id % 4 = 0, NULL, unhex(hex(id * 31))),
  CAST(id * 1.25 AS DECIMAL(9,2)),
  CAST(id * -3.5 AS DECIMAL(18,4)),
  CAST(id * 123456789.0123456789 AS DECIMAL(38,10)),
  CASE WHEN id % 9 = 0 THEN CAST('NaN' AS FLOAT) WHEN id % 9 = 1 THEN NULL ELSE CAST(id / 3.0 AS FLOAT) END,
  CASE WHEN id % 8 = 0 THEN CAST('NaN' AS DOUBLE) WHEN id % 8 = 1 THEN -0.0 ELSE id * -1.5 END,
  timestamp_ntz'2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, CAST(id AS INT), 0, 0.000001 * id),
  timestamp'2026-01-01 00:00:00+00:00' - make_interval(0, 0, 0, CAST(id AS INT), 0, 0, 0),
  date_add(date'1969-12-25', CAST(id AS INT))
FROM range({lo}, {hi})
"""


def _make_table(spark: Any, catalogs: Any, name: str, version: int) -> str:
    py = _py_catalog(catalogs)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {SQL_CATALOG}.{NS}")
    ident = f"{NS}.{name}"
    if py.table_exists(ident):
        py.drop_table(ident)
    py.create_table(
        ident,
        _nested_schema(),
        properties={
            "format-version": "2",
            "write.delete.mode": "merge-on-read",
            "write.update.mode": "merge-on-read",
        },
    )
    table = f"{SQL_CATALOG}.{ident}"
    if version == 3:
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('format-version'='3')")
    for i in range(3):
        spark.sql(f"INSERT INTO {table} " + _ROW.format(lo=i * 40, hi=(i + 1) * 40))
    # Schema evolution inside nested structs: a field added in a struct inside a list, one added
    # and one renamed in a struct inside a struct.
    spark.sql(f"ALTER TABLE {table} ADD COLUMN l.element.added STRING")
    spark.sql(f"ALTER TABLE {table} ADD COLUMN s.p.later BIGINT")
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN s.p.q TO q_renamed")
    spark.sql(
        f"INSERT INTO {table} SELECT id, "
        "array(named_struct('a', 1, 'inner', array(array(id)), 'added', 'new')), "
        "map('k', named_struct('x', 1.0D, 'tags', array())), named_struct('p', named_struct('q_renamed', 7, "
        "'later', id), 'r', array()), uuid(), X'00000001', X'', 1.00, 2.0000, 3.0000000000, 1.5F, 2.5D, "
        "timestamp_ntz'2030-01-01 00:00:00', timestamp'2030-01-01 00:00:00+00:00', date'2030-01-01' "
        "FROM range(120, 130)"
    )
    spark.sql(f"DELETE FROM {table} WHERE id % 11 = 0")
    return table


def _spark_rows(spark: Any, table: str, lineage: bool) -> list[Any]:
    extra = ", _row_id, _last_updated_sequence_number" if lineage else ""
    # uuid reads as a string; NaN and -0.0 compare by their text so the check sees them.
    return [repr(r) for r in spark.sql(f"SELECT *{extra} FROM {table} ORDER BY id").collect()]


def _py_rows(catalogs: Any, ident: str) -> list[str]:
    got = _py_catalog(catalogs).load_table(ident).scan().to_arrow()
    return sorted(repr(r) for r in got.to_pylist())


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("strategy", ["binpack", "sort"])
def test_every_type_nested_deep_survives_compact(spark, catalogs, version: int, strategy: str) -> None:  # type: ignore[no-untyped-def]
    name = f"all_v{version}_{strategy}"
    table = _make_table(spark, catalogs, name, version)
    ident = f"{NS}.{name}"
    before = _spark_rows(spark, table, version == 3)
    py_before = _py_rows(catalogs, ident)
    assert len(before) == len(py_before) > 100
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    if strategy == "binpack":
        options = CompactOptions(table=ident, min_input_files=2, rewrite_all=True)
    else:
        options = CompactOptions(
            table=ident,
            strategy="sort",
            sort_order="bucket(4, u) DESC, days(ts), truncate(2, bin)",
            rewrite_all=True,
        )
    m = run_compact(options, catalog, ident, spark).metrics
    assert m["rewritten_data_files_count"] >= 4 and m["added_data_files_count"] >= 1, m
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(f"SELECT count(*) FROM {table}.delete_files").collect()[0][0] == 0
    assert _spark_rows(spark, table, version == 3) == before
    assert _py_rows(catalogs, ident) == py_before
    # The element, key and value ids are in the new files: Iceberg filters nested fields by id.
    assert spark.sql(f"SELECT count(*) FROM {table} WHERE s.p.q_renamed = 7").collect()[0][0] == 10
    if version == 3:
        ids = [r[0] for r in spark.sql(f"SELECT _row_id FROM {table}").collect()]
        assert None not in ids and len(set(ids)) == len(ids)


def test_spark_writer_refuses_lists_and_maps_by_name(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    table = _make_table(spark, catalogs, "all_spark_writer", 2)
    ident = f"{NS}.all_spark_writer"
    snapshot = spark.sql(
        f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).collect()
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    with pytest.raises(UnsupportedFeatureError, match=r"column l is a list"):
        run_compact(CompactOptions(table=ident, min_input_files=2, writer="spark"), catalog, ident, spark)
    after = spark.sql(
        f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).collect()
    assert after == snapshot
    with pytest.raises(ConfigError, match="not a top-level column"):
        run_compact(
            CompactOptions(table=ident, strategy="sort", sort_order="zorder(nope)"), catalog, ident, spark
        )


def test_time_uuid_fixed_written_by_pyiceberg(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    """Iceberg Spark refuses any table with a time column: PyIceberg writes and reads this one."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import FixedType, LongType, NestedField, TimeType, UUIDType

    py = _py_catalog(catalogs)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {SQL_CATALOG}.{NS}")
    ident = f"{NS}.py_time"
    if py.table_exists(ident):
        py.drop_table(ident)
    t = py.create_table(
        ident,
        Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "t", TimeType(), required=False),
            NestedField(3, "u", UUIDType(), required=False),
            NestedField(4, "f", FixedType(3), required=False),
        ),
    )
    for part in range(3):
        rows = [
            {
                "id": i,
                "t": None if i % 5 == 0 else datetime.time(i % 24, i % 60, i % 60, i),
                "u": None if i % 4 == 0 else uuid.UUID(int=i * 7919),
                "f": None if i % 3 == 0 else bytes([i % 256, 1, 2]),
            }
            for i in range(part * 20, part * 20 + 20)
        ]
        t.append(pa.Table.from_pylist(rows, schema=t.schema().as_arrow()))
    before = _py_rows(catalogs, ident)
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    m = run_compact(CompactOptions(table=ident, min_input_files=2), catalog, ident, spark).metrics
    assert m["rewritten_data_files_count"] == 3 and m["added_data_files_count"] == 1, m
    assert _py_rows(catalogs, ident) == before
    # Written as Iceberg Java writes them: TIME(MICROS) and a 16-byte UUID, by field id.
    files = [t.file.file_path for t in _py_catalog(catalogs).load_table(ident).scan().plan_files()]
    assert len(files) == 1
    import pyarrow.parquet as pq

    schema = pq.ParquetFile(files[0].removeprefix("file:")).schema
    text = str(schema)
    assert "field_id=2 t (Time(isAdjustedToUTC=false, timeUnit=microseconds))" in text, text
    assert "fixed_len_byte_array(16) field_id=3 u (UUID)" in text, text
    assert "fixed_len_byte_array(3) field_id=4 f" in text, text


def test_v3_initial_defaults_fill_files_that_predate_the_column(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    """Rows of files written before a column with an initial default read that default; after
    compact the new files hold it, so Iceberg Spark and PyIceberg read the same rows."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {SQL_CATALOG}.{NS}")
    table = f"{SQL_CATALOG}.{NS}.defaults"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, s STRUCT<a: INT>) USING iceberg "
        "TBLPROPERTIES ('format-version'='3')"
    )
    for i in range(3):
        spark.sql(
            f"INSERT INTO {table} SELECT id, named_struct('a', CAST(id AS INT)) "
            f"FROM range({i * 5}, {i * 5 + 5})"
        )
    jvm = spark.sparkContext._jvm
    iceberg = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    types, literal = jvm.org.apache.iceberg.types.Types, jvm.org.apache.iceberg.expressions.Literal
    (
        iceberg.updateSchema()
        .addColumn("d", types.IntegerType.get(), "added later", literal.of(7))
        .addColumn("s", "e", types.StringType.get(), "nested, added later", literal.of("x"))
        .commit()
    )
    spark.sql(f"REFRESH TABLE {table}")
    spark.sql(f"INSERT INTO {table} VALUES (100, named_struct('a', 1, 'e', 'set'), 1)")
    before = sorted(repr(r) for r in spark.table(table).collect())
    assert "Row(id=0, s=Row(a=0, e='x'), d=7)" in before, before
    ident = f"{NS}.defaults"
    py_before = _py_rows(catalogs, ident)
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    m = run_compact(CompactOptions(table=ident, min_input_files=2), catalog, ident, spark).metrics
    assert m["rewritten_data_files_count"] == m["live_data_files"] > 1, m
    spark.sql(f"REFRESH TABLE {table}")
    assert sorted(repr(r) for r in spark.table(table).collect()) == before
    assert _py_rows(catalogs, ident) == py_before


def test_variant_columns_go_through_sparks_writer(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    """pyarrow cannot write Parquet's VARIANT annotation; Spark's writer can, and Iceberg Spark
    reads its (shredded) variants back."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {SQL_CATALOG}.{NS}")
    table = f"{SQL_CATALOG}.{NS}.variants"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, v VARIANT, s STRUCT<inner: VARIANT, n: INT>) USING iceberg "
        "TBLPROPERTIES ('format-version'='3', 'write.delete.mode'='merge-on-read')"
    )
    for i in range(3):
        spark.sql(
            f"INSERT INTO {table} SELECT id, IF(id % 4 = 0, NULL, parse_json(concat('{{\"a\": ', id, "
            '\', "b": [1, "x", null], "c": {"d": 1.5}}\'))), '
            "named_struct('inner', parse_json(concat('\"s', id, '\"')), 'n', CAST(id AS INT)) "
            f"FROM range({i * 10}, {i * 10 + 10})"
        )
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    query = f"SELECT id, to_json(v), to_json(s.inner), s.n, _row_id FROM {table} ORDER BY id"
    before = spark.sql(query).collect()
    ident = f"{NS}.variants"
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    m = run_compact(CompactOptions(table=ident, min_input_files=2), catalog, ident, spark).metrics
    assert m["rewritten_data_files_count"] == m["live_data_files"] > 1, m
    assert {g["writer"] for g in m["groups"]} == {"spark"}, m
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(query).collect() == before
    with pytest.raises(ConfigError, match="variant columns are rewritten by Spark's writer"):
        run_compact(
            CompactOptions(table=ident, strategy="sort", sort_order="zorder(id)"), catalog, ident, spark
        )


def test_nanosecond_timestamps_and_unknown_on_v3(spark, catalogs, warehouse) -> None:  # type: ignore[no-untyped-def]
    """Iceberg Spark 1.11 refuses timestamp_ns tables and PyIceberg 0.12 cannot write v3: this
    table is written by the tests' own writer and read by PyIceberg before and after."""
    import time

    from tablekeeper.commit import Committer, SnapshotChange
    from tablekeeper.iceberg.types import (
        LONG,
        TIMESTAMP_NS,
        TIMESTAMPTZ_NS,
        UNKNOWN,
        ListType,
        NestedField,
        Schema,
        StructType,
    )
    from tablekeeper.iceberg.updates import new_table_metadata
    from tests.support.iceberg_writer import write_rows

    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {SQL_CATALOG}.{NS}")
    ident = f"{NS}.nanos"
    py = _py_catalog(catalogs)
    if py.table_exists(ident):
        py.drop_table(ident)
    schema = Schema(
        0,
        (
            NestedField(1, "id", LONG),
            NestedField(2, "tn", TIMESTAMP_NS),
            NestedField(3, "tzn", TIMESTAMPTZ_NS),
            NestedField(4, "gone", UNKNOWN),
            NestedField(5, "s", StructType((NestedField(6, "inner", TIMESTAMP_NS),))),
            NestedField(7, "l", ListType(8, TIMESTAMPTZ_NS)),
        ),
    )
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    meta = new_table_metadata(
        schema=schema,
        location=f"{warehouse}/sql/{NS}/nanos",
        timestamp_ms=int(time.time() * 1000),
        format_version=3,
    )
    catalog.create_table(ident, meta)
    base = 1_700_000_000_123_456_789
    for part in range(3):
        rows = [
            {
                "id": i,
                "tn": None if i % 5 == 0 else base + i,
                "tzn": -base - i * 1_001,
                "s": None if i % 4 == 0 else {"inner": base * (i % 2) - 7},
                "l": None if i % 3 == 0 else [base + 1, None, -1],
            }
            for i in range(part * 10, part * 10 + 10)
        ]
        files = write_rows(catalog.require(ident).metadata, rows)
        Committer(catalog, ident).commit_snapshot(SnapshotChange("append", added_files=tuple(files)))
    before = _py_rows(catalogs, ident)
    assert len(before) == 30 and any("22:13:20.123456790" in r for r in before)
    m = run_compact(CompactOptions(table=ident, min_input_files=2), catalog, ident, spark).metrics
    assert m["rewritten_data_files_count"] == 3 and m["added_data_files_count"] == 1, m
    assert _py_rows(catalogs, ident) == before


@pytest.mark.parametrize("writer", ["auto", "spark"])
def test_decimals_are_written_as_int32_int64_and_fixed(spark, catalogs, writer: str) -> None:  # type: ignore[no-untyped-def]
    """The spec's Parquet appendix: decimal(p <= 9) as int32, p <= 18 as int64, fixed above, by
    both writers (Spark's even when the session asks for its legacy format); Iceberg Spark
    reads the same values and the files' bounds stay right."""
    import pyarrow.parquet as pq

    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {SQL_CATALOG}.{NS}")
    name = f"decimals_{writer}"
    table = f"{SQL_CATALOG}.{NS}.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, a DECIMAL(5,2), b DECIMAL(15,2), c DECIMAL(30,2)) USING iceberg"
    )
    for i in range(3):
        spark.sql(
            f"INSERT INTO {table} SELECT id, CAST(id * 1.25 - 99 AS DECIMAL(5,2)), "
            "CAST(id * 123456789.01 - 5e11 AS DECIMAL(15,2)), "
            "CAST(id * 1234567890123456789.01 AS DECIMAL(30,2)) "
            f"FROM range({i * 20}, {i * 20 + 20})"
        )
    query = f"SELECT * FROM {table} ORDER BY id"
    before = [tuple(r) for r in spark.sql(query).collect()]
    bounds = (
        f"SELECT min(a), max(a), min(b), max(b), min(c), max(c) FROM {table}",
        f"SELECT readable_metrics.a.lower_bound, readable_metrics.a.upper_bound, "
        f"readable_metrics.b.lower_bound, readable_metrics.b.upper_bound, "
        f"readable_metrics.c.lower_bound, readable_metrics.c.upper_bound FROM {table}.files",
    )
    ident = f"{NS}.{name}"
    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    legacy = spark.conf.get("spark.sql.parquet.writeLegacyFormat", None)
    spark.conf.set("spark.sql.parquet.writeLegacyFormat", "true")
    try:
        options = CompactOptions(table=ident, min_input_files=2, writer=writer)  # type: ignore[arg-type]
        m = run_compact(options, catalog, ident, spark).metrics
    finally:
        if legacy is None:
            spark.conf.unset("spark.sql.parquet.writeLegacyFormat")
        else:
            spark.conf.set("spark.sql.parquet.writeLegacyFormat", legacy)
    assert m["rewritten_data_files_count"] >= 3 and m["added_data_files_count"] == 1, m
    spark.sql(f"REFRESH TABLE {table}")
    assert [tuple(r) for r in spark.sql(query).collect()] == before
    assert tuple(spark.sql(bounds[1]).collect()[0]) == tuple(spark.sql(bounds[0]).collect()[0])
    (path,) = [r[0] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()]
    footer = pq.read_metadata(path.removeprefix("file:"))
    names = [footer.schema.column(i).name for i in range(footer.num_columns)]
    physical = {n: footer.row_group(0).column(i).physical_type for i, n in enumerate(names)}
    assert physical == {"id": "INT64", "a": "INT32", "b": "INT64", "c": "FIXED_LEN_BYTE_ARRAY"}
