"""The compiled manifest-entry encoder writes exactly the bytes fastavro writes, or hands the file back."""

from __future__ import annotations

import io
import random
from decimal import Decimal
from typing import Any

import fastavro
import pytest

from tablekeeper.iceberg import avro_encoder
from tablekeeper.iceberg.avro_encoder import write_container
from tablekeeper.iceberg.avro_schemas import avro_name, manifest_entry_avro
from tablekeeper.iceberg.content import DataFile, ManifestEntry
from tablekeeper.iceberg.entry_encoder import compile_entry_encoder
from tablekeeper.iceberg.manifest import AVRO_CODEC, _entry_record, read_manifest, write_manifest
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
    DecimalType,
    NestedField,
    Schema,
    StructType,
)

PRIMITIVES = {
    "int": INT,
    "long": LONG,
    "string": STRING,
    "date": DATE,
    "timestamp": TIMESTAMP,
    "boolean": BOOLEAN,
    "float": FLOAT,
    "double": DOUBLE,
    "binary": BINARY,
}


def _partition_type(kinds: list[str]) -> tuple[Schema, PartitionSpec, StructType]:
    schema = Schema(0, tuple(NestedField(i + 1, f"c{i}", PRIMITIVES[k]) for i, k in enumerate(kinds)))
    spec = PartitionSpec(
        0, tuple(PartitionField(i + 1, 1000 + i, f"c{i}", "identity") for i in range(len(kinds)))
    )
    return schema, spec, spec.partition_type(schema)


def _value(kind: str, rng: random.Random) -> Any:
    if rng.random() < 0.2:
        return None
    return {
        "int": lambda: rng.randint(-(2**31), 2**31 - 1),
        "long": lambda: rng.choice([0, 1, 63, 64, -1, -64, -65, 2**63 - 1, -(2**63), rng.getrandbits(40)]),
        "string": lambda: rng.choice(["", "a", "é/ü?x", "x" * 200]),
        "date": lambda: rng.randint(-100_000, 100_000),
        "timestamp": lambda: rng.randint(-(2**62), 2**62),
        "boolean": lambda: rng.random() < 0.5,
        "float": lambda: rng.choice([0.0, -1.5, 3.25]),
        "double": lambda: rng.uniform(-1e300, 1e300),
        "binary": lambda: rng.randbytes(rng.choice([0, 5, 70])),
    }[kind]()


def _names(ptype: StructType) -> list[tuple[str, Any]]:
    return [(avro_name(f.name), f.type) for f in ptype.fields]


