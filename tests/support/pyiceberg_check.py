"""PyIceberg as the second reference reader: the latest snapshot's rows against delta-spark's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tablekeeper.spark.compat import to_arrow
from tests.conftest import SQL_CATALOG


def assert_pyiceberg_latest(spark: SparkSession, catalogs: Any, ident: str, source: Path | DataFrame) -> None:
    """PyIceberg's scan of ``ident`` (in the SQL catalog) equals delta-spark's latest rows (of the
    table at ``source``, or already read: a DataFrame), cast to the Iceberg table's types and
    compared as Python values (Arrow on both sides)."""
    from pyiceberg.catalog.sql import SqlCatalog

    conf = catalogs.get(SQL_CATALOG)
    got = SqlCatalog(SQL_CATALOG, uri=conf.uri, warehouse=conf.warehouse).load_table(ident).scan().to_arrow()
    iceberg_schema = spark.table(f"{SQL_CATALOG}.{ident}").schema
    delta = source if isinstance(source, DataFrame) else spark.read.format("delta").load(str(source))
    delta = delta.select([F.col(f"`{f.name}`").cast(f.dataType).alias(f.name) for f in iceberg_schema])
    want = to_arrow(delta)

    assert got.column_names == want.column_names
    assert got.num_rows == want.num_rows, (
        f"{ident}: PyIceberg {got.num_rows} rows, delta-spark {want.num_rows}"
    )
    assert same_rows(got, want), f"{ident}: PyIceberg's rows differ from delta-spark's"


def assert_pyiceberg_same_rows(spark: SparkSession, table: str, metadata_location: str) -> None:
    """PyIceberg's scan of the table at ``metadata_location`` holds the rows Iceberg Spark reads
    from ``table`` (user columns, compared as Python values)."""
    from pyiceberg.table import StaticTable

    got = StaticTable.from_metadata(metadata_location).scan().to_arrow()
    want = to_arrow(spark.table(table))

    assert got.num_rows == want.num_rows, (
        f"{table}: PyIceberg {got.num_rows} rows, Iceberg Spark {want.num_rows}"
    )
    assert same_rows(got, want), f"{table}: PyIceberg's rows differ from Iceberg Spark's"


def _python_rows(t: pa.Table) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in t.to_pylist())


def _sortable(t: pa.Table) -> bool:
    """Columns Arrow sorts and compares exactly as Python values would: no nested types, and no
    floating point (Arrow's equality takes -0.0 for 0.0 and NaN for unequal, Python's repr not)."""
    return all(
        not (pa.types.is_nested(f.type) or pa.types.is_floating(f.type) or pa.types.is_dictionary(f.type))
        for f in t.schema
    )


def same_rows(got: pa.Table, want: pa.Table) -> bool:
    """The two tables hold the same rows as multisets of Python values. Where every column sorts
    exactly, both sides are sorted by all columns in Arrow and compared (a million rows in a
    second, where Python values take several); otherwise, or when that comparison finds a
    difference (a type the two sides spell differently), as Python values."""
    same_types = [_plain(f.type) for f in got.schema] == [_plain(f.type) for f in want.schema]
    if _sortable(got) and got.column_names == want.column_names and same_types:
        try:  # only large_ and plain spellings of one type differ here: a lossless cast
            want_cast = want.cast(got.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
            want_cast = None
        if want_cast is not None:
            keys = [(c, "ascending") for c in got.column_names]
            if got.sort_by(keys).equals(want_cast.sort_by(keys)):
                return True
    return _python_rows(got) == _python_rows(want)


def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    return t
