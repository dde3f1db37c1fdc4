"""Manifest entries from the models straight to Avro bytes, without building a dict per entry.

The fields, their order and the null-by-content rules are those of ``manifest._data_file_record``
(the dict form fastavro writes, kept for the types this encoder leaves alone); the tests hold both
forms byte-identical. The field order comes from the Avro schema.

The encoder is generated as Python source for the schema and compiled once: a million-entry
conversion spends most of its driver-free time here, and one straight-line function per entry
costs a third of what a closure per field does. A field or type this module does not know makes
it hand the manifest back to the dict form; a value of an unexpected Python type raises
``Unencodable`` while encoding, with the same effect.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from struct import Struct
from typing import Any

from tablekeeper.iceberg.avro_encoder import GeneratedSource, Unencodable, optional, write_long
from tablekeeper.iceberg.content import DATA, POSITION_DELETES, V1_BLOCK_SIZE, ManifestEntry

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
_ENTRY_FIELDS = ("status", "snapshot_id", "sequence_number", "file_sequence_number")
_INT_LOGICAL = frozenset({"date", "time-millis"})
_LONG_LOGICAL = frozenset(
    {
        "time-micros",
        "timestamp-millis",
        "timestamp-micros",
        "timestamp-nanos",
        "local-timestamp-millis",
        "local-timestamp-micros",
        "local-timestamp-nanos",
    }
)


class _Unsupported(Exception):
    """The schema uses something this generator does not write: use the dict form."""


def _length_prefixed(src: GeneratedSource, depth: int, data: str) -> None:
    n = src.var("n")
    src.emit(depth, f"{n} = len({data})")
    src.emit(depth, f"if {n} < 64:")
    src.emit(depth + 1, f"append({n} << 1)")
    src.emit(depth, "else:")
    src.emit(depth + 1, f"write_long(buf, {n})")
    src.emit(depth, f"buf += {data}")


def _value(src: GeneratedSource, depth: int, schema: Any, expr: str) -> None:
    """Lines writing ``expr`` (evaluated once) as ``schema``."""
    union = optional(schema)
    if union is not None:
        v = src.var("u")
        src.emit(depth, f"{v} = {expr}")
        src.emit(depth, f"if {v} is None:")
        src.emit(depth + 1, f"append({2 * union[0]})")
        src.emit(depth, "else:")
        src.emit(depth + 1, f"append({2 * (1 - union[0])})")
        _value(src, depth + 1, union[1], v)
        return
    kind, logical = schema, None
    if isinstance(schema, dict):
        kind, logical = schema.get("type"), schema.get("logicalType")
        if kind == "array":
            _array(src, depth, schema, expr, logical == "map")
            return
        if kind == "fixed" and logical is None:
            v = src.var("x")
            size = int(schema["size"])
            src.emit(depth, f"{v} = {expr}")
            src.emit(depth, f"if type({v}) is not bytes or len({v}) != {size}:")
            src.emit(depth + 1, f"raise Unencodable({v})")
            src.emit(depth, f"buf += {v}")
            return
        if not (
            logical is None
            or (kind == "int" and logical in _INT_LOGICAL)
            or (kind == "long" and logical in _LONG_LOGICAL)
        ):
            raise _Unsupported(schema)
    v = src.var("v")
    src.emit(depth, f"{v} = {expr}")
    if kind in ("int", "long"):
        bits = 32 if kind == "int" else 64
        src.emit(
            depth, f"if type({v}) is not int or not {-(2 ** (bits - 1))} <= {v} <= {2 ** (bits - 1) - 1}:"
        )
        src.emit(depth + 1, f"raise Unencodable({v})")
        src.emit(depth, f"if 0 <= {v} < 64:")
        src.emit(depth + 1, f"append({v} << 1)")
        src.emit(depth, "else:")
        src.emit(depth + 1, f"write_long(buf, {v})")
    elif kind == "string":
        src.emit(depth, f"if type({v}) is not str:")
        src.emit(depth + 1, f"raise Unencodable({v})")
        b = src.var("b")
        src.emit(depth, f"{b} = {v}.encode('utf-8')")
        _length_prefixed(src, depth, b)
    elif kind == "bytes":
        src.emit(depth, f"if type({v}) is not bytes:")
        src.emit(depth + 1, f"raise Unencodable({v})")
        _length_prefixed(src, depth, v)
    elif kind == "boolean":
        src.emit(depth, f"if type({v}) is not bool:")
        src.emit(depth + 1, f"raise Unencodable({v})")
        src.emit(depth, f"append(1 if {v} else 0)")
    elif kind in ("float", "double"):
        src.emit(depth, f"if type({v}) is not float and type({v}) is not int:")
        src.emit(depth + 1, f"raise Unencodable({v})")
        src.emit(depth, f"buf += {'pack_float' if kind == 'float' else 'pack_double'}({v})")
    else:
        raise _Unsupported(schema)


def _array(src: GeneratedSource, depth: int, schema: dict[str, Any], expr: str, is_map: bool) -> None:
    items = schema["items"]
    a = src.var("a")
    src.emit(depth, f"{a} = {expr}")
    if is_map:
        # Iceberg's int-keyed maps: the model holds a mapping, written as key/value records in
        # ascending key order (what Java writes).
        if not isinstance(items, dict) or [f["name"] for f in items.get("fields", ())] != ["key", "value"]:
            raise _Unsupported(schema)
        src.emit(depth, f"if not isinstance({a}, Mapping):")
        src.emit(depth + 1, f"raise Unencodable({a})")
        src.emit(depth, f"if {a}:")
        src.emit(depth + 1, f"write_long(buf, len({a}))")
        k, x = src.var("k"), src.var("x")
        src.emit(depth + 1, f"for {k}, {x} in sorted({a}.items()):")
        _value(src, depth + 2, items["fields"][0]["type"], k)
        _value(src, depth + 2, items["fields"][1]["type"], x)
    else:
        src.emit(depth, f"if type({a}) is not list and type({a}) is not tuple:")
        src.emit(depth + 1, f"raise Unencodable({a})")
        src.emit(depth, f"if {a}:")
        src.emit(depth + 1, f"write_long(buf, len({a}))")
        x = src.var("x")
        src.emit(depth + 1, f"for {x} in {a}:")
        _value(src, depth + 2, items, x)
    src.emit(depth, "append(0)")


def _data_file(src: GeneratedSource, depth: int, schema: Any, f: str) -> None:
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise _Unsupported(schema)
    for field in schema["fields"]:
        name, kind = field["name"], field["type"]
        if name == "partition":
            if not isinstance(kind, dict) or kind.get("type") != "record":
                raise _Unsupported(kind)
            p = src.var("p")
            size = len(kind["fields"])
            src.emit(depth, f"{p} = {f}.partition")
            src.emit(depth, f"if type({p}) is not tuple or len({p}) != {size}:")
            src.emit(depth + 1, f"raise Unencodable({p})")
            for i, part in enumerate(kind["fields"]):
                _value(src, depth, part["type"], f"{p}[{i}]")
        elif name in _METRIC_MAPS or name in _PLAIN:
            _value(src, depth, kind, f"{f}.{name}")
        elif name == "file_format":
            _value(src, depth, kind, f"{f}.file_format.upper()")
        elif name == "block_size_in_bytes":
            _value(src, depth, kind, str(V1_BLOCK_SIZE))
        elif name in _ONLY_FOR:
            _value(src, depth, kind, f"({f}.{name} if {f}.content == {_ONLY_FOR[name]} else None)")
        else:
            raise _Unsupported(name)


EntryEncoder = Callable[[bytearray, ManifestEntry], None]


def compile_entry_encoder(schema: Mapping[str, Any]) -> EntryEncoder | None:
    """An encoder of ``ManifestEntry`` models for the manifest_entry ``schema``, or ``None``.
    Compiled once per distinct schema: every manifest of a table with one spec shares it."""
    return _compiled(json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _compiled(schema_json: str) -> EntryEncoder | None:
    schema = json.loads(schema_json)
    src = GeneratedSource()
    src.emit(0, "def encode(buf, e):")
    src.emit(1, "append = buf.append")
    try:
        for field in schema["fields"]:
            name, kind = field["name"], field["type"]
            if name == "data_file":
                src.emit(1, "f = e.data_file")
                _data_file(src, 1, kind, "f")
            elif name in _ENTRY_FIELDS:
                _value(src, 1, kind, f"e.{name}")
            else:
                raise _Unsupported(name)
    except _Unsupported:
        return None
    encoder: EntryEncoder = _function(src, "<manifest entry encoder>")
    return encoder


def _function(src: GeneratedSource, filename: str) -> Any:
    """The ``encode`` function ``src`` defines, compiled with the helpers generated code calls."""
    namespace: dict[str, Any] = {
        "Unencodable": Unencodable,
        "Mapping": Mapping,
        "write_long": write_long,
        "pack_float": Struct("<f").pack,
        "pack_double": Struct("<d").pack,
    }
    exec(compile("\n".join(src.lines), filename, "exec"), namespace)
    return namespace["encode"]


RecordEncoder = Callable[[bytearray, tuple[Any, ...]], None]


def compile_record_encoder(schema: Mapping[str, Any]) -> RecordEncoder | None:
    """An encoder of tuples for an Avro record ``schema`` of plain fields (a partition tuple), or
    ``None`` if a field's type is one this generator does not write."""
    return _compiled_record(json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _compiled_record(schema_json: str) -> RecordEncoder | None:
    schema = json.loads(schema_json)
    src = GeneratedSource()
    src.emit(0, "def encode(buf, t):")
    src.emit(1, "append = buf.append")
    size = len(schema["fields"])
    src.emit(1, f"if type(t) is not tuple or len(t) != {size}:")
    src.emit(2, "raise Unencodable(t)")
    try:
        for i, field in enumerate(schema["fields"]):
            _value(src, 1, field["type"], f"t[{i}]")
    except _Unsupported:
        return None
    src.emit(1, "return None")
    encoder: RecordEncoder = _function(src, "<record encoder>")
    return encoder
