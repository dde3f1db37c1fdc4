"""Manifest entries from the models straight to Avro bytes, without building a dict per entry.

The fields, their order and the null-by-content rules are those of ``manifest._data_file_record``
(the dict form fastavro writes, kept for the types the compiled encoders leave alone); the tests
hold both forms byte-identical. Fields are taken from the Avro schema, so the order is the
schema's; a field this module does not know makes it hand the manifest back to the dict form.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

from tablekeeper.iceberg.avro_encoder import (
    Encoder,
    compile_encoder,
    int_map,
    nullable,
    optional,
    positional,
)
from tablekeeper.iceberg.manifest import DATA, POSITION_DELETES, V1_BLOCK_SIZE, ManifestEntry

_METRIC_MAPS = frozenset(
    {"column_sizes", "value_counts", "null_value_counts", "nan_value_counts", "lower_bounds", "upper_bounds"}
)
_PLAIN = frozenset(
    {
        "content",
        "file_path",
        "record_count",
        "file_size_in_bytes",
        "key_metadata",
        "split_offsets",
        "equality_ids",
        "sort_order_id",
    }
)
# Java nulls these unless the file's content is the one named.
_ONLY_FOR = {
    "referenced_data_file": POSITION_DELETES,
    "content_offset": POSITION_DELETES,
    "content_size_in_bytes": POSITION_DELETES,
    "first_row_id": DATA,
}


def _only_for(name: str, content: int) -> Callable[[Any], Any]:
    get = attrgetter(name)

    def getter(f: Any) -> Any:
        return get(f) if f.content == content else None

    return getter


def _int_map_encoder(schema: Any, named: dict[str, Encoder]) -> Encoder | None:
    union = optional(schema)
    if union is None or not isinstance(union[1], dict) or union[1].get("type") != "array":
        return None
    item = union[1]["items"]
    if not isinstance(item, dict) or [f["name"] for f in item.get("fields", ())] != ["key", "value"]:
        return None
    key = compile_encoder(item["fields"][0]["type"], named)
    value = compile_encoder(item["fields"][1]["type"], named)
    if key is None or value is None:
        return None
    compile_encoder(item, named)  # registers the record's name, as fastavro's parser does
    return nullable(union[0], int_map(key, value))


def _data_file_encoder(schema: dict[str, Any], named: dict[str, Encoder]) -> Encoder | None:
    fields: list[tuple[Callable[[Any], Any], Encoder]] = []
    for f in schema["fields"]:
        name, kind = f["name"], f["type"]
        encoder: Encoder | None
        getter: Callable[[Any], Any]
        if name == "partition":
            if not isinstance(kind, dict) or kind.get("type") != "record":
                return None
            parts = [compile_encoder(p["type"], named) for p in kind["fields"]]
            if any(p is None for p in parts):
                return None
            encoder, getter = positional([p for p in parts if p is not None]), attrgetter("partition")
        elif name in _METRIC_MAPS:
            encoder, getter = _int_map_encoder(kind, named), attrgetter(name)
        elif name == "file_format":
            encoder, getter = compile_encoder(kind, named), _upper_format
        elif name == "block_size_in_bytes":
            encoder, getter = compile_encoder(kind, named), _v1_block_size
        elif name in _ONLY_FOR:
            encoder, getter = compile_encoder(kind, named), _only_for(name, _ONLY_FOR[name])
        elif name in _PLAIN:
            encoder, getter = compile_encoder(kind, named), attrgetter(name)
        else:
            return None
        if encoder is None:
            return None
        fields.append((getter, encoder))
    return _object(fields)


def _upper_format(f: Any) -> str:
    return str(f.file_format).upper()


def _v1_block_size(_: Any) -> int:
    return V1_BLOCK_SIZE


def _object(fields: list[tuple[Callable[[Any], Any], Encoder]]) -> Encoder:
    def encode(buf: bytearray, v: Any) -> None:
        for getter, field in fields:
            field(buf, getter(v))

    return encode


def compile_entry_encoder(schema: dict[str, Any]) -> Callable[[bytearray, ManifestEntry], None] | None:
    """An encoder of ``ManifestEntry`` models for the manifest_entry ``schema``, or ``None``."""
    named: dict[str, Encoder] = {}
    fields: list[tuple[Callable[[Any], Any], Encoder]] = []
    for f in schema["fields"]:
        name, kind = f["name"], f["type"]
        encoder: Encoder | None
        if name == "data_file":
            if not isinstance(kind, dict) or kind.get("type") != "record":
                return None
            encoder = _data_file_encoder(kind, named)
        elif name in ("status", "snapshot_id", "sequence_number", "file_sequence_number"):
            encoder = compile_encoder(kind, named)
        else:
            return None
        if encoder is None:
            return None
        fields.append((attrgetter(name), encoder))
    return _object(fields)
