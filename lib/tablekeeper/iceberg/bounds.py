"""Bounds Iceberg readers prune by, in the order Iceberg Java compares values.

Java orders doubles with ``Double.compare`` (-0.0 before +0.0, where Python's ``<`` calls them
equal; NaN above everything) and UUIDs with ``UUID.compareTo`` (the high, then the low 64 bits,
each a signed long; Python compares them unsigned). Strings compare by code point (Java's
``Comparators.charSequences`` puts a surrogate pair above every other UTF-16 unit, as Python's
``<`` does) and binary unsigned, as in Python. A lower bound above a value, or an upper bound
below it, lets a reader skip a file or manifest that holds matching rows, so bounds are computed
in Java's order and widened where a source cannot tell the two zeros apart.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

from tablekeeper.iceberg.conversions import to_bytes
from tablekeeper.iceberg.types import IcebergType, PrimitiveType, StructType

_FLOATS = ("float", "double")
_ZEROS = {
    "float": (struct.pack("<f", 0.0), struct.pack("<f", -0.0)),
    "double": (struct.pack("<d", 0.0), struct.pack("<d", -0.0)),
}


def _float_order(v: float) -> tuple[int, float, float]:
    # Float.compare: NaN above everything (bounds leave NaN out, a foreign writer may not).
    return (1, 0.0, 0.0) if math.isnan(v) else (0, v, math.copysign(1.0, v))


def _uuid_order(v: Any) -> tuple[int, int]:
    n = int(v)
    msb, lsb = n >> 64, n & ((1 << 64) - 1)
    return (msb - (1 << 64) if msb >= 1 << 63 else msb), (lsb - (1 << 64) if lsb >= 1 << 63 else lsb)


def java_order(t: IcebergType) -> Callable[[Any], Any] | None:
    """A sort key giving Iceberg Java's order for values of ``t``, where Python's differs."""
    if isinstance(t, PrimitiveType) and t.name in _FLOATS:
        return _float_order
    if isinstance(t, PrimitiveType) and t.name == "uuid":
        return _uuid_order
    return None


def widen_zero(t: IcebergType, bound: bytes, lower: bool) -> bytes:
    """A float bound from a source whose min/max cannot tell -0.0 from +0.0 (Spark's, so Delta's
    stats): a zero lower bound becomes -0.0 and a zero upper bound +0.0, so either zero the file
    may hold stays inside them."""
    if not isinstance(t, PrimitiveType) or t.name not in _FLOATS:
        return bound
    positive, negative = _ZEROS[t.name]
    if bound in (positive, negative):
        return negative if lower else positive
    return bound


class PartitionBounds:
    """Per partition field of a manifest: whether any value is null or NaN, and the least and
    greatest other value, in Java's order."""

    def __init__(self, partition_type: StructType) -> None:
        self.types = [f.type for f in partition_type.fields]
        self.orders = [java_order(t) for t in self.types]
        self.nulls = [False] * len(self.types)
        self.nans = [False] * len(self.types)
        self.lows: list[Any] = [None] * len(self.types)
        self.highs: list[Any] = [None] * len(self.types)

    def update(self, values: Sequence[Any]) -> None:
        for i, v in enumerate(values):
            if v is None:
                self.nulls[i] = True
            elif isinstance(v, float) and math.isnan(v):
                self.nans[i] = True
            elif (order := self.orders[i]) is not None:
                key = order(v)
                if self.lows[i] is None or key < order(self.lows[i]):
                    self.lows[i] = v
                if self.highs[i] is None or key > order(self.highs[i]):
                    self.highs[i] = v
            else:
                if self.lows[i] is None or v < self.lows[i]:
                    self.lows[i] = v
                if self.highs[i] is None or v > self.highs[i]:
                    self.highs[i] = v

    def build(self) -> list[tuple[bool, bool, bytes | None, bytes | None]]:
        """(contains null, contains NaN, lower bound, upper bound) per field."""
        out = []
        for i, t in enumerate(self.types):
            is_float = isinstance(t, PrimitiveType) and t.name in _FLOATS
            out.append(
                (
                    self.nulls[i],
                    self.nans[i] if is_float else False,
                    None if self.lows[i] is None else to_bytes(t, self.lows[i]),
                    None if self.highs[i] is None else to_bytes(t, self.highs[i]),
                )
            )
        return out
