"""The Thrift binary protocol as the Hive Metastore speaks it: bytes as the spec lays them out, a
decoded struct that re-encodes to the same bytes, and fields tablekeeper does not know (a newer
metastore's) carried through a commit's change untouched. No server: bytes in, bytes out."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

from tablekeeper.catalog.hive import parse_uris
from tablekeeper.catalog.hive_metastore import MetastoreClient, SdField, TableField
from tablekeeper.catalog.hive_tables import (
    committed_table,
    hive_type,
    iceberg_parameters,
    is_iceberg,
    new_table,
    parameters,
)
from tablekeeper.catalog.hive_thrift import (
    MessageType,
    ThriftProtocolError,
    TList,
    TMap,
    TStruct,
    TType,
    decode_message,
    decode_struct,
    encode_message,
    encode_struct,
    string_list,
    string_map,
    struct_of,
    text,
)
from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.types import (
    LONG,
    STRING,
    TIMESTAMPTZ,
    DecimalType,
    ListType,
    MapType,
    NestedField,
    Schema,
    StructType,
)
from tablekeeper.iceberg.updates import new_table_metadata, set_properties

SCHEMA = Schema(0, (NestedField(1, "id", LONG, True), NestedField(2, "name", STRING)))
T0 = 1_700_000_000_000


def every_type() -> TStruct:
    nested = struct_of((1, TType.STRING, b"inner"), (7, TType.I64, -(2**40)))
    return struct_of(
        (1, TType.BOOL, True),
        (2, TType.BYTE, -7),
        (3, TType.I16, -300),
        (4, TType.I32, 2**31 - 1),
        (5, TType.I64, -(2**63)),
        (6, TType.DOUBLE, 0.1),
        (7, TType.STRING, "naïve".encode()),
        (8, TType.STRING, bytes(range(256))),  # binary: not text
        (9, TType.UUID, bytes(range(16))),
        (10, TType.STRUCT, nested),
        (11, TType.LIST, TList(TType.STRUCT, (nested, nested))),
        (12, TType.SET, TList(TType.I32, (1, 2), TType.SET)),
        (13, TType.MAP, TMap(TType.STRING, TType.LIST, ((b"k", string_list(["a", "b"])),))),
        (14, TType.LIST, TList(TType.DOUBLE)),  # empty: its element type still on the wire
        (15, TType.MAP, TMap(TType.I64, TType.BOOL)),
        (32767, TType.BOOL, False),
    )


def test_bytes_are_the_binary_protocols() -> None:
    assert encode_struct(struct_of((1, TType.STRING, b"a"))) == bytes.fromhex("0b0001 00000001 61 00")
    assert encode_struct(struct_of((2, TType.I32, -2))) == bytes.fromhex("080002 fffffffe 00")
    assert encode_struct(struct_of((3, TType.LIST, string_list(["x"])))) == bytes.fromhex(
        "0f0003 0b 00000001 00000001 78 00"
    )
    assert encode_struct(struct_of((4, TType.MAP, string_map({"k": "v"})))) == bytes.fromhex(
        "0d0004 0b0b 00000001 00000001 6b 00000001 76 00"
    )
    # A strict message: version 1 and the type in one word, the name, the sequence id, the body.
    call = encode_message("get_all_databases", MessageType.CALL, 7, TStruct())
    assert call == struct.pack(">Ii", 0x80010001, 17) + b"get_all_databases" + struct.pack(">i", 7) + b"\x00"


def test_a_decoded_struct_reencodes_to_the_same_bytes() -> None:
    original = encode_struct(every_type())
    decoded = decode_struct(original)
    assert decoded == every_type()
    assert encode_struct(decoded) == original
    # Field order is the wire's, not the ids': what a server sent goes back as it came.
    shuffled = TStruct((every_type().fields[3], every_type().fields[0]))
    assert encode_struct(decode_struct(encode_struct(shuffled))) == encode_struct(shuffled)
    message = decode_message(encode_message("lock", MessageType.REPLY, 42, every_type()))
    assert (message.name, message.kind, message.seqid, message.body) == (
        "lock",
        MessageType.REPLY,
        42,
        every_type(),
    )


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (encode_struct(every_type())[:-5], "ends early"),
        (encode_struct(every_type()) + b"\x00", "bytes after the struct"),
        (bytes.fromhex("2a0001 00"), "unknown type 42"),
        (bytes.fromhex("0f0001 0b ffffffff 00"), "a collection of -1 items"),
    ],
)
def test_malformed_bytes_are_refused(data: bytes, error: str) -> None:
    with pytest.raises(ThriftProtocolError, match=error):
        decode_struct(data)


def test_messages_of_another_protocol_are_refused() -> None:
    with pytest.raises(ThriftProtocolError, match="not a strict binary-protocol message"):
        decode_message(b"HTTP/1.1 400 Bad Request\r\n\r\n")


def newer_servers_table() -> TStruct:
    """A Table as a metastore newer than this code might send it: fields of every kind that
    tablekeeper never names (ids 13-99), nested ones inside the storage descriptor too."""
    meta = new_table_metadata(schema=SCHEMA, location="s3://b/db.db/t", timestamp_ms=T0)
    table = new_table("db", "t", "alice", meta, "s3://b/db.db/t/metadata/00000-a.metadata.json")
    sd = table.struct(TableField.SD)
    assert sd is not None
    sd = sd.with_field(40, TType.MAP, TMap(TType.STRING, TType.STRUCT, ((b"x", every_type()),)))
    return (
        table.with_field(TableField.SD, TType.STRUCT, sd)
        .with_field(13, TType.STRUCT, every_type())  # privileges, say
        .with_field(19, TType.I64, 12)  # writeId
        .with_field(99, TType.LIST, TList(TType.UUID, (bytes(16),)))
    )


def test_a_commit_changes_the_parameters_and_keeps_every_other_field_byte_for_byte() -> None:
    wire = encode_struct(newer_servers_table())
    received = decode_struct(wire)
    base = new_table_metadata(schema=SCHEMA, location="s3://b/db.db/t", timestamp_ms=T0)
    base = set_properties(base, {"gone": "1", "gc.enabled": "false"}, timestamp_ms=T0)
    new = set_properties(base, {"k": "v", "gc.enabled": "true"}, timestamp_ms=T0 + 1, removals=("gone",))
    changed = committed_table(
        received, base, new, "s3://b/m/00001-b.metadata.json", "s3://b/m/00000-a.metadata.json"
    )
    sent = decode_struct(encode_struct(changed))
    before = {f.id: encode_struct(TStruct((f,))) for f in received.fields}
    after = {f.id: encode_struct(TStruct((f,))) for f in sent.fields}
    assert [f.id for f in sent.fields] == [f.id for f in received.fields]
    assert {i for i in before if before[i] != after[i]} == {TableField.PARAMETERS}
    params = parameters(sent)
    assert params["metadata_location"] == "s3://b/m/00001-b.metadata.json"
    assert params["previous_metadata_location"] == "s3://b/m/00000-a.metadata.json"
    assert params["table_type"] == "ICEBERG" and params["EXTERNAL"] == "TRUE"
    assert params["k"] == "v" and "gone" not in params
    assert params["external.table.purge"] == "true"  # gc.enabled as Hive names it
    assert params["DO_NOT_UPDATE_STATS"] == "true"


def test_a_schema_change_rewrites_only_the_columns_of_the_storage_descriptor() -> None:
    received = decode_struct(encode_struct(newer_servers_table()))
    base = new_table_metadata(schema=SCHEMA, location="s3://b/db.db/t", timestamp_ms=T0)
    wider = Schema(1, (*SCHEMA.fields, NestedField(3, "tags", ListType(4, STRING))))
    new = replace(base, schemas=(*base.schemas, wider), current_schema_id=1)
    changed = committed_table(received, base, new, "s3://b/m/1.metadata.json", "s3://b/m/0.metadata.json")
    old_sd, new_sd = received.struct(TableField.SD), changed.struct(TableField.SD)
    assert old_sd is not None and new_sd is not None
    assert [f for f in new_sd.fields if f.id != SdField.COLS] == [
        f for f in old_sd.fields if f.id != SdField.COLS
    ]
    cols = new_sd.get(SdField.COLS)
    assert isinstance(cols, TList)
    assert [(c.text(1), c.text(2)) for c in cols.items if isinstance(c, TStruct)] == [
        ("id", "bigint"),
        ("name", "string"),
        ("tags", "array<string>"),
    ]


def test_iceberg_tables_are_told_by_table_type_in_any_case() -> None:
    table = struct_of((TableField.PARAMETERS, TType.MAP, string_map({"table_type": "iceberg"})))
    assert is_iceberg(table)
    assert not is_iceberg(struct_of((TableField.PARAMETERS, TType.MAP, string_map({"table_type": "HIVE"}))))
    assert not is_iceberg(struct_of((TableField.NAME, TType.STRING, text("t"))))


def test_parameters_mirror_the_snapshot_and_leave_oversized_values_out() -> None:
    meta = new_table_metadata(schema=SCHEMA, location="s3://b/t", timestamp_ms=T0, properties={"x": "y"})
    params = iceberg_parameters(
        {"COLUMN_STATS_ACCURATE": "{}", "owner": "bob"}, meta, "s3://m/1", None, set()
    )
    assert "COLUMN_STATS_ACCURATE" not in params and params["owner"] == "bob"
    assert params["snapshot-count"] == "0" and "current-snapshot-id" not in params
    assert "previous_metadata_location" not in params and params["uuid"] == meta.table_uuid
    assert params["current-schema"].startswith('{"type":"struct"')
    huge = Schema(0, tuple(NestedField(i, f"c{i:05d}" * 40, LONG) for i in range(1, 200)))
    big = new_table_metadata(schema=huge, location="s3://b/t", timestamp_ms=T0)
    assert "current-schema" not in iceberg_parameters({}, big, "s3://m/1", None, set())


def test_hive_column_types_are_iceberg_javas() -> None:
    nested = StructType((NestedField(5, "a", DecimalType(10, 2)), NestedField(6, "b", TIMESTAMPTZ)))
    assert hive_type(MapType(3, STRING, 4, nested)) == "map<string,struct<a:decimal(10,2),b:timestamp>>"
    assert hive_type(LONG) == "bigint"


def test_metastore_uris_parse_and_bad_ones_are_refused() -> None:
    assert parse_uris("h", "thrift://a:9083,thrift://b") == [("a", 9083), ("b", 9083)]
    for bad in ("http://a:9083", "thrift://:9083", "thrift://a:99999", "thrift://a:9083/db"):
        with pytest.raises(ConfigError, match="is not a metastore address: use thrift://host:9083"):
            parse_uris("h", bad)


class _Recorded(MetastoreClient):
    """A client whose calls are recorded and answered with one lock per agent, as show_locks
    answers (no connection is made)."""

    def __init__(self) -> None:
        super().__init__((), 1.0)
        self.sent: list[tuple[str, tuple[tuple[int, TType, object], ...]]] = []

    def call(self, method: str, *args: tuple[int, TType, object]) -> TStruct:
        self.sent.append((method, args))
        lock = struct_of((1, TType.I64, 7), (13, TType.STRING, text("tk-agent")))
        return struct_of((1, TType.LIST, TList(TType.STRUCT, (lock,))))


def test_a_lost_lock_is_looked_up_by_the_lowercased_names_the_metastore_stored() -> None:
    client = _Recorded()
    assert client.locks_of("Sales", "Orders", "tk-agent") == [7]
    assert client.locks_of("Sales", "Orders", "another") == []
    method, args = client.sent[0]
    request = args[0][2]
    assert method == "show_locks" and isinstance(request, TStruct)
    assert (request.text(1), request.text(2)) == ("sales", "orders")
