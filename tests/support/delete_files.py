"""Position delete files in the formats the spec allows besides Parquet, laid out as Iceberg Java
writes them: ORC (columns ``file_path``, ``pos``) and Avro (a record whose fields carry the
reserved field ids 2147483546 and 2147483545)."""

from __future__ import annotations

import io
from collections.abc import Sequence

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
