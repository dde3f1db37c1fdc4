"""A compiled Avro binary encoder for the record shapes Iceberg manifests use.

fastavro picks a union's branch by validating the value against each branch, which was most of a
manifest's write time (a million-file conversion writes a million entries). Iceberg's unions are
all ``["null", T]``, so the branch follows from ``None`` alone. The schema is compiled once into
closures; the container header (schema, metadata, sync marker) still comes from fastavro, so both
paths write the same file layout.

Only plain types are compiled: records, arrays, ``["null", T]`` unions, primitives, plain fixed,
and int/long logical types carried as Python ints. Anything else (decimals, uuids, maps, other
unions) makes ``compile_encoder`` return ``None``, and a value of an unexpected Python type raises
``Unencodable`` while encoding; either way the caller writes the file with fastavro, which owns
every conversion rule.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from struct import Struct
from typing import Any

import fastavro

Encoder = Callable[[bytearray, Any], None]

_PACK_FLOAT = Struct("<f").pack
_PACK_DOUBLE = Struct("<d").pack
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
# Flush a block at this many bytes of encoded records, as fastavro's default sync interval does.
_BLOCK_BYTES = 16_000 * 16


class Unencodable(Exception):
    """A value this encoder does not handle: the caller falls back to fastavro."""


def write_long(buf: bytearray, n: int) -> None:
    n = (n << 1) ^ (n >> 63)  # zigzag
    while n > 0x7F:
        buf.append((n & 0x7F) | 0x80)
        n >>= 7
    buf.append(n)


def _integer(bits: int) -> Encoder:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def encode(buf: bytearray, v: Any) -> None:
        if type(v) is not int or not low <= v <= high:
            raise Unencodable(v)
        if 0 <= v < 64:  # one byte: most ids, counts and statuses
            buf.append(v << 1)
        else:
            write_long(buf, v)

    return encode


def _boolean(buf: bytearray, v: Any) -> None:
    if type(v) is not bool:
        raise Unencodable(v)
    buf.append(1 if v else 0)


def _float(buf: bytearray, v: Any) -> None:
    if type(v) is not float and type(v) is not int:
        raise Unencodable(v)
    buf += _PACK_FLOAT(v)


def _double(buf: bytearray, v: Any) -> None:
    if type(v) is not float and type(v) is not int:
        raise Unencodable(v)
    buf += _PACK_DOUBLE(v)


def _bytes(buf: bytearray, v: Any) -> None:
    if type(v) is not bytes:
        raise Unencodable(v)
    n = len(v)
    if n < 64:
        buf.append(n << 1)
    else:
        write_long(buf, n)
    buf += v


def _string(buf: bytearray, v: Any) -> None:
    if type(v) is not str:
        raise Unencodable(v)
    data = v.encode("utf-8")
    n = len(data)
    if n < 64:
        buf.append(n << 1)
    else:
        write_long(buf, n)
    buf += data


def _null(buf: bytearray, v: Any) -> None:
    if v is not None:
        raise Unencodable(v)


_PRIMITIVES: Mapping[str, Encoder] = {
    "null": _null,
    "boolean": _boolean,
    "int": _integer(32),
    "long": _integer(64),
    "float": _float,
    "double": _double,
    "bytes": _bytes,
    "string": _string,
}


def _fixed(size: int) -> Encoder:
    def encode(buf: bytearray, v: Any) -> None:
        if type(v) is not bytes or len(v) != size:
            raise Unencodable(v)
        buf += v

    return encode


def _union(null_index: int, inner: Encoder) -> Encoder:
    null_tag, value_tag = 2 * null_index, 2 * (1 - null_index)  # zigzag of the branch index

    def encode(buf: bytearray, v: Any) -> None:
        if v is None:
            buf.append(null_tag)
            return
        buf.append(value_tag)
        inner(buf, v)

    return encode


def _array(item: Encoder) -> Encoder:
    def encode(buf: bytearray, v: Any) -> None:
        if type(v) is not list and type(v) is not tuple:
            raise Unencodable(v)
        if v:
            write_long(buf, len(v))
            for x in v:
                item(buf, x)
        buf.append(0)

    return encode


def _record(fields: Sequence[tuple[str, Encoder]]) -> Encoder:
    if len(fields) == 2:  # the key/value records of Iceberg's int-keyed maps: no loop
        (first_name, first), (second_name, second) = fields

        def pair(buf: bytearray, v: Any) -> None:
            if type(v) is not dict:
                raise Unencodable(v)
            first(buf, v.get(first_name))
            second(buf, v.get(second_name))

        return pair

    def encode(buf: bytearray, v: Any) -> None:
        if type(v) is not dict:
            raise Unencodable(v)
        get = v.get
        for name, field in fields:
            field(buf, get(name))

    return encode


def _compile(schema: Any, named: dict[str, Encoder]) -> Encoder | None:
    if isinstance(schema, str):
        return _PRIMITIVES.get(schema) or named.get(schema)
    if isinstance(schema, list):
        if len(schema) != 2 or "null" not in schema:
            return None
        null_index = schema.index("null")
        inner = _compile(schema[1 - null_index], named)
        return None if inner is None else _union(null_index, inner)
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if kind == "record":
        fields: list[tuple[str, Encoder]] = []
        for f in schema["fields"]:
            encoder = _compile(f["type"], named)
            if encoder is None:
                return None
            fields.append((f["name"], encoder))
        record = _record(fields)
        named[schema["name"]] = record
        return record
    if kind == "array":
        item = _compile(schema["items"], named)
        return None if item is None else _array(item)  # logicalType "map": Iceberg's int-keyed maps
    if kind == "fixed":
        if logical is not None:
            return None
        fixed = _fixed(int(schema["size"]))
        named[schema["name"]] = fixed
        return fixed
    if (
        logical is None
        or (kind == "int" and logical in _INT_LOGICAL)
        or (kind == "long" and logical in _LONG_LOGICAL)
    ):
        return _compile(kind, named)
    return None


def compile_encoder(schema: Any, named: dict[str, Encoder] | None = None) -> Encoder | None:
    """The datum encoder for ``schema``, or ``None`` when it uses a type left to fastavro.
    ``named``: types already defined by name (filled in as records and fixed types compile)."""
    return _compile(dict(schema) if isinstance(schema, Mapping) else schema, {} if named is None else named)


def optional(schema: Any) -> tuple[int, Any] | None:
    """For a ``["null", T]`` union (either order): the null branch's index and ``T``."""
    if isinstance(schema, list) and len(schema) == 2 and "null" in schema:
        i = schema.index("null")
        return i, schema[1 - i]
    return None


