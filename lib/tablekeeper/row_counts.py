"""Live rows per partition, counted from metadata on either side of a conversion.

Delta's side: a live file's ``numRecords`` (the Parquet footer's row count where the log has none)
minus its deletion vector's cardinality. Iceberg's side: a live data file's ``record_count``
minus the positions its position delete files and DVs delete. Counts key on the partition spec
and the partition values compared by bits (``partition_key``), so NaN and signed-zero partitions
count as the spec keeps them apart. Used by ``convert-delta --verify`` on the driver and in the
executors' tasks.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tablekeeper.delta.models import AddFile
from tablekeeper.delta.schema import ColumnMapping, DeltaStruct
from tablekeeper.delta.to_iceberg import partition_tuple
from tablekeeper.errors import VerificationFailed
from tablekeeper.files.manifests import read
from tablekeeper.iceberg.content import DATA, MANIFEST_DATA, DataFile, ManifestFile
from tablekeeper.iceberg.manifest import count_entries, read_manifest
from tablekeeper.iceberg.partitioning import partition_key
from tablekeeper.iceberg.types import StructType
from tablekeeper.io import FileIO
from tablekeeper.tables.delta import footer_record_count

PartitionKey = tuple[int, tuple[Any, ...]]  # (spec id, partition values by bits)
Counts = dict[PartitionKey, int]

# Read from the stats text itself rather than through the parser the conversion uses, so a
# conversion that miscounts cannot agree with itself. Writers put numRecords first; anywhere else
# it might be a column of that name inside minValues, so the whole text is parsed then.
_LEADING_NUM_RECORDS = re.compile(r'\s*\{\s*"numRecords"\s*:\s*(\d+)\s*[,}]')


def stats_record_count(stats: str | None) -> int | None:
    if not stats:
        return None
    found = _LEADING_NUM_RECORDS.match(stats)
    if found:
        return int(found.group(1))
    try:
        value = json.loads(stats)
    except ValueError:
        return None
    rows = value.get("numRecords") if isinstance(value, dict) else None
    return rows if isinstance(rows, int) and not isinstance(rows, bool) else None


def delta_file_rows(io: FileIO, add: AddFile) -> int:
    """Rows the file holds (before its deletion vector)."""
    rows = stats_record_count(add.stats)
    return rows if rows is not None else footer_record_count(io, add)


def delta_partition(
    add: AddFile,
    spec_id: int,
    struct: DeltaStruct,
    mapping: ColumnMapping,
    columns: tuple[str, ...],
    zone: dt.tzinfo | None = None,
) -> tuple[PartitionKey, tuple[Any, ...]]:
    """The file's count key and its partition values (for messages); ``zone``: the writer's, as
    the conversion read zone-less timestamp values."""
    values = partition_tuple(add, struct, mapping, columns, zone)
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
        out[key] = out.get(key, 0) + file_rows(f)
    return out


def file_rows(f: DataFile) -> int:
    """Live rows a file adds to its partition: a delete file's positions count against it."""
    return f.record_count if f.content == DATA else -f.record_count


def written_counts(manifest: ManifestFile, files: Sequence[DataFile]) -> Counts:
    """Counts of the entries just written into ``manifest`` (the ``files`` of its kind and spec),
    once the file read back holds exactly that many entries. Cheaper than decoding it again,
    which would cost as much as writing it: the executors' conversion counts this way."""
    kind = manifest.content == MANIFEST_DATA
    mine = [f for f in files if f.spec_id == manifest.partition_spec_id and (f.content == DATA) == kind]
    found = count_entries(read(manifest.manifest_path), manifest.manifest_path)
    if found != len(mine):
        raise VerificationFailed(
            f"manifest {manifest.manifest_path} holds {found} entries, {len(mine)} were written; "
            "nothing was published (check the storage, then run again)"
        )
    out: Counts = {}
    for f in mine:
        key = (f.spec_id, partition_key(f.partition))
        out[key] = out.get(key, 0) + file_rows(f)
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
