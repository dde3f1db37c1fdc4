"""convert-delta --rewrite-unreadable-files: the Delta data files Iceberg readers could not read,
rewritten into the target's own location; every other file stays where Delta wrote it.

Two kinds of Delta table need it: column-mapped files whose list elements and map keys/values
carry no field ids (Iceberg readers resolve a file with ids by id only), and columns Delta widened
in a way Iceberg does not promote (int to double: files written before hold ints). A file is
rewritten only when its own footer shows Iceberg would read it wrong: columns resolved as Delta
resolves them (physical names, or ids in id mode), cast to the Iceberg type, written with field
ids, rows in the same order, so a deletion vector's positions still hold.

The rewritten file's name is a hash of the Delta file's path (and the target schema it was
written for): a later Delta commit that removes the file, or gives it a deletion vector, is mapped
onto the target's live rewrite by that hash.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tablekeeper.catalog.base import LoadedTable
from tablekeeper.delta.models import AddFile
from tablekeeper.delta.snapshot import DeltaSnapshot, add_files_of
from tablekeeper.delta.to_iceberg import REWRITE_OPTION, MappedSchema, ids_by_name_path
from tablekeeper.errors import AlreadyExists, CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.arrow_project import iceberg_unreadable, projector, write_schema, written_fields
from tablekeeper.iceberg.content import DATA, DataFile
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.metrics import FloatCollector, MetricsConfig
from tablekeeper.iceberg.parquet import WRITER_OPTIONS, data_file_from_footer
from tablekeeper.iceberg.types import NestedField, Schema, walk_fields
from tablekeeper.io import FileIO
from tablekeeper.tables.iceberg import iter_live_entries

log = logging.getLogger(__name__)

# Under the target's location; never beside the Delta files.
REWRITTEN_DIRECTORY = "data/delta-rewritten"
# Set on a target once it references a rewritten file: later runs map removes and deletion
# vectors of the Delta file onto it.
REWRITTEN_PROPERTY = "tablekeeper.delta.rewritten-files"


def path_digest(delta_path: str) -> str:
    """What names the rewrites of the Delta file at ``delta_path``: the same for every run."""
    return hashlib.sha256(delta_path.encode("utf-8")).hexdigest()


def rewritten_location(table_location: str, delta_path: str, schema_id: int) -> str:
    """Where the rewrite of the Delta file at ``delta_path`` for the target's schema
    ``schema_id`` lives (a later widening may rewrite it again, for a later schema)."""
    return f"{rewrites_home(table_location)}{path_digest(delta_path)}-s{schema_id}.parquet"


def rewrites_home(table_location: str) -> str:
    return f"{table_location.rstrip('/')}/{REWRITTEN_DIRECTORY}/"


def _digest_of(path: str, home: str) -> str | None:
    if not path.startswith(home):
        return None
    return path[len(home) :].split("-", 1)[0]


def live_rewrites(table: LoadedTable) -> dict[str, str]:
    """The target's live rewrites by the digest of their Delta file's path."""
    meta = table.metadata
    if REWRITTEN_PROPERTY not in meta.properties:
        return {}
    home = rewrites_home(meta.location)
    out: dict[str, str] = {}
    for e in iter_live_entries(table.io, meta, meta.current_snapshot()):
        digest = _digest_of(e.data_file.file_path, home) if e.data_file.content == DATA else None
        if digest is not None:
            out[digest] = e.data_file.file_path
    return out


def live_paths(table: LoadedTable, delta_paths: Iterable[str]) -> dict[str, str]:
    """Each Delta file's path in the target: its live rewrite where the target has one, else
    itself (found by the digest of its path among the target's live files)."""
    paths = list(dict.fromkeys(delta_paths))
    rewrites = live_rewrites(table) if paths else {}
    return {p: rewrites.get(path_digest(p), p) for p in paths}


def in_live_partitions(table: LoadedTable, files: Sequence[DataFile], default_spec_id: int) -> list[DataFile]:
    """``files`` (data files the target holds, rebuilt from their Delta adds in the default spec
    ``default_spec_id``) in the spec and partition of their live entries. A DV or position delete
    file written for one must be in that file's spec and partition (Iceberg Java fails the scan
    otherwise), and the default spec may have moved on since the file was added (a partition
    column renamed under column mapping makes a new spec)."""
    specs = table.metadata.partition_specs
    if not files or (len(specs) == 1 and specs[0].spec_id == default_spec_id):
        return list(files)
    wanted = {f.file_path for f in files}
    scopes: dict[str, DataFile] = {}
    for e in iter_live_entries(table.io, table.metadata, table.metadata.current_snapshot()):
        if e.data_file.content == DATA and e.data_file.file_path in wanted:
            scopes[e.data_file.file_path] = e.data_file
    out = []
    for f in files:
        live = scopes.get(f.file_path)
        out.append(f if live is None else replace(f, spec_id=live.spec_id, partition=live.partition))
    return out


def widened_after(meta: TableMetadata, mapped: MappedSchema) -> list[str]:
    """Why files the target already references in place may now be unreadable: columns widened
    (beyond Iceberg's promotions) since the target's current schema, when it has data."""
    if meta.current_snapshot() is None:
        return []
    before = ids_by_name_path(meta.schema())
    out = []
    for u in mapped.unreadable:
        if u.widened_from is None or u.path not in before:
            continue
        was = meta.schema().find_type(before[u.path])
        if was != mapped.schema.find_type(mapped.ids_by_path[u.path]):
            out.append(u.reason)
    return out


def retyped_ids(mapped: MappedSchema) -> frozenset[int]:
    """Field ids of the columns widened beyond Iceberg's promotions (their children too): they
    keep their ids through the change, since every file holding the old type is rewritten."""
    out: set[int] = set()
    for u in mapped.unreadable:
        field_ = mapped.schema.find_field(mapped.ids_by_path[u.path]) if u.widened_from else None
        if field_ is not None:
            out |= {field_.id, *(c.id for c in walk_fields(field_.type))}
    return frozenset(out)


def in_place_unreadable(
    table: LoadedTable, snap: DeltaSnapshot, rewriter: Rewriter, io: FileIO, gone: Iterable[str], why: str
) -> list[tuple[AddFile, DataFile]]:
    """The target's live data files (in place, or rewrites made for an older schema) that the
    version's schema makes unreadable, each as (its Delta add as of ``snap``, with its current
    DV; the target's data file); ``gone``: Delta files the version removes. They are rewritten
    from the Delta file like new files and replace the target's in the same snapshot."""
    meta = table.metadata
    home = rewrites_home(meta.location)
    skip = set(gone)
    entries = iter_live_entries(table.io, meta, meta.current_snapshot())
    live = [e.data_file for e in entries if e.data_file.content == DATA]
    if not live:
        return []
    current = snap.files.column("absolute_path")
    by_digest = {path_digest(p): p for p in [*current.to_pylist(), *skip]}
    # Each live file as (its Delta file's path, or None when no Delta file is known for it).
    held = [(f, by_digest.get(d) if (d := _digest_of(f.file_path, home)) else f.file_path) for f in live]
    wanted = pa.array([p for _, p in held if p is not None and p not in skip], pa.string())
    adds = {a.absolute_path: a for a in add_files_of(snap.files.filter(pc.is_in(current, wanted)))}
    missing = [f.file_path for f, p in held if p is None or (p not in adds and p not in skip)]
    if missing:
        # The state holds only the files this run's commits touched (a Spark replay).
        raise UnsupportedFeatureError(
            f"{why}, after {table.identifier} was converted, and its file {missing[0]} is not in the "
            f"Delta state this run read: run again with --engine driver, or convert into a new "
            f"target with {REWRITE_OPTION}"
        )
    pairs = [(adds[p], f) for f, p in held if p is not None and p in adds]
    target_io = FileIO.for_location(meta.location)

    def unreadable(pair: tuple[AddFile, DataFile]) -> str | None:
        path = pair[1].file_path
        return rewriter.unreadable_at(target_io if path.startswith(home) else io, path)

    with ThreadPoolExecutor(max_workers=max(1, min(8, len(pairs)))) as pool:
        reasons = list(pool.map(unreadable, pairs))
    return [pair for pair, reason in zip(pairs, reasons, strict=True) if reason is not None]


@dataclass
class Rewriter:
    """Rewrites, for one target and schema, the Delta files Iceberg readers could not read."""

    schema: Schema  # the target's schema for the version
    mapped: MappedSchema
    by_id: bool  # Delta resolves columns by field id (column mapping's id mode), else by name
    location: str
    properties: Mapping[str, str]
    partition_sources: frozenset[int]  # identity partition columns: Delta keeps them out of files
    # Files this run wrote (removed again if it fails) and how many data files it rewrote.
    created: list[str] = field(default_factory=list)
    rewritten: int = 0

    @property
    def fields(self) -> tuple[NestedField, ...]:
        return written_fields([f for f in self.schema.fields if f.id not in self.partition_sources])

    def unreadable(self, io: FileIO, add: AddFile) -> str | None:
        """Why Iceberg readers would read the Delta file wrong, or None."""
        return self.unreadable_at(io, add.absolute_path)

    def unreadable_at(self, io: FileIO, path: str) -> str | None:
        with io.open_input(path) as stream:
            file_schema = pq.ParquetFile(stream).schema_arrow
        return iceberg_unreadable(file_schema, self.fields, self.mapped.name_mapping)

    def rewrite_unreadable(self, io: FileIO, pairs: Sequence[tuple[AddFile, DataFile]]) -> list[DataFile]:
        """The data files, each unreadable one replaced by its rewrite."""
        if not self.mapped.unreadable:
            return [f for _, f in pairs]
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(pairs)))) as pool:
            reasons = list(pool.map(lambda p: self.unreadable(io, p[0]), pairs))
        out = []
        for (add, f), reason in zip(pairs, reasons, strict=True):
            if reason is None:
                out.append(f)
                continue
            log.info("rewriting %s: %s", add.absolute_path, reason)
            out.append(self.rewrite(io, add, f))
        return out

    def rewrite(self, io: FileIO, add: AddFile, original: DataFile) -> DataFile:
        path = rewritten_location(self.location, add.absolute_path, self.schema.schema_id)
        target_io = FileIO.for_location(path)
        if target_io.exists(path):
            # An earlier run's rewrite of the same (immutable) Delta file: reused as it is.
            with target_io.open_input(path) as stream:
                footer = pq.ParquetFile(stream).metadata
            written = self._data_file(footer, path, target_io.size(path), original, None)
        else:
            data, floats = self._written(io, add)
            footer = pq.ParquetFile(pa.BufferReader(data)).metadata
            written = self._data_file(footer, path, len(data), original, floats)
            try:
                target_io.create_if_absent(path, data)
                self.created.append(path)
            except AlreadyExists:
                pass  # another run wrote the same rewrite meanwhile
        self.rewritten += 1
        return written

    def _written(self, io: FileIO, add: AddFile) -> tuple[bytes, FloatCollector]:
        fields = self.fields
        schema = write_schema(fields)
        floats = FloatCollector(fields)
        sink = pa.BufferOutputStream()
        with io.open_input(add.absolute_path) as stream:
            source = pq.ParquetFile(stream)
            read, project = projector(
                source.schema_arrow,
                fields,
                self.mapped.name_mapping,
                add.absolute_path,
                by_id=self.by_id,
                widen=True,
            )
            with pq.ParquetWriter(sink, schema, **WRITER_OPTIONS) as writer:
                if not read:  # none of the columns is in the file: all read as null
                    empty = pa.record_batch([], schema=pa.schema([]))
                    batches = [(empty, source.metadata.num_rows)]
                else:
                    batches = [(b, b.num_rows) for b in source.iter_batches(columns=read, use_threads=False)]
                for batch, rows in batches:
                    out = pa.RecordBatch.from_arrays(project(batch, rows), schema=schema)
                    floats.update(out)
                    writer.write_batch(out)
        return sink.getvalue().to_pybytes(), floats

    def _data_file(
        self,
        footer: pq.FileMetaData,
        path: str,
        size: int,
        original: DataFile,
        floats: FloatCollector | None,
    ) -> DataFile:
        if footer.num_rows != original.record_count:
            raise CorruptMetadataError(
                f"{path} (the rewrite of {original.file_path}) holds {footer.num_rows} rows, not "
                f"{original.record_count}: remove it and convert again"
            )
        reason = iceberg_unreadable(footer.schema.to_arrow_schema(), self.fields, None)
        if reason is not None:
            raise CorruptMetadataError(
                f"{path} (the rewrite of {original.file_path}) is not readable as the table's schema "
                f"({reason}): remove it and convert again"
            )
        metrics = MetricsConfig.for_table(self.properties, self.schema)
        built = data_file_from_footer(
            footer,
            self.schema,
            path=path,
            file_size=size,
            spec_id=original.spec_id,
            partition=original.partition,
            metrics=metrics,
            floats=floats.stats if floats is not None else None,
        )
        # Same rows in the same order: the same row ids (a new file gets its own later).
        return replace(built, record_count=original.record_count, first_row_id=original.first_row_id)


