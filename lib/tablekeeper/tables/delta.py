"""Loading Delta snapshots from storage: list ``_delta_log``, pick the segment, replay it.

The pure replay lives in ``tablekeeper.delta``; this module only fetches bytes through FileIO.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tablekeeper.cycles import no_cycle_collection
from tablekeeper.delta.deletion_vectors import (
    delta_dv_relative_path,
    read_delta_dv,
    read_delta_inline_dv,
    stored_dv_offset,
)
from tablekeeper.delta.models import AddFile, DeletionVector
from tablekeeper.delta.reconcile import absolute_paths, keyed, reconcile
from tablekeeper.delta.replay import (
    NON_FILE_COLUMNS,
    CommitActions,
    NonFileState,
    UnreadableCheckpoint,
    checkpoint_file_actions,
    checkpoint_non_file_actions,
    iter_parquet,
    parse_commit,
    parse_json_checkpoint,
)
from tablekeeper.delta.schema import ColumnMapping, DeltaStruct
from tablekeeper.delta.segment import (
    Checkpoint,
    LastCheckpointHint,
    LogEntry,
    LogSegment,
    build_segment,
    commit_name,
    commit_timestamps,
    oldest_reconstructable,
    parse_last_checkpoint,
    parse_listing,
    sidecar_location,
)
from tablekeeper.delta.snapshot import DeltaSnapshot, snapshot_from_replay
from tablekeeper.delta.to_iceberg import MappedSchema, MissingRecordCount, data_file
from tablekeeper.errors import (
    ConfigError,
    CorruptMetadataError,
    DataFileGone,
    FileNotFound,
    NotATableError,
    StorageError,
    TablekeeperError,
    UnsupportedFeatureError,
)
from tablekeeper.iceberg.content import DataFile
from tablekeeper.iceberg.roaring import RoaringBitmap64
from tablekeeper.io import FileIO

log = logging.getLogger(__name__)

LOG_DIR = "_delta_log"
# A replay made elsewhere (on Spark): the version ``segment`` rebuilds, or None to replay it here.
Replay = Callable[[str, LogSegment], "DeltaSnapshot | None"]
# Checkpoint rows sort before every commit action.
CHECKPOINT_ORDER_BASE = -(10**15)


def normalise_root(location: str) -> str:
    """Without a scheme a location is a local path; relative ones are taken from the working dir."""
    if "://" not in location and not location.startswith("file:") and not location.startswith("/"):
        location = str(Path(location).absolute())
    return location.rstrip("/")


def list_log(io: FileIO, root: str) -> list[LogEntry]:
    log_dir = f"{root}/{LOG_DIR}"
    try:
        entries = [
            LogEntry(info.location.rsplit("/", 1)[-1], info.size, info.mtime_ms)
            for info in io.list(log_dir, recursive=False)
        ]
    except (FileNotFound, StorageError):
        entries = []
    if not entries:
        raise NotATableError(f"{root} is not a Delta table (no {LOG_DIR} with commits): check the path")
    return entries


def _checkpoint_state(io: FileIO, root: str, checkpoint: Checkpoint, state: NonFileState) -> list[pa.Table]:
    """Protocol, metadata, transactions, domains and sidecars of every checkpoint part; returns
    the file actions of JSON parts, which come with them (Parquet parts' are read later)."""
    log_dir = f"{root}/{LOG_DIR}"
    json_actions: list[pa.Table] = []
    order = CHECKPOINT_ORDER_BASE
    for part in checkpoint.files:
        location = f"{log_dir}/{part.name}"
        if part.name.endswith(".json"):
            actions = parse_json_checkpoint(io.read(location), state, order)
            order += actions.num_rows
            json_actions.append(actions)
        else:
            read_checkpoint_non_file_actions(io, location, state)
    return json_actions


def _checkpoint_files(
    io: FileIO, root: str, checkpoint: Checkpoint, state: NonFileState, json_actions: Sequence[pa.Table]
) -> Iterator[pa.Table]:
    """The checkpoint's file actions a slice at a time: JSON parts', Parquet parts', then the
    sidecars' (V2 checkpoints, UUID-named or V2 content under a classic name)."""
    log_dir = f"{root}/{LOG_DIR}"
    order = CHECKPOINT_ORDER_BASE + sum(t.num_rows for t in json_actions)
    yield from json_actions
    locations = [f"{log_dir}/{part.name}" for part in checkpoint.files if not part.name.endswith(".json")]
    sidecars = [sidecar_location(log_dir, sidecar) for sidecar in state.sidecars]
    for location in (*locations, *sidecars):
        try:
            with io.open_input(location) as stream:
                for chunk in iter_parquet(stream, ("add", "remove"), ahead=1):
                    for part in checkpoint_file_actions(chunk, order):
                        order += part.num_rows
                        yield part
        except FileNotFound:
            if location not in sidecars:
                raise
            name = location.rsplit("/", 1)[-1]
            raise CorruptMetadataError(
                f"checkpoint {checkpoint.version} names sidecar {name}, which is missing"
            ) from None


def read_checkpoint_non_file_actions(io: FileIO, location: str, state: NonFileState) -> None:
    """Protocol, metadata, transactions, domains and sidecars of one Parquet checkpoint part, read
    without its file-action columns (for replays that keep the files out of this process)."""
    with io.open_input(location) as stream:
        for chunk in iter_parquet(stream, NON_FILE_COLUMNS):
            checkpoint_non_file_actions(chunk, state)


def _commit_info_only(io: FileIO, root: str, version: int, state: NonFileState) -> None:
    import orjson

    try:
        data = io.read(f"{root}/{LOG_DIR}/{version:020d}.json")
    except FileNotFound:
        return
    for line in data.splitlines():
        if line.startswith(b'{"commitInfo"'):
            state.apply("commitInfo", orjson.loads(line)["commitInfo"], version)
            return


def replay_segment(io: FileIO, root: str, segment: LogSegment) -> DeltaSnapshot:
    """The segment's state. The commits are parsed first (they are few next to a checkpoint), so
    each checkpoint slice loses the files they supersede as soon as it is read."""
    with no_cycle_collection():
        return _replay_segment(io, root, segment)


def _replay_segment(io: FileIO, root: str, segment: LogSegment) -> DeltaSnapshot:
    state, json_actions, actions = _read_log(io, root, segment)
    checkpoint = segment.checkpoint
    base = _checkpoint_files(io, root, checkpoint, state, json_actions) if checkpoint is not None else ()
    return snapshot_from_replay(root, segment, state, reconcile([actions.table()], root, base), "pure")


def _read_log(
    io: FileIO, root: str, segment: LogSegment
) -> tuple[NonFileState, list[pa.Table], CommitActions]:
    """The segment read but for its Parquet checkpoint's file actions: the non-file state, the
    file actions of JSON checkpoint parts, and the commits' file actions, parsed in order."""
    state = NonFileState()
    checkpoint = segment.checkpoint
    json_actions = _checkpoint_state(io, root, checkpoint, state) if checkpoint is not None else []
    if checkpoint is not None and checkpoint.version == segment.version:
        # Checkpoints drop commitInfo; the version's own commit still has it (and its ICT).
        _commit_info_only(io, root, segment.version, state)
    actions = CommitActions()
    order = 0
    for entry in segment.commits:
        version = int(entry.name.split(".", 1)[0])
        order = parse_commit(version, io.read(f"{root}/{LOG_DIR}/{entry.name}"), actions, state, order)
    if state.protocol is not None:
        state.protocol.check_readable()
    return state, json_actions, actions


@dataclass(frozen=True, eq=False)
class CheckpointTail:
    """A segment read but for its checkpoint's file actions, which readers elsewhere take a row
    group at a time: the non-file state, the commits' file actions after the checkpoint (keyed),
    and the Parquet files holding the checkpoint's file actions (its parts, then its sidecars)."""

    state: NonFileState
    newer: pa.Table
    parquet: tuple[str, ...]


def read_checkpoint_tail(
    io: FileIO, root: str, segment: LogSegment, max_commit_bytes: int
) -> CheckpointTail | None:
    """The segment as a ``CheckpointTail``, or None when it has no Parquet checkpoint or the
    commits after it hold more than ``max_commit_bytes`` (their actions are kept here)."""
    checkpoint = segment.checkpoint
    if checkpoint is None or any(part.name.endswith(".json") for part in checkpoint.files):
        return None
    if sum(entry.size for entry in segment.commits) > max_commit_bytes:
        return None
    with no_cycle_collection():
        state, _, actions = _read_log(io, root, segment)
    newer = keyed(actions.table(), root)
    log_dir = f"{root}/{LOG_DIR}"
    parquet = (
        *(f"{log_dir}/{part.name}" for part in checkpoint.files),
        *(sidecar_location(log_dir, sidecar) for sidecar in state.sidecars),
    )
    return CheckpointTail(state, newer, parquet)


def _hint(io: FileIO, root: str) -> LastCheckpointHint | None:
    try:
        return parse_last_checkpoint(io.read(f"{root}/{LOG_DIR}/_last_checkpoint"))
    except FileNotFound:
        return None


def commit_time(io: FileIO, snapshot: DeltaSnapshot, entries: Sequence[LogEntry]) -> int:
    """The snapshot's commit time (in-commit timestamp where enabled), as time travel sees it."""
    if snapshot.metadata.configuration.get("delta.enableInCommitTimestamps") == "true":
        return commit_times(io, snapshot.root, entries, snapshot).get(snapshot.version, 0)
    return commit_timestamps(entries).get(snapshot.version, 0)


def _checkpoint_readable(io: FileIO, root: str, checkpoint: Checkpoint) -> str | None:
    """Why a checkpoint cannot be read (its Parquet footers), or None when it can."""
    for part in checkpoint.files:
        if not part.name.endswith(".parquet"):
            continue
        location = f"{root}/{LOG_DIR}/{part.name}"
        try:
            with io.open_input(location) as stream:
                pq.read_metadata(stream)
        except (pa.ArrowInvalid, OSError, TablekeeperError) as err:
            reason = err.message if isinstance(err, TablekeeperError) else str(err).splitlines()[0]
            return f"{part.name}: {reason[:200]}"
    return None


def readable_segment(
    io: FileIO,
    root: str,
    entries: Sequence[LogEntry],
    *,
    version: int | None = None,
    hint: LastCheckpointHint | None = None,
    skip: frozenset[Checkpoint] = frozenset(),
    notes: tuple[str, ...] = (),
) -> tuple[LogSegment, tuple[str, ...]]:
    """The segment that rebuilds ``version``, falling back past checkpoints that cannot be read
    to an older one plus the commits after it, as Delta's own readers do; the notes say so."""
    while True:
        try:
            segment = build_segment(entries, version=version, hint=hint, table=root, skip=skip)
        except CorruptMetadataError as err:
            if not skip:
                raise
            raise CorruptMetadataError(
                f"{notes[-1]}, and no older state can be rebuilt ({err.message}): repair or rewrite the "
                "checkpoint (delta-spark: run a query on the table, then CHECKPOINT)"
            ) from err
        checkpoint = segment.checkpoint
        problem = _checkpoint_readable(io, root, checkpoint) if checkpoint is not None else None
        if checkpoint is None or problem is None:
            return segment, notes
        skip, notes = _skipping(checkpoint, problem, skip, notes)


def _skipping(
    checkpoint: Checkpoint, problem: str, skip: frozenset[Checkpoint], notes: tuple[str, ...]
) -> tuple[frozenset[Checkpoint], tuple[str, ...]]:
    log.warning(
        "checkpoint %d cannot be read (%s): using an older state and more commits",
        checkpoint.version,
        problem,
    )
    note = (
        f"checkpoint {checkpoint.version} cannot be read ({problem}); rebuilt from an older state plus "
        "commits"
    )
    return skip | {checkpoint}, (*notes, note)


def load_snapshot(
    location: str,
    *,
    version: int | None = None,
    timestamp_ms: int | None = None,
    io: FileIO | None = None,
    replay: Replay | None = None,
) -> DeltaSnapshot:
    """The table at ``version``, at the newest version committed at or before ``timestamp_ms``,
    or the latest; replayed in this process unless ``replay`` takes the segment (the caller's
    choice of engine, e.g. ``jobs.common.engines.delta_replay``)."""
    if version is not None and timestamp_ms is not None:
        raise ConfigError("give a version or a timestamp to time travel to, not both")
    root = normalise_root(location)
    io = io or FileIO.for_location(root)
    entries = list_log(io, root)
    hint = _hint(io, root)
    if timestamp_ms is not None:
        version = version_at(io, root, entries, timestamp_ms)
    segment, notes = readable_segment(io, root, entries, version=version, hint=hint)
    snapshot = replay(root, segment) if replay is not None else None
    if snapshot is None:
        skip: frozenset[Checkpoint] = frozenset()
        while True:
            try:
                snapshot = replay_segment(io, root, segment)
                break
            except UnreadableCheckpoint as err:  # a footer that reads, pages that do not
                assert segment.checkpoint is not None
                skip, notes = _skipping(segment.checkpoint, err.message, skip | {segment.checkpoint}, notes)
                segment, notes = readable_segment(
                    io, root, entries, version=version, hint=hint, skip=skip, notes=notes
                )
    return replace(snapshot, timestamp_ms=commit_time(io, snapshot, entries), notes=notes)


def segment_bytes(segment: LogSegment) -> int:
    """Bytes of checkpoint and commits a replay of ``segment`` reads."""
    files = list(segment.commits) + (list(segment.checkpoint.files) if segment.checkpoint else [])
    return sum(f.size for f in files)


def commit_times(io: FileIO, root: str, entries: Sequence[LogEntry], latest: DeltaSnapshot) -> dict[int, int]:
    """Commit version -> commit time: in-commit timestamps where enabled, else file mtimes; made
    strictly increasing either way (a value edited to go backwards is lifted to previous + 1)."""
    import orjson

    stamps = commit_timestamps(entries)
    config = latest.metadata.configuration
    if config.get("delta.enableInCommitTimestamps") == "true":
        start = int(config.get("delta.inCommitTimestampEnablementVersion", "0"))
        for v in sorted(stamps):
            if v >= start:
                first = io.read(f"{root}/{LOG_DIR}/{v:020d}.json").split(b"\n", 1)[0]
                info = orjson.loads(first).get("commitInfo") or {}
                if info.get("inCommitTimestamp") is not None:
                    stamps[v] = int(info["inCommitTimestamp"])
    previous: int | None = None
    for v in sorted(stamps):
        if previous is not None and stamps[v] <= previous:
            stamps[v] = previous + 1
        previous = stamps[v]
    return stamps


def version_at(io: FileIO, root: str, entries: Sequence[LogEntry], timestamp_ms: int) -> int:
    """Newest version whose commit time is <= the given time."""
    stamps = commit_times(io, root, entries, load_snapshot(root, io=io))
    eligible = [v for v, ts in stamps.items() if ts <= timestamp_ms]
    if not eligible:
        earliest = min(stamps.values()) if stamps else None
        raise ConfigError(
            f"{root} has no version committed at or before {timestamp_ms} ms (earliest commit: {earliest} ms)"
        )
    return max(eligible)


def dv_location(root: str, dv: DeletionVector) -> str | None:
    """Where an on-disk DV lives (None for inline DVs): 'u' under the table, 'p' absolute."""
    if dv.storage_type == "u":
        return f"{root}/{delta_dv_relative_path(dv.path_or_inline_dv)}"
    if dv.storage_type == "p":
        from urllib.parse import unquote

        return unquote(dv.path_or_inline_dv)
    if dv.storage_type == "i":
        return None
    raise UnsupportedFeatureError(f"deletion vector storage type {dv.storage_type!r} is not supported")


def read_deletion_vector(io: FileIO, root: str, dv: DeletionVector) -> tuple[RoaringBitmap64, bytes]:
    """The deleted row positions and the byte-identical Iceberg ``deletion-vector-v1`` blob."""
    location = dv_location(root, dv)
    if location is None:
        return read_delta_inline_dv(dv.path_or_inline_dv, dv.size_in_bytes, dv.cardinality)
    offset = stored_dv_offset(dv.offset)
    try:
        data = io.read(location)
    except FileNotFound:
        raise CorruptMetadataError(f"deletion vector file {location} is missing") from None
    return read_delta_dv(data, offset, dv.size_in_bytes, dv.cardinality)


def _read_commit(io: FileIO, root: str, version: int) -> bytes:
    """A commit the listing had: gone now means the log was cleaned up under the run."""
    try:
        return io.read(f"{root}/{LOG_DIR}/{commit_name(version)}")
    except FileNotFound:
        raise CorruptMetadataError(
            f"{root}: commit {version} disappeared while converting (log cleanup?): re-run"
        ) from None


def advance(io: FileIO, snapshot: DeltaSnapshot, timestamp_ms: int) -> DeltaSnapshot:
    """The snapshot one version later, from this one's state and the next commit alone.

    Tombstones of the result are only the next commit's winning removes.
    """
    version = snapshot.version + 1
    data = _read_commit(io, snapshot.root, version)
    state = NonFileState(
        protocol=snapshot.protocol,
        metadata=snapshot.metadata,
        txns=dict(snapshot.txns),
        domains=dict(snapshot.domains),
    )
    files = snapshot.files
    orders = files.column("order")
    first_order = (int(pc.max(orders).as_py()) + 1) if files.num_rows else 0
    actions = CommitActions()
    with no_cycle_collection():
        parse_commit(version, data, actions, state, first_order)
    assert state.protocol is not None and state.metadata is not None
    state.protocol.check_readable()
    reconciled = reconcile([actions.table()], snapshot.root, base=[files], base_checked=True)
    return replace(
        snapshot,
        version=version,
        protocol=state.protocol,
        metadata=state.metadata,
        files=reconciled.files,
        tombstones=reconciled.tombstones,
        timestamp_ms=timestamp_ms,
        txns=dict(state.txns),
        domains=dict(state.domains),
        commit_info=state.commit_infos.get(version),
        checkpoint_version=None,
    )


def touched_paths(io: FileIO, root: str, first: int, last: int) -> list[str]:
    """The absolute paths every add and remove of commits ``first``..``last`` names: all that
    can differ between the states before ``first`` and at ``last``."""
    actions = CommitActions()
    state = NonFileState()
    order = 0
    with no_cycle_collection():
        for version in range(first, last + 1):
            order = parse_commit(version, _read_commit(io, root, version), actions, state, order)
    if not len(actions):
        return []
    return sorted(set(absolute_paths(actions.table().column("path"), root).to_pylist()))


def history(
    location: str,
    *,
    start: int | None = None,
    end: int | None = None,
    io: FileIO | None = None,
    replay: Replay | None = None,
) -> Iterator[DeltaSnapshot]:
    """Every version from ``start`` (default: the oldest that can be reconstructed) to ``end``
    (default: the latest): one full replay, then one commit at a time."""
    root = normalise_root(location)
    io = io or FileIO.for_location(root)
    entries = list_log(io, root)
    first = oldest_reconstructable(entries, root) if start is None else start
    commits, checkpoints = parse_listing(entries)
    last = max(commits) if end is None else end
    mtimes = commit_timestamps(entries)
    snapshot = load_snapshot(root, version=first, io=io, replay=replay)
    yield snapshot
    while snapshot.version < last:
        following = advance(io, snapshot, 0)
        at = [c for c in checkpoints if c.version == following.version]
        if at:
            following = _checkpoint_metadata(io, following, at)
        info = following.commit_info
        ict = following.metadata.configuration.get("delta.enableInCommitTimestamps") == "true"
        stamp = info.in_commit_timestamp if ict and info and info.in_commit_timestamp else None
        stamp = stamp if stamp is not None else mtimes.get(following.version, 0)
        # Commit times only go forward (Delta's rule for time travel): lift one that goes back.
        snapshot = replace(following, timestamp_ms=max(stamp, snapshot.timestamp_ms + 1))
        yield snapshot


def _checkpoint_metadata(
    io: FileIO, snapshot: DeltaSnapshot, checkpoints: Sequence[Checkpoint]
) -> DeltaSnapshot:
    """The replayed ``snapshot`` with the protocol, metadata, transactions and domains of its
    version's checkpoint: the protocol makes a checkpoint the table's state at its version (every
    reader of a later version starts from it), even where the commits before it replay to
    something else; the first readable one, in the order a reader picks them, as
    ``readable_segment`` would."""
    for checkpoint in sorted(checkpoints, key=lambda c: c.rank, reverse=True):
        state = NonFileState()
        try:
            _checkpoint_state(io, snapshot.root, checkpoint, state)
        except (pa.ArrowInvalid, OSError, TablekeeperError) as err:
            log.warning(
                "checkpoint %d cannot be read (%s): keeping the replayed state", checkpoint.version, err
            )
            continue
        if state.protocol is None or state.metadata is None:
            continue
        state.protocol.check_readable()
        return replace(
            snapshot,
            protocol=state.protocol,
            metadata=state.metadata,
            txns=dict(state.txns),
            domains=dict(state.domains),
        )
    return snapshot


def footer_record_count(io: FileIO, add: AddFile) -> int:
    """The file's row count from its Parquet footer (the log has none). A file already gone is
    ``DataFileGone``: a version of the history Delta's VACUUM broke, or a broken table."""
    try:
        with io.open_input(add.absolute_path) as stream:
            return int(pq.ParquetFile(stream).metadata.num_rows)
    except FileNotFound as err:
        raise DataFileGone.at(
            add.absolute_path,
            f"Delta data file {add.absolute_path} has no record count in the log and is no longer on "
            "storage (VACUUM, or deleted by hand): restore it, or remove it from the table in Delta "
            "(FSCK REPAIR TABLE)",
        ) from err


def build_data_file(
    add: AddFile,
    struct: DeltaStruct,
    mapping: ColumnMapping,
    mapped: MappedSchema,
    partition_columns: tuple[str, ...],
    *,
    spec_id: int = 0,
    io: FileIO | None = None,
    zone: dt.tzinfo | None = None,
) -> DataFile:
    """The data file from the log's stats; only a file the log has no record count for is opened
    (through ``io``, or a FileIO for its location). ``zone``: the writer's, for zone-less
    timestamp partition values."""
    kwargs: dict[str, Any] = {
        "struct": struct,
        "mapping": mapping,
        "mapped": mapped,
        "partition_columns": partition_columns,
        "spec_id": spec_id,
        "zone": zone,
    }
    try:
        return data_file(add, **kwargs)
    except MissingRecordCount:
        count = footer_record_count(io or FileIO.for_location(add.absolute_path), add)
        return data_file(add, record_count=count, **kwargs)
