"""Log replay, columnar: checkpoint rows and commit actions reconciled with Arrow kernels.

A logical file is keyed by (absolute decoded path, deletion-vector unique id); the newest action
per key wins, and an add that wins is live, a remove that wins is a tombstone. Everything stays in
Arrow tables so a million-file log replays without a Python object per file.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tablekeeper.delta.models import CommitInfo, DomainMetadata, Metadata, Protocol, Txn
from tablekeeper.errors import CorruptMetadataError

log = logging.getLogger(__name__)

T = TypeVar("T")

STR_MAP = pa.map_(pa.string(), pa.string())
DV_TYPE = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)
FILE_ACTIONS = pa.schema(
    [
        ("path", pa.string()),
        ("is_add", pa.bool_()),
        ("order", pa.int64()),
        ("partition_values", STR_MAP),
        ("size", pa.int64()),
        ("modification_time", pa.int64()),
        ("data_change", pa.bool_()),
        ("stats", pa.string()),
        ("tags", STR_MAP),
        ("dv", DV_TYPE),
        ("base_row_id", pa.int64()),
        ("default_row_commit_version", pa.int64()),
        ("deletion_timestamp", pa.int64()),
        ("clustering_provider", pa.string()),
    ]
)
_ADD_FIELDS = {
    "partitionValues": "partition_values",
    "size": "size",
    "modificationTime": "modification_time",
    "dataChange": "data_change",
    "stats": "stats",
    "tags": "tags",
    "deletionVector": "dv",
    "baseRowId": "base_row_id",
    "defaultRowCommitVersion": "default_row_commit_version",
    "clusteringProvider": "clustering_provider",
}
_REMOVE_FIELDS = {
    "partitionValues": "partition_values",
    "size": "size",
    "dataChange": "data_change",
    "deletionVector": "dv",
    "baseRowId": "base_row_id",
    "defaultRowCommitVersion": "default_row_commit_version",
    "deletionTimestamp": "deletion_timestamp",
}
NON_FILE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar")


@dataclass
class NonFileState:
    """Protocol, metadata, txns and domains as replay goes forward: the newest of each wins."""

    protocol: Protocol | None = None
    metadata: Metadata | None = None
    txns: dict[str, Txn] = field(default_factory=dict)
    domains: dict[str, DomainMetadata] = field(default_factory=dict)
    commit_infos: dict[int, CommitInfo] = field(default_factory=dict)
    sidecars: list[str] = field(default_factory=list)
    checkpoint_metadata: dict[str, Any] | None = None

    def apply(self, action: str, body: Mapping[str, Any], version: int | None) -> None:
        try:
            self._apply(action, body, version)
        except (KeyError, TypeError, ValueError) as err:
            where = "checkpoint" if version is None else f"commit {version}"
            raise CorruptMetadataError(f"malformed {action} action in {where} ({err!r})") from err

    def _apply(self, action: str, body: Mapping[str, Any], version: int | None) -> None:
        if action == "protocol":
            self.protocol = Protocol.from_json(body)
        elif action == "metaData":
            self.metadata = Metadata.from_json(body)
        elif action == "txn":
            txn = Txn(str(body["appId"]), int(body["version"]), body.get("lastUpdated"))
            self.txns[txn.app_id] = txn
        elif action == "domainMetadata":
            dm = DomainMetadata(
                str(body["domain"]), str(body.get("configuration", "")), bool(body.get("removed"))
            )
            if dm.removed:
                self.domains.pop(dm.domain, None)
            else:
                self.domains[dm.domain] = dm
        elif action == "commitInfo" and version is not None:
            self.commit_infos[version] = CommitInfo.from_json(version, body)
        elif action == "sidecar":
            self.sidecars.append(str(body["path"]))
        elif action == "checkpointMetadata":
            self.checkpoint_metadata = dict(body)


# Commit actions become Arrow in one pass per kind: pyarrow converts the JSON-shaped dicts to
# structs itself; only the two string maps are laid out here (its own map conversion costs six
# times the rest of the struct).
_ADD_STRUCT = pa.struct(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("deletionVector", DV_TYPE),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
        ("clusteringProvider", pa.string()),
    ]
)
_REMOVE_STRUCT = pa.struct(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("dataChange", pa.bool_()),
        ("deletionVector", DV_TYPE),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
        ("deletionTimestamp", pa.int64()),
    ]
)


class CommitActions:
    """File actions of JSON commits, laid out column-wise a few tens of thousands at a time (the
    parsed dicts of a million actions would hold a gigabyte of Python objects)."""

    FLUSH_EVERY = 50_000

    def __init__(self) -> None:
        self._bodies: dict[bool, list[Mapping[str, Any]]] = {True: [], False: []}
        self._orders: dict[bool, list[int]] = {True: [], False: []}
        self._parts: list[pa.Table] = []
        self._flushed = 0

    def __len__(self) -> int:
        return self._flushed + self.pending()

    def pending(self) -> int:
        return len(self._orders[True]) + len(self._orders[False])

    def add(self, body: Mapping[str, Any], is_add: bool, order: int) -> None:
        self._bodies[is_add].append(body)
        self._orders[is_add].append(order)
        if self.pending() >= self.FLUSH_EVERY:
            self.flush()

    def bodies(self, is_add: bool) -> tuple[list[Mapping[str, Any]], list[int]]:
        """The lists ``add`` appends to, for a parser that appends itself (a call per action
        costs a tenth of a million-action replay); it calls ``flush`` as ``add`` would."""
        return self._bodies[is_add], self._orders[is_add]

    def flush(self) -> None:
        """The pending actions into Arrow: adds, then removes (``order`` says which came first)."""
        try:
            for is_add in (True, False):
                if self._orders[is_add]:
                    self._parts.append(self._part(is_add))
        except (pa.ArrowInvalid, pa.ArrowTypeError, AttributeError, TypeError) as err:
            raise CorruptMetadataError(
                f"a file action in the log has a malformed field ({err}): the log is corrupt"
            ) from err
        self._flushed += self.pending()
        for is_add in (True, False):
            # Cleared in place: a parser holds these lists.
            self._bodies[is_add].clear()
            self._orders[is_add].clear()

    def table(self) -> pa.Table:
        self.flush()
        if not self._parts:
            return FILE_ACTIONS.empty_table()
        return self._parts[0] if len(self._parts) == 1 else pa.concat_tables(self._parts)

    def _part(self, is_add: bool) -> pa.Table:
        bodies = self._bodies[is_add]
        n = len(bodies)
        struct = pa.array(bodies, type=_ADD_STRUCT if is_add else _REMOVE_STRUCT)

        def field_or_null(name: str, target: pa.DataType) -> pa.Array:
            index = struct.type.get_field_index(name)
            return struct.field(index) if index >= 0 else pa.nulls(n, target)

        columns = {
            "path": struct.field("path"),
            "is_add": pa.repeat(is_add, n),
            "order": pa.array(self._orders[is_add], pa.int64()),
            "partition_values": _string_map([b.get("partitionValues") for b in bodies]),
            "size": struct.field("size"),
            "modification_time": field_or_null("modificationTime", pa.int64()),
            "data_change": struct.field("dataChange"),
            "stats": field_or_null("stats", pa.string()),
            "tags": _string_map([b.get("tags") for b in bodies]) if is_add else pa.nulls(n, STR_MAP),
            "dv": struct.field("deletionVector"),
            "base_row_id": struct.field("baseRowId"),
            "default_row_commit_version": struct.field("defaultRowCommitVersion"),
            "deletion_timestamp": field_or_null("deletionTimestamp", pa.int64()),
            "clustering_provider": field_or_null("clusteringProvider", pa.string()),
        }
        return pa.table(columns, schema=FILE_ACTIONS)


def _string_map(values: Sequence[Mapping[str, Any] | None]) -> pa.Array:
    """JSON objects of strings (partition values, tags) as one Arrow map array; None is null."""
    if all(v is None for v in values):
        return pa.nulls(len(values), STR_MAP)
    offsets = [0]
    keys: list[Any] = []
    items: list[Any] = []
    mask = []
    for value in values:
        if value is None:
            mask.append(True)
        else:
            items.extend(value.values())  # not a JSON object: AttributeError, a corrupt log
            keys.extend(value)
            mask.append(False)
        offsets.append(len(keys))
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.array(keys, pa.string()),
        pa.array(items, pa.string()),
        type=STR_MAP,
        mask=pa.array(mask, pa.bool_()),
    )


def parse_commit(
    version: int, data: bytes, actions: CommitActions, state: NonFileState, next_order: int
) -> int:
    """Apply one commit file; returns the next free order number."""
    lines = data.splitlines()
    try:
        # One call for the whole file: a call per line costs more than the parsing. Blank lines
        # (or a corrupt one) take the line-by-line path, which names the line.
        objects = orjson.loads(b"[" + b",".join(lines) + b"]")
    except orjson.JSONDecodeError:
        objects = [_parse_line(version, lineno, line) for lineno, line in enumerate(lines, start=1)]
    order = next_order
    add_bodies, add_orders = actions.bodies(True)
    remove_bodies, remove_orders = actions.bodies(False)
    for lineno, obj in enumerate(objects, start=1):
        if obj is None:
            continue  # a blank line
        if type(obj) is not dict:
            raise CorruptMetadataError(f"commit {version} line {lineno} is not a JSON object")
        for name, body in obj.items():
            if name in {"add", "remove"}:
                if type(body) is not dict or "path" not in body:
                    raise CorruptMetadataError(f"commit {version} line {lineno}: {name} without a path")
                if name == "add":
                    add_bodies.append(body)
                    add_orders.append(order)
                else:
                    remove_bodies.append(body)
                    remove_orders.append(order)
                order += 1
                if len(add_orders) + len(remove_orders) >= actions.FLUSH_EVERY:
                    actions.flush()
            elif isinstance(body, dict):
                state.apply(name, body, version)
            # cdc and unknown actions are ignored, as the protocol asks of readers
    return order


def _parse_line(version: int, lineno: int, line: bytes) -> Any:
    if not line.strip():
        return None
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as err:
        raise CorruptMetadataError(
            f"commit {version} line {lineno} is not valid JSON ({err}): the log is corrupt"
        ) from err


def _struct_child(column: pa.ChunkedArray, name: str, target: pa.DataType, length: int) -> pa.ChunkedArray:
    if pa.types.is_struct(column.type) and column.type.get_field_index(name) >= 0:
        child = pc.struct_field(column, name)
        if child.type != target:
            child = _coerce(child, target)
        return child
    return pa.chunked_array([pa.nulls(length, target)])


def _coerce(array: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    if pa.types.is_struct(target):
        children = [
            _struct_child(array, f.name, f.type, len(array))
            for f in target  # missing DV fields become null
        ]
        chunks = [
            pa.StructArray.from_arrays(
                [c.combine_chunks() for c in children],
                fields=list(target),
                mask=pc.is_null(array.combine_chunks()),
            )
        ]
        return pa.chunked_array(chunks, type=target)
    return array.cast(target)


def checkpoint_file_actions(table: pa.Table, first_order: int) -> list[pa.Table]:
    """Add rows, then remove rows, of a checkpoint (or sidecar) slice in the common file-action
    layout: one table per kind, so the live files and tombstones are separated without a copy."""
    parts = []
    for column, is_add, mapping in (("add", True, _ADD_FIELDS), ("remove", False, _REMOVE_FIELDS)):
        if column not in table.column_names:
            continue
        col = table.column(column)
        rows = col if col.null_count == 0 else col.filter(pc.is_valid(col))
        n = len(rows)
        if n == 0:
            continue
        data: dict[str, Any] = {
            "path": _struct_child(rows, "path", pa.string(), n),
            "is_add": pa.repeat(is_add, n),
        }
        for name in FILE_ACTIONS.names:
            if name in ("path", "is_add", "order"):
                continue
            source = next((k for k, v in mapping.items() if v == name), None)
            target = FILE_ACTIONS.field(name).type
            data[name] = _struct_child(rows, source, target, n) if source is not None else pa.nulls(n, target)
        data["order"] = pa.array(np.arange(first_order, first_order + n, dtype=np.int64))
        first_order += n
        extra = {}
        if is_add:
            for parsed in ("stats_parsed", "partitionValues_parsed"):
                if pa.types.is_struct(rows.type) and rows.type.get_field_index(parsed) >= 0:
                    extra[parsed] = pc.struct_field(rows, parsed)
        part = pa.table({n_: data[n_] for n_ in FILE_ACTIONS.names})
        for k, v in extra.items():
            part = part.append_column(k, v)
        parts.append(part)
    return parts


def checkpoint_non_file_actions(table: pa.Table, state: NonFileState) -> None:
    for column in NON_FILE_COLUMNS:
        if column not in table.column_names:
            continue
        col = table.column(column)
        for row in col.filter(pc.is_valid(col)).to_pylist():
            if row is not None:
                # Parquet maps come back as lists of pairs; the models expect JSON-shaped dicts.
                state.apply(column, _jsonish(row), None)


def _jsonish(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonish(v) for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
        return {k: _jsonish(v) for k, v in value}
    if isinstance(value, list):
        return [_jsonish(v) for v in value]
    return value


class UnreadableCheckpoint(CorruptMetadataError):
    """A checkpoint that cannot be read: readers rebuild the version from an older one instead."""


def iter_parquet(
    source: Any, wanted: Iterable[str], batch_rows: int = 131_072, ahead: int = 0
) -> Iterator[pa.Table]:
    """A checkpoint in slices: raw rows are dropped as soon as each slice is converted, which keeps
    a million-file replay's peak memory near the size of its result. ``ahead``: slices decoded on
    a helper thread while the caller works on the current one."""
    try:
        pf = pq.ParquetFile(source)
        names = set(pf.schema_arrow.names)
        columns = [c for c in wanted if c in names]
        batches = pf.iter_batches(batch_size=batch_rows, columns=columns)
        for batch in prefetched(batches, ahead) if ahead else batches:
            yield pa.Table.from_batches([batch])
    except (pa.ArrowInvalid, OSError) as err:
        raise UnreadableCheckpoint(f"checkpoint is not a readable Parquet file ({err})") from err


_DONE = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def prefetched(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """``items`` produced on a helper thread, up to ``depth`` ahead of the consumer: Parquet
    decoding (which releases the GIL) overlaps the caller's work on the previous slice. The
    helper is stopped and joined before this generator ends, however it ends."""
    slots: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                slots.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as err:  # handed to the consumer, raised there
            put(_Failed(err))

    helper = threading.Thread(target=produce, name="tablekeeper-prefetch", daemon=True)
    helper.start()
    try:
        while True:
            item = slots.get()
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        helper.join()


def parse_json_checkpoint(data: bytes, state: NonFileState, first_order: int) -> pa.Table:
    actions = CommitActions()
    try:
        parse_commit(-1, data, actions, state, first_order)
    except CorruptMetadataError as err:
        raise UnreadableCheckpoint(err.message) from err
    return actions.table()
