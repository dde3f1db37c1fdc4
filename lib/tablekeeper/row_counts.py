"""Live rows per partition, counted from metadata on either side of a conversion.

Delta's side: a live file's ``numRecords`` (the Parquet footer's row count where the log has none)
minus its deletion vector's cardinality. Iceberg's side: a live data file's ``record_count``
minus the positions its position delete files and DVs delete. Counts key on the partition spec
and the partition values compared by bits (``partition_key``), so NaN and signed-zero partitions
count as the spec keeps them apart. Used by ``convert-delta --verify`` on the driver and in the
executors' tasks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from tablekeeper.delta.models import AddFile
from tablekeeper.delta.schema import ColumnMapping, DeltaStruct
from tablekeeper.delta.to_iceberg import partition_tuple
from tablekeeper.delta_table import footer_record_count
from tablekeeper.files.manifests import read
from tablekeeper.iceberg.manifest import DATA, ManifestFile, read_manifest
from tablekeeper.iceberg.partitioning import partition_key
from tablekeeper.iceberg.types import StructType
from tablekeeper.io import FileIO

PartitionKey = tuple[int, tuple[Any, ...]]  # (spec id, partition values by bits)
Counts = dict[PartitionKey, int]

# Read from the stats text itself rather than through the parser the conversion uses, so a
# conversion that miscounts cannot agree with itself.
_NUM_RECORDS = re.compile(r'"numRecords"\s*:\s*(\d+)')


def stats_record_count(stats: str | None) -> int | None:
    found = _NUM_RECORDS.search(stats or "")
    return int(found.group(1)) if found else None


def delta_file_rows(io: FileIO, add: AddFile) -> int:
    """Rows the file holds (before its deletion vector)."""
    rows = stats_record_count(add.stats)
    return rows if rows is not None else footer_record_count(io, add)


def delta_partition(
    add: AddFile, spec_id: int, struct: DeltaStruct, mapping: ColumnMapping, columns: tuple[str, ...]
) -> tuple[PartitionKey, tuple[Any, ...]]:
    """The file's count key and its partition values (for messages)."""
    values = partition_tuple(add, struct, mapping, columns)
    return (spec_id, partition_key(values)), values


def live_delta_rows(add: AddFile, rows: int) -> int:
    return rows - (add.deletion_vector.cardinality if add.deletion_vector is not None else 0)


def manifest_counts(manifest: ManifestFile, partition_type: StructType) -> Counts:
    """Live rows a manifest adds per partition: data files count their records, position delete
    files and DVs the positions they delete (negative)."""
    out: Counts = {}
    for e in read_manifest(read(manifest.manifest_path), manifest, partition_type):
        if not e.is_live:
            continue
        f = e.data_file
        key = (f.spec_id, partition_key(f.partition))
        out[key] = out.get(key, 0) + (f.record_count if f.content == DATA else -f.record_count)
    return out


def add_counts(into: Counts, part: Mapping[PartitionKey, int]) -> Counts:
    for key, rows in part.items():
        into[key] = into.get(key, 0) + rows
    return into


def merge_counts(parts: Iterable[Mapping[PartitionKey, int]]) -> Counts:
    out: Counts = {}
    for part in parts:
        add_counts(out, part)
    return out
