"""Which Parquet columns a data file dictionary-encodes.

pyarrow dictionary-encodes every column and falls back to plain only once the dictionary page
outgrows its limit, so a column of mostly distinct values (ids, names, timestamps) in a file
smaller than that limit is written as a dictionary as large as the values plus an index per
row, which compresses far worse than the plain values. Parquet-mr, which Iceberg Java and Spark
write with, keeps a column's dictionary only while the dictionary and its indices are smaller
than the plain values, and writes the column plain otherwise, judging on the column's first
page. ``dictionary_columns`` applies that rule, column by column, to the first values of the rows
it is given (about a page of each; hashing every value of a large row group costs seconds).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

# Bytes parquet's plain encoding spends on the length of each binary or string value.
_LENGTH_PREFIX = 4
# Values of each column judged: about a default page (1 MB) of 8-byte values.
SAMPLE_VALUES = 1 << 17


def dictionary_columns(table: pa.Table) -> list[str]:
    """Parquet column paths (pyarrow's dotted ``path_in_schema``) whose dictionary encoding of
    ``table``'s values is smaller than their plain encoding: what a writer of these rows should
    pass as ``use_dictionary``."""
    out = []
    for name, values in _leaves(table.slice(0, SAMPLE_VALUES)):
        if _pays(values):
            out.append(name)
    return out


def _leaves(table: pa.Table) -> Iterator[tuple[str, pa.Array]]:
    for i, field in enumerate(table.schema):
        column = table.column(i)
        array = column.combine_chunks() if column.num_chunks else pa.array([], field.type)
        yield from _walk(field.name, array)


def _walk(path: str, array: pa.Array) -> Iterator[tuple[str, pa.Array]]:
    """Each leaf column's path (as parquet names the levels of lists and maps) and its values."""
    if isinstance(array, pa.ExtensionArray):  # uuids, variants: written as their storage
        array = array.storage
    t = array.type
    if pa.types.is_struct(t):
        assert isinstance(array, pa.StructArray)
        for i in range(t.num_fields):
            # A null struct's children are nulls in the file, whatever the child arrays hold.
            yield from _walk(f"{path}.{t.field(i).name}", array.field(i).filter(array.is_valid()))
    elif pa.types.is_map(t):
        assert isinstance(array, pa.MapArray)
        # ``keys`` and ``items`` hold the entries of every row, not only of this slice's.
        offsets = array.offsets
        start = offsets[0].as_py() if len(array) else 0
        count = (offsets[len(array)].as_py() if len(array) else 0) - start
        yield from _walk(f"{path}.key_value.key", array.keys.slice(start, count))
        yield from _walk(f"{path}.key_value.value", array.items.slice(start, count))
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _walk(f"{path}.list.element", array.flatten())
    else:
        yield path, array


def _plain_width(t: pa.DataType) -> int | None:
    """Bytes of one value in parquet's plain encoding for fixed-width types (decimals as the
    spec stores them: int32, int64 or the fewest bytes), None for binary and strings."""
    if pa.types.is_decimal(t):
        precision = t.precision
        if precision <= 9:
            return 4
        if precision <= 18:
            return 8
        return _decimal_bytes(precision)
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return 4
    if pa.types.is_fixed_size_binary(t) or pa.types.is_integer(t) or pa.types.is_floating(t):
        return max(4, int(t.byte_width))  # parquet stores 8- and 16-bit integers as int32
    if pa.types.is_temporal(t):
        return 8
    return None


def _decimal_bytes(precision: int) -> int:
    n = 1
    while 2 ** (8 * n - 1) <= 10**precision:
        n += 1
    return n


def _pays(values: pa.Array) -> bool:
    """Whether dictionary encoding ``values`` is smaller than writing them plain (parquet-mr's
    rule: dictionary page plus bit-packed indices against the plain bytes). Booleans and nulls
    never take a dictionary."""
    t = values.type
    if pa.types.is_boolean(t) or pa.types.is_null(t):
        return False
    values = values.slice(0, SAMPLE_VALUES)  # list elements may outnumber the rows
    present = values.drop_null() if values.null_count else values
    n = len(present)
    if n == 0:
        return True  # nothing to encode either way: keep the writer's default
    try:
        distinct = pc.unique(present)
    except pa.ArrowNotImplementedError:
        return True  # a type Arrow cannot hash: pyarrow's default
    d = len(distinct)
    width = _plain_width(t)
    if width is not None:
        plain, dictionary = n * width, d * width
    else:
        plain = _binary_bytes(present)
        dictionary = _binary_bytes(distinct)
    index_bits = max(1, (d - 1).bit_length())
    return dictionary + (n * index_bits + 7) // 8 < plain


def _binary_bytes(values: pa.Array) -> int:
    lengths = pc.binary_length(values)
    total = pc.sum(lengths).as_py() or 0
    return int(total) + _LENGTH_PREFIX * len(values)