def rewriter_for(
    meta: TableMetadata, preview: TableMetadata, mapped: MappedSchema, by_id: bool, created: list[str]
) -> Rewriter | None:
    """The rewriter for a version whose schema has columns some files may hold unreadably;
    ``created``: the run's list of files it wrote."""
    if not mapped.unreadable:
        return None
    spec = preview.spec(preview.default_spec_id)
    sources = frozenset(f.source_id for f in spec.fields if f.transform == "identity")
    schema = preview.schema()
    return Rewriter(schema, mapped, by_id, meta.location, preview.properties, sources, created)


def as_delta_paths(state: pa.Table, delta_files: pa.Table, location: str) -> pa.Table:
    """A target's live files (``state``: ``absolute_path``, ``dv_id``) with each rewrite named
    by the Delta file it was made from, where that file is among ``delta_files``: so a re-sync
    compares Delta paths with Delta paths."""
    home = rewrites_home(location)
    by_digest = {path_digest(p): p for p in delta_files.column("absolute_path").to_pylist()}
    paths = []
    for p in state.column("absolute_path").to_pylist():
        digest = _digest_of(p, home)
        paths.append(by_digest.get(digest, p) if digest is not None else p)
    return state.set_column(
        state.schema.get_field_index("absolute_path"), "absolute_path", pa.array(paths, pa.string())
    )
