"""convert-delta --rewrite-unreadable-files: the Delta data files Iceberg readers could not read,
rewritten into the target's own location; every other file stays where Delta wrote it.

Two kinds of Delta table need it: column-mapped files whose list elements and map keys/values
carry no field ids (Iceberg readers resolve a file with ids by id only), and columns Delta widened
in a way Iceberg does not promote (int to double: files written before hold ints). A file is
rewritten only when its own footer shows Iceberg would read it wrong: columns resolved as Delta
resolves them (physical names, or ids in id mode), cast to the Iceberg type, written with field
ids, rows in the same order, so a deletion vector's positions still hold.

The rewritten file's name is a hash of the Delta file's path: a later Delta commit that removes
the file, or gives it a deletion vector, is mapped onto the rewritten file by name alone.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.parquet as pq

from tablekeeper.delta.models import AddFile
from tablekeeper.delta.to_iceberg import REWRITE_OPTION, MappedSchema, ids_by_name_path
from tablekeeper.errors import AlreadyExists, CorruptMetadataError, UnsupportedFeatureError
from tablekeeper.iceberg.arrow_project import iceberg_unreadable, projector, write_schema, written_fields
from tablekeeper.iceberg.content import DataFile
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.metrics import FloatCollector, MetricsConfig
from tablekeeper.iceberg.parquet import WRITER_OPTIONS, data_file_from_footer
from tablekeeper.iceberg.types import NestedField, Schema
from tablekeeper.io import FileIO

log = logging.getLogger(__name__)

# Under the target's location; never beside the Delta files.
REWRITTEN_DIRECTORY = "data/delta-rewritten"
# Set on a target once it references a rewritten file: later runs map removes and deletion
# vectors of the Delta file onto it.
REWRITTEN_PROPERTY = "tablekeeper.delta.rewritten-files"


def rewritten_location(table_location: str, delta_path: str) -> str:
    """Where the rewrite of the Delta file at ``delta_path`` lives: the same for every run."""
    digest = hashlib.sha256(delta_path.encode("utf-8")).hexdigest()
    return f"{table_location.rstrip('/')}/{REWRITTEN_DIRECTORY}/{digest}.parquet"


def live_paths(meta: TableMetadata, delta_paths: Iterable[str]) -> dict[str, str]:
    """Each Delta file's path in the target: its rewrite where the target has one, else itself.
    A rewrite exists only for a file some run found unreadable, which the target then never
    referenced in place (``refuse_widened_after``), so its presence on storage decides."""
    paths = list(dict.fromkeys(delta_paths))
    if REWRITTEN_PROPERTY not in meta.properties or not paths:
        return {p: p for p in paths}
    io = FileIO.for_location(meta.location)
    candidates = [rewritten_location(meta.location, p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(16, len(paths))) as pool:
        present = list(pool.map(io.exists, candidates))
    return {p: (c if there else p) for p, c, there in zip(paths, candidates, present, strict=True)}


def refuse_widened_after(meta: TableMetadata, mapped: MappedSchema, target: str) -> None:
    """A column widened after the target was converted: the files it already references in place
    hold the old type, and only files new to this run are rewritten."""
    if meta.current_snapshot() is None:
        return
    before = ids_by_name_path(meta.schema())
    for u in mapped.unreadable:
        if u.widened_from is None or u.path not in before:
            continue
        was = meta.schema().find_type(before[u.path])
        now = mapped.schema.find_type(mapped.ids_by_path[u.path])
        if was != now:
            raise UnsupportedFeatureError(
                f"{u.reason}, after {target} was converted: the files it already references would be "
                f"read wrong; convert into a new target with {REWRITE_OPTION}"
            )


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
        with io.open_input(add.absolute_path) as stream:
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
        path = rewritten_location(self.location, add.absolute_path)
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
        return replace(built, record_count=original.record_count)


def rewriter_for(
    meta: TableMetadata, preview: TableMetadata, mapped: MappedSchema, by_id: bool, created: list[str]
) -> Rewriter | None:
    """The rewriter for a version whose schema has columns some files may hold unreadably;
    ``created``: the run's list of files it wrote."""
    if not mapped.unreadable:
        return None
    spec = preview.spec(preview.default_spec_id)
    sources = frozenset(f.source_id for f in spec.fields if f.transform == "identity")
    return Rewriter(preview.schema(), mapped, by_id, meta.location, preview.properties, sources, created)


def as_delta_paths(state: pa.Table, delta_files: pa.Table, location: str) -> pa.Table:
    """A target's live files (``state``: ``absolute_path``, ``dv_id``) with each rewrite named
    by the Delta file it was made from, where that file is among ``delta_files``: so a re-sync
    compares Delta paths with Delta paths."""
    by_rewrite = {rewritten_location(location, p): p for p in delta_files.column("absolute_path").to_pylist()}
    paths = [by_rewrite.get(p, p) for p in state.column("absolute_path").to_pylist()]
    return state.set_column(
        state.schema.get_field_index("absolute_path"), "absolute_path", pa.array(paths, pa.string())
    )