@pytest.mark.parametrize("codec", ["deflate", "null"])
def test_container_reads_back_across_blocks(codec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    kinds = ["long", "string"]
    _, _, ptype = _partition_type(kinds)
    schema = manifest_entry_avro(2, ptype)
    encoder = compile_entry_encoder(schema)
    assert encoder is not None
    rng = random.Random(7)
    entries = [_entry(2, kinds, rng, i) for i in range(2_000)]
    monkeypatch.setattr(avro_encoder, "_BLOCK_BYTES", 4096)  # many blocks
    data = write_container(schema, entries, metadata={"format-version": "2"}, codec=codec, encoder=encoder)
    assert data is not None
    reader = fastavro.reader(io.BytesIO(data))
    assert reader.metadata["format-version"] == "2"
    assert reader.metadata["avro.codec"] == codec
    records = [_entry_record(e, _names(ptype), 2) for e in entries]
    assert list(reader) == fastavro_round_trip(schema, records)
    blocks = list(fastavro.block_reader(io.BytesIO(data)))
    assert len(blocks) > 10 and sum(b.num_records for b in blocks) == 2_000


def fastavro_round_trip(schema: dict[str, Any], records: list[dict[str, Any]]) -> list[Any]:
    buf = io.BytesIO()
    fastavro.writer(buf, schema, records, codec="null")
    return list(fastavro.reader(io.BytesIO(buf.getvalue())))


def test_empty_container_has_header_only() -> None:
    schema = manifest_entry_avro(2, StructType(()))
    encoder = compile_entry_encoder(schema)
    assert encoder is not None
    data = write_container(schema, [], metadata={"content": "data"}, codec="deflate", encoder=encoder)
    assert data is not None
    reader = fastavro.reader(io.BytesIO(data))
    assert list(reader) == [] and reader.metadata["content"] == "data"


def test_types_left_to_fastavro_are_not_compiled() -> None:
    schema = Schema(0, (NestedField(1, "d", DecimalType(10, 2)),))
    spec = PartitionSpec(0, (PartitionField(1, 1000, "d", "identity"),))
    assert compile_entry_encoder(manifest_entry_avro(2, spec.partition_type(schema))) is None
    _, _, ptype = _partition_type(["int"])
    avro = manifest_entry_avro(2, ptype)
    data_file = next(f for f in avro["fields"] if f["name"] == "data_file")
    partition = next(f for f in data_file["type"]["fields"] if f["name"] == "partition")
    partition["type"]["fields"][0]["type"] = ["int", "string"]  # a union without null
    assert compile_entry_encoder(avro) is None
    encoder = compile_entry_encoder(manifest_entry_avro(2, StructType(())))
    assert encoder is not None
    assert (
        write_container(
            manifest_entry_avro(2, StructType(())), [], metadata={}, codec="snappy", encoder=encoder
        )
        is None
    )


@pytest.mark.parametrize(
    "value", ["1", 2**31, True, 1.5, b"x", [1]], ids=["str", "overflow", "bool", "float", "bytes", "list"]
)
def test_unexpected_value_hands_the_file_back(value: Any) -> None:
    _, _, ptype = _partition_type(["int"])
    schema = manifest_entry_avro(2, ptype)
    encoder = compile_entry_encoder(schema)
    assert encoder is not None
    good = DataFile(
        content=0,
        file_path="/t/a.parquet",
        file_format="PARQUET",
        partition=(1,),
        record_count=1,
        file_size_in_bytes=1,
    )
    bad = DataFile(
        content=0,
        file_path="/t/b.parquet",
        file_format="PARQUET",
        partition=(value,),
        record_count=1,
        file_size_in_bytes=1,
    )
    entries = [ManifestEntry(1, 9, good), ManifestEntry(1, 9, bad)]
    assert write_container(schema, entries, metadata={}, codec=AVRO_CODEC, encoder=encoder) is None


def test_manifest_with_a_decimal_partition_falls_back_and_reads_back() -> None:
    schema = Schema(0, (NestedField(1, "d", DecimalType(10, 2)), NestedField(2, "s", STRING)))
    spec = PartitionSpec(0, (PartitionField(1, 1000, "d", "identity"),))
    files = [
        DataFile(
            content=0,
            file_path=f"/t/data/{i}.parquet",
            file_format="PARQUET",
            partition=(Decimal("12.34") if i % 2 else None,),
            record_count=i,
            file_size_in_bytes=100 + i,
            lower_bounds={2: b"a"},
        )
        for i in range(5)
    ]
    data, manifest = write_manifest(
        "/t/metadata/m.avro",
        [ManifestEntry(1, 9, f) for f in files],
        format_version=2,
        spec=spec,
        schema=schema,
        snapshot_id=9,
    )
    assert manifest.added_files_count == 5
    back = read_manifest(data, manifest, spec.partition_type(schema), committed=False)
    assert [e.data_file.partition for e in back] == [f.partition for f in files]


def _entry(version: int, kinds: list[str], rng: random.Random, i: int) -> ManifestEntry:
    content = rng.choice([0, 1, 2])

    def metric(make: Any) -> dict[int, Any] | None:
        return rng.choice([None, {}, {k: make() for k in rng.sample(range(1, 400), rng.randint(1, 6))}])

    f = DataFile(
        content=content,
        file_path=f"s3://b/t/data/{i}-{'é' * rng.randint(0, 40)}.parquet",
        file_format=rng.choice(["parquet", "PARQUET", "puffin"]),
        partition=tuple(_value(k, rng) for k in kinds),
        record_count=rng.randint(0, 2**40),
        file_size_in_bytes=rng.randint(0, 2**40),
        column_sizes=metric(lambda: rng.randint(0, 2**34)),
        value_counts=metric(lambda: rng.randint(0, 100)),
        null_value_counts=metric(lambda: rng.randint(0, 100)),
        nan_value_counts=metric(lambda: 0),
        lower_bounds=metric(lambda: rng.randbytes(rng.choice([1, 8, 80]))),
        upper_bounds=metric(lambda: rng.randbytes(8)),
        key_metadata=rng.choice([None, b"\x00k"]),
        split_offsets=rng.choice([None, (4,), (4, 2**34)]),
        equality_ids=rng.choice([None, (1, 2)]) if content == 2 else None,
        sort_order_id=rng.choice([None, 0, 3]),
        first_row_id=rng.choice([None, 0, 2**45]),
        referenced_data_file=rng.choice([None, "s3://b/t/data/x.parquet"]),
        content_offset=rng.choice([None, 4]),
        content_size_in_bytes=rng.choice([None, 40]),
    )
    seq = rng.choice([None, 0, 9])
    return ManifestEntry(rng.choice([0, 1, 2]), rng.choice([None, 5, 2**62]), f, seq, rng.choice([None, seq]))


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("kinds", [[], ["string"], list(PRIMITIVES)])
def test_entry_encoder_writes_what_the_dict_form_writes(version: int, kinds: list[str]) -> None:
    _, _, ptype = _partition_type(kinds)
    schema = manifest_entry_avro(version, ptype)
    encoder = compile_entry_encoder(schema)
    assert encoder is not None
    parsed = fastavro.parse_schema(schema)
    names = [(avro_name(f.name), f.type) for f in ptype.fields]
    rng = random.Random(version * 10 + len(kinds))
    for i in range(300):
        e = _entry(version, kinds, rng, i)
        if version == 1 and e.snapshot_id is None:
            continue
        ours = bytearray()
        encoder(ours, e)
        theirs = io.BytesIO()
        fastavro.schemaless_writer(theirs, parsed, _entry_record(e, names, version))
        assert bytes(ours) == theirs.getvalue()


def test_entry_encoder_declines_schemas_with_unknown_fields() -> None:
    schema = manifest_entry_avro(2, StructType(()))
    extra = {**schema, "fields": [*schema["fields"], {"name": "new_field", "type": "int"}]}
    assert compile_entry_encoder(extra) is None
