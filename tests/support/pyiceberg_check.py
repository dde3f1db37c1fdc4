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

    def rows(t: pa.Table) -> list[str]:
        return sorted(repr(sorted(r.items())) for r in t.to_pylist())

    assert got.column_names == want.column_names
    assert got.num_rows == want.num_rows, (
        f"{ident}: PyIceberg {got.num_rows} rows, delta-spark {want.num_rows}"
    )
    assert rows(got) == rows(want), f"{ident}: PyIceberg's rows differ from delta-spark's"


def assert_pyiceberg_same_rows(spark: SparkSession, table: str, metadata_location: str) -> None:
    """PyIceberg's scan of the table at ``metadata_location`` holds the rows Iceberg Spark reads
    from ``table`` (user columns, compared as Python values)."""
    from pyiceberg.table import StaticTable

    got = StaticTable.from_metadata(metadata_location).scan().to_arrow()
    want = to_arrow(spark.table(table))

    def rows(t: pa.Table) -> list[str]:
        return sorted(repr(sorted(r.items())) for r in t.to_pylist())

    assert got.num_rows == want.num_rows, (
        f"{table}: PyIceberg {got.num_rows} rows, Iceberg Spark {want.num_rows}"
    )
    assert rows(got) == rows(want), f"{table}: PyIceberg's rows differ from Iceberg Spark's"
