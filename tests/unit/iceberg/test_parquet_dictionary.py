"""Which columns a data file dictionary-encodes: parquet-mr's rule (a dictionary only where it
and its indices are smaller than the plain values), at every nesting level."""

from __future__ import annotations

import random
import uuid
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tablekeeper.iceberg.parquet_dictionary import _walk, dictionary_columns

_N = 5000


def _table() -> pa.Table:
    ids = random.Random(5).sample(range(2**40), _N)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "country": pa.array([f"c{i % 7}" for i in range(_N)], pa.large_string()),
            "name": pa.array([f"name-{i}" for i in ids], pa.large_string()),
            "flag": pa.array([i % 2 == 0 for i in range(_N)]),
            "price": pa.array([Decimal(i % 3) for i in range(_N)], pa.decimal128(10, 2)),
            "st": pa.array([{"x": i, "y": i % 3} for i in ids]),
            "l": pa.array([[i, i + 1] for i in ids], pa.list_(pa.field("element", pa.int64()))),
            "m": pa.array([[(f"k{i % 4}", i)] for i in ids], pa.map_(pa.large_string(), pa.int64())),
        }
    )


def test_only_columns_a_dictionary_shrinks_take_one() -> None:
    assert sorted(dictionary_columns(_table())) == [
        "country",
        "m.key_value.key",
        "price",
        "st.y",
    ]


def test_the_paths_are_the_files_own_and_the_writer_honours_them(tmp_path: Path) -> None:
    table = _table()
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, use_dictionary=dictionary_columns(table))
    group = pq.read_metadata(path).row_group(0)
    encoded = {
        group.column(c).path_in_schema: group.column(c).dictionary_page_offset is not None
        for c in range(group.num_columns)
    }
    assert {p for p, d in encoded.items() if d} == set(dictionary_columns(table))
    assert set(encoded) >= {"st.x", "st.y", "l.list.element", "m.key_value.key", "m.key_value.value"}


def test_mostly_distinct_values_are_written_smaller_plain(tmp_path: Path) -> None:
    """The rule's point: a column of distinct values written as pyarrow's default dictionary is
    much larger than plain once compressed (a file under the dictionary page limit never falls
    back on its own)."""
    table = _table().select(["id", "name"])
    chosen, default = tmp_path / "chosen.parquet", tmp_path / "default.parquet"
    pq.write_table(table, chosen, compression="zstd", use_dictionary=dictionary_columns(table))
    pq.write_table(table, default, compression="zstd")
    assert chosen.stat().st_size < default.stat().st_size * 0.8


def test_extension_and_fixed_types_are_judged_by_their_storage() -> None:
    """uuids reach the writer as Arrow's uuid extension type, which Arrow cannot hash."""
    ids = [uuid.UUID(int=i * 7919).bytes for i in range(_N)]
    table = pa.table(
        {
            "u": pa.ExtensionArray.from_storage(pa.uuid(), pa.array(ids, pa.binary(16))),
            "few": pa.ExtensionArray.from_storage(
                pa.uuid(), pa.array([ids[i % 3] for i in range(_N)], pa.binary(16))
            ),
            "f": pa.array([bytes([i % 256, 1, 2]) for i in range(_N)], pa.binary(3)),
            "t": pa.array([i * 1000 for i in range(_N)], pa.time64("us")),
        }
    )
    assert dictionary_columns(table) == ["few", "f"]


def test_nulls_and_empty_columns() -> None:
    empty = pa.table(
        {
            "none": pa.array([None] * 10, pa.int64()),
            "st": pa.array([None] * 10, pa.struct([pa.field("x", pa.int64())])),
        }
    )
    assert dictionary_columns(empty) == ["none", "st.x"]  # nothing to encode: the default
    assert dictionary_columns(pa.table({"few": pa.array([None, 1] * 50, pa.int64())})) == ["few"]


def test_a_slice_is_judged_on_its_own_rows() -> None:
    """Output buffers slices of batches: a map's keys and items are those of the slice's rows."""
    values = [0] * 4000 + list(range(10**6, 10**6 + 1000))
    m = pa.array([[("k", v)] for v in values], pa.map_(pa.large_string(), pa.int64()))
    table = pa.table({"m": m})
    assert dictionary_columns(table.slice(4000)) == ["m.key_value.key"]
    assert dictionary_columns(table.slice(0, 4000)) == ["m.key_value.key", "m.key_value.value"]
    # A map array sliced in place (as a struct's or list's child is) holds every row's entries.
    assert [len(values) for _, values in _walk("m", m.slice(4000))] == [1000, 1000]
