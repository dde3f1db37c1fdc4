"""Reconciliation of Delta file actions: the newest action per logical file wins.

A logical file is keyed by (absolute decoded path, deletion-vector unique id). Older actions known
to name each file once (a checkpoint's, a snapshot's) are only checked against the keys newer
actions name; the newer ones are grouped. Everything stays in Arrow.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tablekeeper.delta.replay import FILE_ACTIONS

log = logging.getLogger(__name__)


def absolute_paths(paths: pa.ChunkedArray | pa.Array, root: str) -> pa.Array:
    """Paths made absolute under ``root`` and percent-decoded exactly once."""
    arr = _flat(paths)
    if arr.type != pa.string():
        arr = arr.cast(pa.string())
    # Absoluteness is decided on the path as written: an encoded ':' must not create a scheme. Only
    # a path with a ':' can have one, so a relative log skips the regular expression; both byte
    # checks look at the whole string buffer at once before any per-path kernel runs.
    if _holds(arr, b":"):
        absolute = pc.match_substring_regex(arr, r"^(/|[A-Za-z][A-Za-z0-9+.\-]*:)")
    else:
        absolute = pc.starts_with(arr, "/")
    if _holds(arr, b"%"):
        encoded = pc.match_substring(arr, "%")
        decoded = [unquote(v) for v in arr.filter(encoded).to_pylist()]
        arr = pc.replace_with_mask(arr, encoded, pa.array(decoded, pa.string()))
    # Slicing nothing out of the front and putting the prefix there is one pass over the bytes; an
    # element-wise join with a scalar is twenty times slower.
    joined = pc.binary_replace_slice(arr, 0, 0, root.rstrip("/") + "/")
    if not pc.any(absolute).as_py():
        return joined
    return pc.if_else(absolute, arr, joined)


def _holds(strings: pa.Array, needle: bytes) -> bool:
    """Whether any value of a string array contains the byte ``needle``."""
    if not len(strings):
        return False
    offsets = np.frombuffer(
        strings.buffers()[1], dtype=np.int32, count=len(strings) + 1, offset=strings.offset * 4
    )
    data = strings.buffers()[2]
    if data is None:
        return False
    body = np.frombuffer(data, dtype=np.uint8)[offsets[0] : offsets[-1]]
    return bool((body == needle[0]).any())


def dv_unique_ids(dv: pa.ChunkedArray | pa.Array) -> pa.Array:
    arr = dv.combine_chunks() if isinstance(dv, pa.ChunkedArray) else dv
    if arr.null_count == len(arr):
        return pa.nulls(len(arr), pa.string())
    base = pc.binary_join_element_wise(
        pc.struct_field(arr, "storageType"), pc.struct_field(arr, "pathOrInlineDv"), ""
    )
    offset = pc.cast(pc.struct_field(arr, "offset"), pa.string())
    with_offset = pc.binary_join_element_wise(base, offset, "@")
    return pc.if_else(pc.is_null(offset), base, with_offset)


def keyed(actions: pa.Table, root: str) -> pa.Table:
    """File actions with their identity columns: ``absolute_path`` and ``dv_id``."""
    if "absolute_path" not in actions.column_names:
        actions = actions.append_column("absolute_path", absolute_paths(actions.column("path"), root))
    if "dv_id" not in actions.column_names:
        actions = actions.append_column("dv_id", dv_unique_ids(actions.column("dv")))
    return actions


def _any_valid(column: pa.Array | pa.ChunkedArray) -> bool:
    return bool(column.null_count != len(column))


def _flat(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def _full_keys(table: pa.Table) -> pa.Array:
    """One string per logical file: its path, then its DV id (or nothing) after a NUL no path
    holds."""
    dv_id = pc.fill_null(table.column("dv_id"), "")
    return _flat(pc.binary_join_element_wise(table.column("absolute_path"), dv_id, "\x00"))


@dataclass(frozen=True, eq=False)
class Reconciled:
    files: pa.Table  # live adds: FILE_ACTIONS columns + absolute_path, dv_id (+ parsed stats if any)
    tombstones: pa.Table  # winning removes, same layout


class Superseded:
    """The logical files newer actions name: an older row of one of them lost to a newer action.

    Paths are compared first (most older rows miss); only rows whose path a newer action names
    are compared by their whole key, and only when a deletion vector is involved."""

    def __init__(self, newer: pa.Table) -> None:
        self._newer = newer
        self._paths = pc.unique(newer.column("absolute_path"))
        self._dvs = _any_valid(newer.column("dv_id"))
        self._keys: pa.Array | None = None

    def survivors(self, older: pa.Table) -> pa.Table:
        """``older`` (keyed) without the rows newer actions supersede."""
        if not self._newer.num_rows or not older.num_rows:
            return older
        path_hit = _flat(pc.is_in(older.column("absolute_path"), value_set=self._paths))
        if not pc.any(path_hit).as_py():
            return older
        candidates = older.filter(path_hit)
        if not self._dvs and not _any_valid(candidates.column("dv_id")):
            return older.filter(pc.invert(path_hit))  # no DV on either side: the path is the key
        if self._keys is None:
            self._keys = _full_keys(self._newer)
        key_hit = _flat(pc.is_in(_full_keys(candidates), value_set=self._keys))
        # Candidates keep the order of ``path_hit``'s true values, so their verdicts slot back in.
        return older.filter(pc.invert(pc.replace_with_mask(path_hit, path_hit, key_hit)))


def reconcile(
    action_tables: Sequence[pa.Table], root: str, base: Iterable[pa.Table] = (), *, base_checked: bool = False
) -> Reconciled:
    """The winning action per logical file.

    ``base`` holds actions older than all of ``action_tables`` that name each file once (a
    checkpoint's, a snapshot's live files), as chunks consumed one at a time: each is only
    checked against the files the newer actions name and shrunk at once, never grouped with
    them, which keeps a large checkpoint plus a few commits cheap in time and memory. A base that
    names a file twice after all (a writer broke the promise) is grouped like the rest;
    ``base_checked`` skips that check for a base this code reconciled itself."""
    tables = [keyed(t, root) for t in action_tables if t.num_rows]
    newer = pa.concat_tables(tables, promote_options="permissive") if tables else None
    superseded = Superseded(newer) if newer is not None else None
    kept = []
    for chunk in base:
        if chunk.num_rows:
            with_keys = keyed(chunk, root)
            kept.append(with_keys if superseded is None else superseded.survivors(with_keys))
    if kept and not base_checked:
        # The allocator keeps the decoded slices' pages for reuse; the check needs new ones.
        pa.default_memory_pool().release_unused()
        if not unique_keys(pa.concat_tables(kept, promote_options="permissive")):
            log.warning("the base state names a file more than once: the newest of its actions wins")
            newer = pa.concat_tables(
                [*kept, *([] if newer is None else [newer])], promote_options="permissive"
            )
            kept = []
    winners = [*kept, *([] if newer is None else [_newest_per_key(newer)])]
    files: list[pa.Table] = []
    tombstones: list[pa.Table] = []
    for part in winners:
        adds = pc.sum(part.column("is_add")).as_py() or 0
        if adds == part.num_rows:
            files.append(part)  # a checkpoint slice holds one kind: no copy
        elif adds == 0:
            tombstones.append(part)
        else:
            files.append(part.filter(part.column("is_add")))
            tombstones.append(part.filter(pc.invert(part.column("is_add"))))
    if not files and not tombstones:
        empty = keyed(FILE_ACTIONS.empty_table(), root)
        return Reconciled(empty, empty)
    # An empty side keeps the other's columns, as a filter of one table would have.
    return Reconciled(
        concat_tables(files) if files else concat_tables(tombstones).slice(0, 0),
        concat_tables(tombstones) if tombstones else concat_tables(files).slice(0, 0),
    )


def concat_tables(tables: list[pa.Table]) -> pa.Table:
    """One table of ``tables`` (at least one), without a copy when there is one."""
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")


def _newest_per_key(t: pa.Table) -> pa.Table:
    latest = (
        t.select(["absolute_path", "dv_id", "order"])
        .group_by(["absolute_path", "dv_id"])
        .aggregate([("order", "max")])
    )
    if latest.num_rows == t.num_rows:
        return t
    # Order numbers are unique across the whole segment, so the winners are the rows whose order
    # is some key's maximum (a join cannot carry the map columns).
    return t.filter(pc.is_in(t.column("order"), value_set=latest.column("order_max")))


def unique_keys(table: pa.Table) -> bool:
    """Whether each logical file appears once in ``table`` (keyed), as a checkpoint promises."""
    n = table.num_rows
    if n < 2:
        return True
    # Relative paths without escapes map one to one onto their absolute form, so the shorter
    # spelling is checked (a fifth less to hash and hold). unique() is three times faster than
    # count_distinct() on a million paths.
    raw = table.column("path")
    plain = not any(_holds(c, b":") or _holds(c, b"%") for c in raw.chunks)
    paths = raw if plain and not pc.any(pc.starts_with(raw, "/")).as_py() else table.column("absolute_path")
    # The system allocator hands the set's pages back as soon as it is dropped.
    pool = pa.system_memory_pool()
    if len(pc.unique(paths, memory_pool=pool)) == n:
        return True
    return bool(len(pc.unique(_full_keys(table), memory_pool=pool)) == n)


def key_digests(table: pa.Table) -> bytes:
    """Eight bytes per row of ``table`` (keyed) that equal keys share: processes that each hold a
    share of a checkpoint send these, not their keys, to check the checkpoint names each file once.
    A BLAKE2 digest is the same in every process, unlike Python's salted ``hash``."""
    if not table.num_rows:
        return b""
    return b"".join(blake2b(key.encode(), digest_size=8).digest() for key in _full_keys(table).to_pylist())


def unique_digests(digests: Iterable[bytes]) -> bool:
    """Whether no two rows share a digest (``key_digests``). Two keys may share one by chance; the
    caller then takes the path that compares keys, so a collision costs time, never a file."""
    # Sorted in place, in a buffer of its own: np.unique would hold several copies (3M keys: 200 MB).
    values = np.frombuffer(bytearray().join(digests), dtype=np.uint64)
    values.sort()
    return not bool((values[1:] == values[:-1]).any())
