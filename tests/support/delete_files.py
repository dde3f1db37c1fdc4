"""Position delete files in the formats the spec allows besides Parquet, laid out as Iceberg Java
writes them: ORC (columns ``file_path``, ``pos``) and Avro (a record whose fields carry the
reserved field ids 2147483546 and 2147483545)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import fastavro
import pyarrow as pa
from pyarrow import orc

AVRO_SCHEMA = {
    "type": "record",
    "name": "delete",
    "fields": [
        {"name": "file_path", "type": "string", "field-id": 2147483546},
        {"name": "pos", "type": "long", "field-id": 2147483545},
    ],
}


def orc_deletes(rows: Sequence[tuple[str, int]]) -> bytes:
    table = pa.table(
        {
            "file_path": pa.array([r[0] for r in rows], pa.string()),
            "pos": pa.array([r[1] for r in rows], pa.int64()),
        }
    )
    sink = pa.BufferOutputStream()
    orc.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def avro_deletes(rows: Sequence[tuple[str, int]]) -> bytes:
    sink = io.BytesIO()
    fastavro.writer(sink, AVRO_SCHEMA, [{"file_path": p, "pos": n} for p, n in rows])
    return sink.getvalue()


def iceberg_table_with_every_delete_format(spark: Any, table: str, batches: int) -> None:
    """A v2 merge-on-read table written by Iceberg Java, partitioned by ``cat``, with ``batches``
    inserts of 30 rows and then one DELETE in each position delete format the spec allows
    (``write.delete.format.default``: Parquet, ORC, Avro); partition-scoped delete files name
    several data files."""
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat) "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
        "'write.delete.granularity'='partition')"
    )
    for i in range(batches):
        spark.sql(
            f"INSERT INTO {table} SELECT id, IF(id % 2 = 0, 'a', 'b') FROM range({i * 30}, {(i + 1) * 30})"
        )
    for k, fmt in enumerate(["parquet", "orc", "avro"]):
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.format.default'='{fmt}')")
        spark.sql(f"DELETE FROM {table} WHERE id % 7 = {k}")
