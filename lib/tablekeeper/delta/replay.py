"""Log replay, columnar: checkpoint rows and commit actions reconciled with Arrow kernels.

A logical file is keyed by (absolute decoded path, deletion-vector unique id); the newest action
per key wins, and an add that wins is live, a remove that wins is a tombstone. Everything stays in
Arrow tables so a million-file log replays without a Python object per file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tablekeeper.delta.models import CommitInfo, DomainMetadata, Metadata, Protocol, Txn
from tablekeeper.errors import CorruptMetadataError

log = logging.getLogger(__name__)

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


class CommitActions:
    """File actions of JSON commits, gathered column by column."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in FILE_ACTIONS.names}

    def __len__(self) -> int:
        return len(self.columns["path"])

    def add(self, body: Mapping[str, Any], is_add: bool, order: int) -> None:
        cols = self.columns
        cols["path"].append(body["path"])
        cols["is_add"].append(is_add)
        cols["order"].append(order)
        pv = body.get("partitionValues")
        cols["partition_values"].append(None if pv is None else list(pv.items()))
        cols["size"].append(body.get("size"))
        cols["modification_time"].append(body.get("modificationTime"))
        cols["data_change"].append(body.get("dataChange"))
        cols["stats"].append(body.get("stats") if is_add else None)
        tags = body.get("tags")
        cols["tags"].append(None if tags is None or not is_add else list(tags.items()))
        dv = body.get("deletionVector")
        cols["dv"].append(
            None
            if dv is None
            else {
                k: dv.get(k)
                for k in ("storageType", "pathOrInlineDv", "offset", "sizeInBytes", "cardinality")
            }
        )
        cols["base_row_id"].append(body.get("baseRowId"))
        cols["default_row_commit_version"].append(body.get("defaultRowCommitVersion"))
        cols["deletion_timestamp"].append(None if is_add else body.get("deletionTimestamp"))
        cols["clustering_provider"].append(body.get("clusteringProvider") if is_add else None)

    def table(self) -> pa.Table:
        return pa.table({n: pa.array(v, type=FILE_ACTIONS.field(n).type) for n, v in self.columns.items()})


def parse_commit(
    version: int, data: bytes, actions: CommitActions, state: NonFileState, next_order: int
) -> int:
    """Apply one commit file; returns the next free order number."""
    order = next_order
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as err:
            raise CorruptMetadataError(
                f"commit {version} line {lineno} is not valid JSON ({err}): the log is corrupt"
            ) from err
        if not isinstance(obj, dict):
            raise CorruptMetadataError(f"commit {version} line {lineno} is not a JSON object")
        for name, body in obj.items():
            if name in ("add", "remove"):
                if not isinstance(body, dict) or "path" not in body:
                    raise CorruptMetadataError(f"commit {version} line {lineno}: {name} without a path")
                actions.add(body, name == "add", order)
                order += 1
            elif isinstance(body, dict):
                state.apply(name, body, version)
            # cdc and unknown actions are ignored, as the protocol asks of readers
    return order


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


def checkpoint_file_actions(table: pa.Table, first_order: int) -> pa.Table:
    """Add and remove rows of a checkpoint (or sidecar) in the common file-action layout."""
    parts = []
    for column, is_add, mapping in (("add", True, _ADD_FIELDS), ("remove", False, _REMOVE_FIELDS)):
        if column not in table.column_names:
            continue
        col = table.column(column)
        mask = pc.is_valid(col)
        rows = col.filter(mask)
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
        data["order"] = pa.array(range(first_order, first_order + n), pa.int64())
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
    if not parts:
        return FILE_ACTIONS.empty_table()
    return pa.concat_tables(parts, promote_options="permissive")


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


def iter_parquet(source: Any, wanted: Iterable[str], batch_rows: int = 131_072) -> Iterator[pa.Table]:
    """A checkpoint in slices: raw rows are dropped as soon as each slice is converted, which keeps
    a million-file replay's peak memory near the size of its result."""
    try:
        pf = pq.ParquetFile(source)
        names = set(pf.schema_arrow.names)
        columns = [c for c in wanted if c in names]
        for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
            yield pa.Table.from_batches([batch])
    except (pa.ArrowInvalid, OSError) as err:
        raise UnreadableCheckpoint(f"checkpoint is not a readable Parquet file ({err})") from err


def parse_json_checkpoint(data: bytes, state: NonFileState, first_order: int) -> pa.Table:
    actions = CommitActions()
    try:
        parse_commit(-1, data, actions, state, first_order)
    except CorruptMetadataError as err:
        raise UnreadableCheckpoint(err.message) from err
    return actions.table()


# -----------------------------------------------------------------------------------------------
# Reconciliation


def absolute_paths(paths: pa.ChunkedArray | pa.Array, root: str) -> pa.Array:
    """Paths made absolute under ``root`` and percent-decoded exactly once."""
    arr = paths.combine_chunks() if isinstance(paths, pa.ChunkedArray) else paths
    # Absoluteness is decided on the path as written: an encoded ':' must not create a scheme.
    absolute = pc.match_substring_regex(arr, r"^(/|[A-Za-z][A-Za-z0-9+.\-]*:)")
    encoded = pc.match_substring(arr, "%")
    if pc.any(encoded).as_py():
        values = arr.to_pylist()
        flags = encoded.to_pylist()
        arr = pa.array([unquote(v) if f else v for v, f in zip(values, flags, strict=True)], pa.string())
    prefix = root.rstrip("/") + "/"
    joined = pc.binary_join_element_wise(pa.scalar(prefix), arr, "")
    return pc.if_else(absolute, arr, joined)


def dv_unique_ids(dv: pa.ChunkedArray | pa.Array) -> pa.Array:
    arr = dv.combine_chunks() if isinstance(dv, pa.ChunkedArray) else dv
    base = pc.binary_join_element_wise(
        pc.struct_field(arr, "storageType"), pc.struct_field(arr, "pathOrInlineDv"), ""
    )
    offset = pc.cast(pc.struct_field(arr, "offset"), pa.string())
    with_offset = pc.binary_join_element_wise(base, offset, "@")
    return pc.if_else(pc.is_null(offset), base, with_offset)


@dataclass(frozen=True, eq=False)
class Reconciled:
    files: pa.Table  # live adds: FILE_ACTIONS columns + absolute_path, dv_id (+ parsed stats if any)
    tombstones: pa.Table  # winning removes, same layout


def reconcile(action_tables: Sequence[pa.Table], root: str) -> Reconciled:
    tables = [t for t in action_tables if t.num_rows]
    if not tables:
        empty = FILE_ACTIONS.empty_table()
        empty = empty.append_column("absolute_path", pa.array([], pa.string()))
        empty = empty.append_column("dv_id", pa.array([], pa.string()))
        return Reconciled(empty, empty)
    t = pa.concat_tables(tables, promote_options="permissive")
    t = t.append_column("absolute_path", absolute_paths(t.column("path"), root))
    t = t.append_column("dv_id", dv_unique_ids(t.column("dv")))
    latest = (
        t.select(["absolute_path", "dv_id", "order"])
        .group_by(["absolute_path", "dv_id"])
        .aggregate([("order", "max")])
    )
    # Order numbers are unique across the whole segment, so the winners are the rows whose order
    # is some key's maximum (a join cannot carry the map columns).
    won = pc.is_in(t.column("order"), value_set=latest.column("order_max"))
    del latest
    winners = t if pc.all(won).as_py() else t.filter(won)
    del t, won
    is_add = winners.column("is_add")
    return Reconciled(winners.filter(is_add), winners.filter(pc.invert(is_add)))
