"""Test support: write rows as Parquet data files of an Iceberg table (field ids, metrics, partitions).

Only tests use this; the jobs write data on Spark executors.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tablekeeper.iceberg.content import DataFile
from tablekeeper.iceberg.conversions import native_to_value
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.parquet import data_file_from_footer, to_arrow_schema
from tablekeeper.iceberg.transforms import parse_transform
from tablekeeper.io import FileIO


def local_path(location: str) -> Path:
    return Path(location.removeprefix("file:"))


def write_rows(meta: TableMetadata, rows: list[dict[str, Any]], spec_id: int | None = None) -> list[DataFile]:
    """One Parquet file per partition tuple, in the order partitions first appear."""
    schema = meta.schema()
    spec = meta.spec(spec_id)
    arrow_schema = to_arrow_schema(schema)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        key = []
        for pf in spec.fields:
            source = schema.find_field(pf.source_id)
            assert source is not None
            value = native_to_value(source.type, row[source.name]) if row[source.name] is not None else None
            key.append(parse_transform(pf.transform).apply(source.type, value))
        groups.setdefault(tuple(key), []).append(row)
    files = []
    for partition, group in groups.items():
        location = f"{meta.location}/data/{uuid.uuid4()}.parquet"
        stored = [{k: v for k, v in r.items() if k in arrow_schema.names} for r in group]
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(stored, schema=arrow_schema), buffer)
        data = buffer.getvalue()
        FileIO.for_location(location).write(location, data)  # local disk or an object store alike
        files.append(
            data_file_from_footer(
                pq.read_metadata(pa.BufferReader(data)),
                schema,
                path=location,
                file_size=len(data),
                spec_id=spec.spec_id,
                partition=partition,
            )
        )
    return files


def appended_table(
    catalog: Any,
    ident: str,
    schema: Any,
    appends: int,
    respell: Callable[[str], str] | None = None,
) -> Any:
    """``ident`` created (v2, at the catalog's default location) with ``appends`` appends of one
    row each (``{"id": i, "s": "r<i>"}``) committed through tablekeeper; the last append's files
    written under the location as ``respell`` spells it, when given. Returns the table loaded."""
    from dataclasses import replace

    from tablekeeper.commit import Committer, SnapshotChange
    from tablekeeper.iceberg.updates import new_table_metadata

    location = catalog.default_table_location(ident)
    catalog.create_table(
        ident, new_table_metadata(schema=schema, location=location, timestamp_ms=1, format_version=2)
    )
    for i in range(appends):
        current = catalog.require(ident).metadata
        if respell is not None and i == appends - 1:
            current = replace(current, location=respell(current.location))
        files = write_rows(current, [{"id": i, "s": f"r{i}"}])
        Committer(catalog, ident).commit_snapshot(SnapshotChange("append", added_files=tuple(files)))
    return catalog.require(ident)
