"""Where the Arrow rewrites write: one partition's run of files, each rolled once the bytes
written to it reach the target.

A row group is cut when its rows' estimated encoded size (their Arrow bytes times the encoded to
Arrow ratio this output has measured so far) would fill the file to the target; the sink's
position then says what was really written. Every file is described from its own footer.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tablekeeper.iceberg.arrow_project import write_schema
from tablekeeper.iceberg.content import DataFile
from tablekeeper.iceberg.metrics import FloatCollector, MetricsConfig
from tablekeeper.iceberg.name_mapping import NameMapping
from tablekeeper.iceberg.parquet import WRITER_OPTIONS, data_file_from_footer
from tablekeeper.iceberg.parquet_dictionary import dictionary_columns
from tablekeeper.iceberg.types import NestedField, Schema
from tablekeeper.io import FileIO

log = logging.getLogger(__name__)

NO_ROW_LIMIT = 2**62  # files roll by written bytes
# A row group is never cut below this share of the target: the estimate of a file's size is
# off by at most that, so files land within a small row group of the target.
_MIN_GROUP_SHARE = 32


@dataclass(frozen=True)
class Job:
    """How a rewrite reads its input files and writes its output (shipped to the executors)."""

    fields: tuple[NestedField, ...]  # written columns, then the v3 lineage columns
    lineage: bool
    mapping: NameMapping | None
    directory: str
    codec: str
    level: int | None
    row_group_bytes: int
    page_bytes: int
    dict_bytes: int
    schema: Schema
    metrics: MetricsConfig
    sort_order_id: int | None
    # Written bytes at which a file rolls over; below ``small_bytes`` a file is small (compact's
    # and health's rule); a file taking the last rows of its partition may grow to ``max_bytes``.
    target_bytes: int = 512 << 20
    small_bytes: int = 384 << 20
    max_bytes: int = 921 << 20


class Output:
    """One partition's output files: rows buffered into row groups, each file rolled once the
    bytes written to it reach the job's target (or at ``max_records`` rows).

    A row group is cut when its rows' estimated encoded size (Arrow bytes times the encoded to
    Arrow ratio this output has measured so far) would fill the file to the target; the sink's
    position then says what was really written. With ``expected`` (the rows and written bytes of
    files read again), the last file takes the remaining rows instead of leaving a small one."""

    def __init__(
        self,
        job: Job,
        name: str,
        max_records: int,
        spec_id: int,
        partition: tuple[Any, ...],
        expected: tuple[int, int] | None = None,
    ) -> None:
        self.job = job
        self.name = name
        self.max_records = max(1, max_records)
        self.spec_id = spec_id
        self.partition = partition
        self.expected = expected
        self.io = FileIO.for_location(job.directory)
        self.schema = write_schema(job.fields)
        self.buffer: list[pa.RecordBatch] = []
        self.buffered_bytes = 0.0
        self.buffered_rows = 0
        self.writer: pq.ParquetWriter | None = None
        self.stream: Any = None
        self.location = ""
        self.file_rows = 0
        self.rows = 0  # written by this output, over all its files
        self.ratio = 1.0  # encoded bytes per Arrow byte, as measured over every row group
        self.encoded = self.arrow_bytes = 0
        self.takes_rest = False
        self.floats = FloatCollector(job.fields)
        self.done: list[DataFile] = []

    def written(self) -> int:
        return int(self.stream.tell()) if self.writer is not None else 0

    def _budget(self) -> float:
        """Encoded bytes the open row group may still take."""
        goal = self.job.max_bytes if self.takes_rest else self.job.target_bytes
        left = min(self.job.row_group_bytes, goal - self.written())
        return float(max(left, self.job.target_bytes // _MIN_GROUP_SHARE, 1))

    def add(self, batch: pa.RecordBatch) -> None:
        per_row = batch.nbytes / max(1, batch.num_rows)
        while batch.num_rows:
            budget = self._budget()
            wanted = budget / self.ratio - self.buffered_bytes
            rows = max(1, math.ceil(wanted / per_row)) if per_row > 0 else batch.num_rows
            room = self.max_records - self.file_rows - self.buffered_rows
            take = min(batch.num_rows, rows, room)
            part, batch = batch.slice(0, take), batch.slice(take)
            self.buffer.append(part)
            self.buffered_rows += take
            self.buffered_bytes += take * per_row
            if self.buffered_bytes * self.ratio >= budget or take == room:
                self.flush()
                if self.file_rows >= self.max_records or self._full():
                    self.close()

    def _full(self) -> bool:
        """Whether the open file is done: at the target, unless what is left to write would make
        a small file that fits into this one."""
        size = self.written()
        if self.takes_rest:
            return size >= self.job.max_bytes
        if size < self.job.target_bytes:
            return False
        if self.expected is not None:
            rows, total = self.expected
            pending = self.rows + self.buffered_rows
            rest = total * max(0, rows - pending) / max(1, rows)
            if 0 < rest < self.job.small_bytes and size + rest <= self.job.max_bytes:
                self.takes_rest = True
                return False
        return True

    def flush(self) -> None:
        if not self.buffer:
            return
        table = pa.Table.from_batches(self.buffer, self.schema)
        if self.writer is None:
            self.location = f"{self.job.directory.rstrip('/')}/{self.name}-{len(self.done):05d}.parquet"
            self.stream = self.io.filesystem.open_output_stream(self.io.fs_path(self.location))
            self.writer = pq.ParquetWriter(
                self.stream,
                self.schema,
                compression=self.job.codec,
                compression_level=self.job.level,
                # Chosen on the file's first row group, as parquet-mr chooses on a column's first
                # page: a column of mostly distinct values is written plain, not as a dictionary.
                use_dictionary=dictionary_columns(table),
                data_page_size=self.job.page_bytes,
                dictionary_pagesize_limit=self.job.dict_bytes,
                store_schema=False,
                write_statistics=True,
                **WRITER_OPTIONS,
            )
            self.floats = FloatCollector(self.job.fields)
        for batch in table.to_batches():
            self.floats.update(batch)
        before = self.written()
        self.writer.write_table(table, row_group_size=max(1, table.num_rows))
        self.encoded += self.written() - before
        self.arrow_bytes += table.nbytes
        if self.arrow_bytes:
            self.ratio = max(1e-6, self.encoded / self.arrow_bytes)
        self.file_rows += table.num_rows
        self.rows += table.num_rows
        self.buffer, self.buffered_bytes, self.buffered_rows = [], 0.0, 0

    def close(self) -> None:
        self.flush()
        if self.writer is None:
            return
        self.writer.close()
        self.stream.close()
        self.writer, self.stream, self.file_rows, self.takes_rest = None, None, 0, False
        with self.io.open_input(self.location) as stream:
            size = stream.size()
            footer = pq.read_metadata(stream)
        f = data_file_from_footer(
            footer,
            self.job.schema,
            path=self.location,
            file_size=size,
            spec_id=self.spec_id,
            partition=self.partition,
            metrics=self.job.metrics,
            floats=self.floats.stats,
        )
        self.done.append(
            f if self.job.sort_order_id is None else replace(f, sort_order_id=self.job.sort_order_id)
        )

    def abandon(self) -> None:
        """After a failure: close what is open and delete every file this attempt wrote, so no
        attempt outlives the driver's cleanup as an orphan."""
        try:
            if self.writer is not None:
                self.writer.close()
            if self.stream is not None:
                self.stream.close()
        except Exception:  # the first failure is the one to report
            log.debug("closing a failed output", exc_info=True)
        written = [f.file_path for f in self.done] + ([self.location] if self.location else [])
        self.io.delete_many(written)
