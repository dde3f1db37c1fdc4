"""Avro object container files written from a compiled datum encoder.

fastavro picks a union's branch by validating the value against each branch, which was most of a
manifest's write time (a million-file conversion writes a million entries). Iceberg's unions are
all ``["null", T]``, so a compiled encoder (``entry_encoder``) knows the branch from ``None``
alone. The container around its bytes (header with schema, metadata and sync marker) still comes
from fastavro, so both paths write the same file layout. An encoder raises ``Unencodable`` for a
value of an unexpected Python type; the caller then writes the file with fastavro, which owns
every conversion rule.
"""

from __future__ import annotations

import io
import itertools
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

Encoder = Callable[[bytearray, Any], None]

# Flush a block at this many bytes of encoded records, as fastavro's default sync interval does.
_BLOCK_BYTES = 16_000 * 16


class Unencodable(Exception):
    """A value this encoder does not handle: the caller falls back to fastavro."""


class GeneratedSource:
    """Lines of a Python function generated for one Avro schema, with fresh variable names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names = itertools.count()

    def var(self, stem: str) -> str:
        return f"{stem}{next(self.names)}"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)


def write_long(buf: bytearray, n: int) -> None:
    n = (n << 1) ^ (n >> 63)  # zigzag
    while n > 0x7F:
        buf.append((n & 0x7F) | 0x80)
        n >>= 7
    buf.append(n)


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
    encoder: Encoder,
) -> bytes | None:
    """An Avro object container file of ``records`` written by ``encoder`` (compiled for
    ``schema``), or ``None`` if fastavro must write it (another codec, an unencodable value)."""
    if codec not in ("null", "deflate"):
        return None
    out, sync = _header(schema, metadata, codec)
    block = bytearray()
    count = 0

    def flush() -> None:
        nonlocal block, count
        if count == 0:
            return
        _block(out, count, block, codec, sync)
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


def write_container_data(
    schema: Mapping[str, Any], records: Any, *, metadata: Mapping[str, str], codec: str
) -> bytes | None:
    """The container of already encoded ``records`` (an Arrow binary array, one datum each), in
    the blocks ``write_container`` cuts: a block ends with the first record that takes it to
    ``_BLOCK_BYTES``."""
    if codec not in ("null", "deflate"):
        return None
    array = records.combine_chunks() if isinstance(records, pa.ChunkedArray) else records
    array = array.cast(pa.large_binary())
    n = len(array)
    out, sync = _header(schema, metadata, codec)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[array.offset : array.offset + n + 1]
    body = memoryview(array.buffers()[2]) if n else memoryview(b"")
    start = 0
    while start < n:
        stop = int(np.searchsorted(offsets, offsets[start] + _BLOCK_BYTES, side="left"))
        stop = min(max(stop, start + 1), n)
        _block(out, stop - start, body[int(offsets[start]) : int(offsets[stop])], codec, sync)
        start = stop
    return bytes(out)


def _header(schema: Mapping[str, Any], metadata: Mapping[str, str], codec: str) -> tuple[bytearray, bytes]:
    """The container's header as fastavro writes it, and its sync marker (the header's end)."""
    header = io.BytesIO()
    fastavro.writer(header, dict(schema), [], codec=codec, metadata=dict(metadata))
    out = bytearray(header.getvalue())
    return out, bytes(out[-16:])


def _block(out: bytearray, count: int, raw: bytes | bytearray | memoryview, codec: str, sync: bytes) -> None:
    """One block of ``count`` encoded records appended to ``out``."""
    if codec == "deflate":
        compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
        data = compressor.compress(raw) + compressor.flush()
    else:
        data = bytes(raw)
    write_long(out, count)
    write_long(out, len(data))
    out.extend(data)
    out.extend(sync)