def write_container(
    schema: Mapping[str, Any],
    records: Iterable[Any],
    *,
    metadata: Mapping[str, str],
    codec: str,
    encoder: Encoder | None = None,
) -> bytes | None:
    """An Avro object container file of ``records``, or ``None`` if fastavro must write it.
    ``encoder``: one compiled for ``schema`` that takes other objects than dicts (e.g. models)."""
    if codec not in ("null", "deflate"):
        return None
    encoder = encoder or compile_encoder(schema)
    if encoder is None:
        return None
    header = io.BytesIO()
    fastavro.writer(header, dict(schema), [], codec=codec, metadata=dict(metadata))
    out = bytearray(header.getvalue())
    sync = bytes(out[-16:])  # the header ends with the file's sync marker
    block = bytearray()
    count = 0

    def flush() -> None:
        nonlocal block, count
        if count == 0:
            return
        if codec == "deflate":
            compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
            data = compressor.compress(bytes(block)) + compressor.flush()
        else:
            data = bytes(block)
        write_long(out, count)
        write_long(out, len(data))
        out.extend(data)
        out.extend(sync)
        block, count = bytearray(), 0

    try:
        for record in records:
            encoder(block, record)
            count += 1
            if len(block) >= _BLOCK_BYTES:
                flush()
    except Unencodable:
        return None
    flush()
    return bytes(out)
