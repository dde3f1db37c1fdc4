"""Tables tablekeeper writes are read by Iceberg Java (in Spark) and PyIceberg with identical content.

For each catalog (sql on sqlite, file-system) and format version 1-3: a table with every primitive
Spark can read plus nested struct/list/map, partitioned by identity, bucket, truncate, day and hour,
gets several snapshots (appends, a file delete, a v3 deletion vector), a branch with its own commit
and a tag. Then Spark's rows and metadata tables, and PyIceberg's rows, must match what was written.
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.iceberg.content import POSITION_DELETES, DataFile
from tablekeeper.iceberg.metadata import SnapshotRef
from tablekeeper.iceberg.partitioning import PartitionField, PartitionSpec
from tablekeeper.iceberg.types import (
    BINARY,
    BOOLEAN,
    DATE,
    DOUBLE,
    FLOAT,
    INT,
    LONG,
    STRING,
    TIMESTAMP,
    TIMESTAMPTZ,
    UUID,
    DecimalType,
    FixedType,
    ListType,
    MapType,
    NestedField,
    Schema,
    StructType,
)
from tablekeeper.iceberg.updates import new_table_metadata, set_ref
from tablekeeper.jobs.rewrite_manifests import RewriteManifestsOptions, run_rewrite_manifests
from tests.conftest import FS_CATALOG, SQL_CATALOG
from tests.support.iceberg_writer import local_path, write_rows

pytestmark = pytest.mark.spark

SCHEMA = Schema(
    0,
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "cat", STRING),
        NestedField(3, "name", STRING),
        NestedField(4, "flag", BOOLEAN),
        NestedField(5, "i", INT),
        NestedField(6, "f", FLOAT),
        NestedField(7, "d", DOUBLE),
        NestedField(8, "dec", DecimalType(10, 2)),
        NestedField(9, "day", DATE),
        NestedField(10, "ts", TIMESTAMP),
        NestedField(11, "tstz", TIMESTAMPTZ),
        NestedField(12, "u", UUID),
        NestedField(13, "fx", FixedType(4)),
        NestedField(14, "bin", BINARY),
        NestedField(
            15, "point", StructType((NestedField(16, "x", DOUBLE, True), NestedField(17, "y", DOUBLE)))
        ),
        NestedField(18, "tags", ListType(19, STRING, element_required=False)),
        NestedField(20, "attrs", MapType(21, STRING, 22, LONG, value_required=False)),
    ),
)
SPEC = PartitionSpec(
    0,
    (
        PartitionField(2, 1000, "cat", "identity"),
        PartitionField(1, 1001, "id_bucket", "bucket[4]"),
        PartitionField(3, 1002, "name_trunc", "truncate[2]"),
        PartitionField(11, 1003, "tstz_day", "day"),
        PartitionField(10, 1004, "ts_hour", "hour"),
    ),
)
BASE_TS = dt.datetime(2026, 3, 1, 10, 0, 0)


def make_row(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "cat": None if i % 7 == 0 else f"c{i % 3}",
        "name": f"{'ab' if i % 2 else 'xyz'}-{i}",
        "flag": i % 2 == 0,
        "i": i * 3 - 20,
        "f": float(i) / 4,
        "d": i * 1.5 - 7,
        "dec": Decimal(i * 125 - 999).scaleb(-2),
        "day": dt.date(2026, 1, 1) + dt.timedelta(days=i),
        "ts": BASE_TS + dt.timedelta(hours=i * 5, microseconds=i),
        "tstz": (BASE_TS + dt.timedelta(hours=i * 7)).replace(tzinfo=dt.timezone.utc),
        "u": uuid.UUID(int=i * 7919 + 1).bytes,
        "fx": bytes([i % 256, 1, 2, 3]),
        "bin": bytes(range(i % 5)),
        "point": None if i % 5 == 0 else {"x": float(i), "y": None if i % 4 == 0 else -float(i)},
        "tags": None if i % 6 == 0 else [f"t{j}" for j in range(i % 3)] + [None],
        "attrs": [(f"k{j}", i * j if j else None) for j in range(i % 3)],
    }


def norm(value: Any) -> Any:
    """One comparable form for what Spark, PyIceberg and the writer each call the same value."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if hasattr(value, "asDict"):
        return {k: norm(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, list) and value and isinstance(value[0], tuple):
        return {k: norm(v) for k, v in value}
    if isinstance(value, list):
        return [norm(v) for v in value]
    return value


def norm_row(row: dict[str, Any]) -> tuple[Any, ...]:
    out = []
    for f in SCHEMA.fields:
        v = row[f.name]
        if f.name == "u" and isinstance(v, (bytes, bytearray)):
            v = uuid.UUID(bytes=bytes(v))
        if f.name == "u" and isinstance(v, str):
            v = uuid.UUID(v)
        if f.name == "attrs" and v == []:
            v = {}
        out.append(repr(norm(v)))
    return tuple(out)


def expected(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(norm_row(r) for r in rows)


def spark_rows(spark, table: str, ref: str | None = None) -> list[tuple[Any, ...]]:  # type: ignore[no-untyped-def]
    suffix = f" VERSION AS OF '{ref}'" if ref else ""
    return sorted(norm_row(r.asDict()) for r in spark.sql(f"SELECT * FROM {table}{suffix}").collect())


def dv_file(meta, target: DataFile, positions: list[int]) -> DataFile:  # type: ignore[no-untyped-def]
    from tablekeeper.iceberg.puffin import write_dv_file
    from tablekeeper.iceberg.roaring import RoaringBitmap64

    data, blobs = write_dv_file([(target.file_path, RoaringBitmap64(positions))], "tablekeeper tests")
    location = f"{meta.location}/data/{uuid.uuid4()}-deletes.puffin"
    local_path(location).write_bytes(data)
    blob = blobs[0]
    return DataFile(
        content=POSITION_DELETES,
        file_path=location,
        file_format="PUFFIN",
        partition=target.partition,
        record_count=len(positions),
        file_size_in_bytes=len(data),
        spec_id=target.spec_id,
        referenced_data_file=target.file_path,
        content_offset=blob.offset,
        content_size_in_bytes=blob.length,
    )


@pytest.mark.parametrize("catalog_name", [SQL_CATALOG, FS_CATALOG])
@pytest.mark.parametrize("version", [1, 2, 3])
def test_engines_read_what_tablekeeper_wrote(spark, catalogs, catalog_name: str, version: int) -> None:  # type: ignore[no-untyped-def]
    catalog = catalog_for(catalogs.get(catalog_name))
    ident = f"written.t{version}"
    meta = new_table_metadata(
        schema=SCHEMA,
        location=catalog.default_table_location(ident),
        timestamp_ms=1_770_000_000_000,
        spec=SPEC,
        format_version=version,
    )
    catalog.create_table(ident, meta)
    committer = Committer(catalog, ident)

    rows = [make_row(i) for i in range(30)]
    first = write_rows(meta, rows[:18])
    s1 = committer.commit_snapshot(SnapshotChange("append", added_files=tuple(first))).snapshot
    second = write_rows(meta, rows[18:])
    s2 = committer.commit_snapshot(SnapshotChange("append", added_files=tuple(second))).snapshot
    assert s1 is not None and s2 is not None

    # Remove one whole file: its rows disappear from main.
    gone = first[0]
    committer.commit_snapshot(SnapshotChange("delete", removed_paths=frozenset({gone.file_path})))
    gone_ids = {r["id"] for r in rows[:18] if r["id"] in _ids_in(gone, rows)}
    live = [r for r in rows if r["id"] not in gone_ids]

    if version == 3:
        target = second[0]
        target_rows = _rows_in(target, rows)
        committer.commit_snapshot(SnapshotChange("delete", added_files=(dv_file(meta, target, [0]),)))
        live = [r for r in live if r["id"] != target_rows[0]["id"]]

    # Regroup main's data manifests into one (a replace snapshot with no data change).
    rewritten = run_rewrite_manifests(RewriteManifestsOptions(ident), catalog, ident)
    assert rewritten.status == "ok"
    rewrite = catalog.require(ident).metadata.current_snapshot()
    assert rewrite is not None and rewrite.operation == "replace"
    # main had two data manifests (the one the delete rewrote, the second append's); v3's DV
    # manifest is carried over unchanged.
    assert rewrite.summary["manifests-replaced"] == "2" and rewrite.summary["manifests-created"] == "1"
    assert rewrite.summary["manifests-kept"] == ("1" if version == 3 else "0")

    # A tag on the first snapshot and a branch from the second with its own append.
    committer.update_metadata(
        lambda m, now: set_ref(m, "t1", SnapshotRef(s1.snapshot_id, "tag"), timestamp_ms=now)
    )
    committer.update_metadata(
        lambda m, now: set_ref(
            m, "dev", SnapshotRef(s2.snapshot_id, "branch", max_ref_age_ms=86_400_000), timestamp_ms=now
        )
    )
    extra = [make_row(i) for i in range(100, 104)]
    committer.commit_snapshot(
        SnapshotChange("append", added_files=tuple(write_rows(meta, extra)), branch="dev")
    )

    table = f"{catalog_name}.{ident}"
    spark.sql(f"REFRESH TABLE {table}")
    assert spark_rows(spark, table) == expected(live)
    assert spark_rows(spark, table, "t1") == expected(rows[:18])
    assert spark_rows(spark, table, "dev") == expected(rows + extra)

    loaded = catalog.load_table(ident)
    final = loaded.metadata
    refs = {r.name: (r.type, r.snapshot_id) for r in spark.sql(f"SELECT * FROM {table}.refs").collect()}
    assert refs == {name: (ref.type.upper(), ref.snapshot_id) for name, ref in final.refs.items()}
    snaps = spark.sql(
        f"SELECT snapshot_id, parent_id, operation, manifest_list FROM {table}.snapshots"
    ).collect()
    assert sorted((s.snapshot_id, s.parent_id, s.operation, s.manifest_list) for s in snaps) == sorted(
        (s.snapshot_id, s.parent_snapshot_id, s.operation, s.manifest_list) for s in final.snapshots
    )
    spark_files = {r.file_path for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()}
    expected_files = {f.file_path for f in first[1:] + second}
    if version == 3:
        expected_files |= {
            r.file_path for r in spark.sql(f"SELECT file_path FROM {table}.delete_files").collect()
        }
    assert spark_files == expected_files
    data_manifests = spark.sql(f"SELECT content FROM {table}.manifests WHERE content = 0").count()
    assert data_manifests == 1

    # PyIceberg, through the same catalog, sees the same rows on main and on the tag.
    py_table = _pyiceberg_table(catalogs, catalog_name, ident, loaded.metadata_location)
    assert py_table.metadata.format_version == version
    py_rows = sorted(norm_row(r) for r in py_table.scan().to_arrow().to_pylist())
    assert py_rows == expected(live)
    tag_rows = py_table.scan(snapshot_id=s1.snapshot_id).to_arrow().to_pylist()
    assert sorted(norm_row(r) for r in tag_rows) == expected(rows[:18])

    if version == 3:
        # Row lineage: ids tablekeeper assigned and ids Java assigns on top never collide, and the
        # next-row-id accounting is accepted in both directions.
        spark.sql(f"INSERT INTO {table} (id, cat, name) VALUES (500, 'c1', 'from-spark')")
        more = write_rows(catalog.load_table(ident).metadata, [make_row(600)])
        committer.commit_snapshot(SnapshotChange("append", added_files=tuple(more)))
        spark.sql(f"REFRESH TABLE {table}")
        spark.sql(f"INSERT INTO {table} (id, cat, name) VALUES (501, 'c2', 'from-spark-again')")
        lineage = spark.sql(f"SELECT id, _row_id, _last_updated_sequence_number FROM {table}").collect()
        row_ids = [r._row_id for r in lineage]
        assert None not in row_ids and len(set(row_ids)) == len(row_ids)
        assert all(r._last_updated_sequence_number is not None for r in lineage)
        after = catalog.load_table(ident).metadata
        assert after.next_row_id is not None and after.next_row_id > max(row_ids)


def _ids_in(f: DataFile, rows: list[dict[str, Any]]) -> set[int]:
    return {r["id"] for r in _rows_in(f, rows)}


def _rows_in(f: DataFile, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    ids = pq.read_table(local_path(f.file_path), columns=["id"]).column("id").to_pylist()
    by_id = {r["id"]: r for r in rows}
    return [by_id[i] for i in ids]


def _pyiceberg_table(catalogs, catalog_name: str, ident: str, metadata_location: str):  # type: ignore[no-untyped-def]
    if catalog_name == SQL_CATALOG:
        from pyiceberg.catalog.sql import SqlCatalog

        conf = catalogs.get(catalog_name)
        return SqlCatalog(catalog_name, uri=conf.uri, warehouse=conf.warehouse).load_table(ident)
    from pyiceberg.table import StaticTable

    return StaticTable.from_metadata(metadata_location)


def test_types_beyond_spark_are_read_by_pyiceberg(spark, catalogs) -> None:  # type: ignore[no-untyped-def]
    """time, timestamp_ns, timestamptz_ns and unknown (v3): PyIceberg reads them exactly; Iceberg
    Spark 1.11 refuses time and the ns types itself, and reads unknown columns as null."""
    from pyiceberg.catalog.sql import SqlCatalog

    from tablekeeper.iceberg.types import TIME, TIMESTAMP_NS, TIMESTAMPTZ_NS, UNKNOWN

    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    conf = catalogs.get(SQL_CATALOG)
    rows = [
        {
            "id": i,
            "t": dt.time(1, 2, 3, i),
            "tns": BASE_TS + dt.timedelta(microseconds=i),
            "tzns": (BASE_TS + dt.timedelta(seconds=i)).replace(tzinfo=dt.timezone.utc),
            "u": None,
        }
        for i in range(3)
    ]
    fields = (
        NestedField(1, "id", LONG, True),
        NestedField(2, "t", TIME),
        NestedField(3, "tns", TIMESTAMP_NS),
        NestedField(4, "tzns", TIMESTAMPTZ_NS),
        NestedField(5, "u", UNKNOWN),
    )
    for name, schema in (
        ("extra_types", Schema(0, fields)),
        ("unknown_only", Schema(0, (fields[0], fields[4]))),
    ):
        ident = f"written.{name}"
        meta = new_table_metadata(
            schema=schema,
            location=catalog.default_table_location(ident),
            timestamp_ms=1_770_000_000_000,
            format_version=3,
        )
        catalog.create_table(ident, meta)
        data = [{f.name: r[f.name] for f in schema.fields} for r in rows]
        Committer(catalog, ident).commit_snapshot(
            SnapshotChange("append", added_files=tuple(write_rows(meta, data)))
        )
        py = SqlCatalog(SQL_CATALOG, uri=conf.uri, warehouse=conf.warehouse).load_table(ident)
        got = sorted(py.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
        assert [{k: norm(v) for k, v in r.items()} for r in got] == [
            {k: norm(v) for k, v in r.items()} for r in data
        ]
    with pytest.raises(Exception, match="Spark does not support time fields"):
        spark.sql(f"SELECT * FROM {SQL_CATALOG}.written.extra_types").collect()
    spark_rows = spark.sql(f"SELECT id, u FROM {SQL_CATALOG}.written.unknown_only ORDER BY id").collect()
    assert [(r.id, r.u) for r in spark_rows] == [(0, None), (1, None), (2, None)]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_schema_and_partition_evolution_written_by_tablekeeper(spark, catalogs, version: int) -> None:  # type: ignore[no-untyped-def]
    from pyiceberg.catalog.sql import SqlCatalog

    from tablekeeper.iceberg.updates import add_partition_spec, add_schema

    catalog = catalog_for(catalogs.get(SQL_CATALOG))
    ident = f"written.evolved_v{version}"
    base = Schema(
        0, (NestedField(1, "id", LONG, True), NestedField(2, "cat", STRING), NestedField(3, "i", INT))
    )
    meta = new_table_metadata(
        schema=base,
        location=catalog.default_table_location(ident),
        timestamp_ms=1_770_000_000_000,
        spec=PartitionSpec(0, (PartitionField(2, 1000, "cat", "identity"),)),
        format_version=version,
    )
    catalog.create_table(ident, meta)
    committer = Committer(catalog, ident)
    old_rows = [{"id": i, "cat": f"c{i % 2}", "i": i} for i in range(6)]
    committer.commit_snapshot(SnapshotChange("append", added_files=tuple(write_rows(meta, old_rows))))
    evolved = Schema(
        0,
        (
            NestedField(1, "id", LONG, True),
            NestedField(2, "cat", STRING),
            NestedField(3, "i", LONG),
            NestedField(4, "note", STRING),
        ),
    )
    committer.update_metadata(lambda m, now: add_schema(m, evolved, timestamp_ms=now))
    spec = PartitionSpec(
        0, (PartitionField(2, 0, "cat", "identity"), PartitionField(1, 0, "id_bucket", "bucket[4]"))
    )
    committer.update_metadata(lambda m, now: add_partition_spec(m, spec, timestamp_ms=now))
    current = catalog.load_table(ident).metadata
    assert current.default_spec_id == 1 and current.current_schema_id == 1
    new_rows = [{"id": i, "cat": "c9", "i": 10**10 + i, "note": f"n{i}"} for i in range(10, 14)]
    committer.commit_snapshot(SnapshotChange("append", added_files=tuple(write_rows(current, new_rows))))

    expected = sorted(
        [(r["id"], r["cat"], r["i"], None) for r in old_rows]
        + [(r["id"], r["cat"], r["i"], r["note"]) for r in new_rows]
    )
    table = f"{SQL_CATALOG}.{ident}"
    spark.sql(f"REFRESH TABLE {table}")
    assert sorted(tuple(r) for r in spark.sql(f"SELECT id, cat, i, note FROM {table}").collect()) == expected
    assert {r.spec_id for r in spark.sql(f"SELECT spec_id FROM {table}.files").collect()} == {0, 1}
    conf = catalogs.get(SQL_CATALOG)
    py = SqlCatalog(SQL_CATALOG, uri=conf.uri, warehouse=conf.warehouse).load_table(ident)
    got = sorted((r["id"], r["cat"], r["i"], r["note"]) for r in py.scan().to_arrow().to_pylist())
    assert got == expected
