"""``convert-delta --verify``: each converted version holds, partition by partition, the rows Delta
says it holds, counted from metadata on both sides (``row_counts``), and with ``--verify rows``
also counted by reading both tables through Spark.

The Iceberg side comes from the manifests the committed snapshot lists, so a conversion that keeps
a file twice, drops one, loses a deletion vector or miscounts a file cannot pass. On the driver
they are decoded again; the executors count each manifest's entries as they encode them and read
the file back only for its entry count (decoding a million entries again would cost half of the
conversion; the encoder itself is proved against Iceberg Java by the interop tests). A
failure stops the run before anything is published (the staged target is discarded) and names
the version and the partition.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession

from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.errors import ConfigError, VerificationFailed
from tablekeeper.files.local import parallel_map
from tablekeeper.iceberg.metadata import TableMetadata, table_metadata_to_bytes
from tablekeeper.io import FileIO
from tablekeeper.row_counts import (
    Counts,
    PartitionKey,
    add_counts,
    delta_file_rows,
    delta_partition,
    live_delta_rows,
    manifest_counts,
)
from tablekeeper.tables.iceberg import load_manifests

log = logging.getLogger(__name__)

VERIFY_MODES = ("off", "metadata", "rows")


def check_mode(mode: str) -> str:
    if mode not in VERIFY_MODES:
        raise ConfigError(f"--verify {mode!r} is not off, metadata or rows")
    return mode


@dataclass
class Verifier:
    """Counts on both sides, caching what never changes between versions: a Delta file's rows (by
    path) and an Iceberg manifest's counts (manifests are immutable)."""

    io: FileIO
    mode: str = "metadata"
    zone: dt.tzinfo | None = None  # the writer's, for zone-less timestamp partition values
    delta_rows: dict[str, int] = field(default_factory=dict)
    manifests: dict[str, Counts] = field(default_factory=dict)
    names: dict[PartitionKey, tuple[Any, ...]] = field(default_factory=dict)
    versions: int = 0
    partitions: int = 0
    rows_checked: int = 0

    def delta_counts(self, snap: DeltaSnapshot, spec_id: int) -> Counts:
        out: Counts = {}
        struct, mapping, columns = snap.schema, snap.column_mapping, snap.partition_columns
        for add in snap.add_files():
            key, values = delta_partition(add, spec_id, struct, mapping, columns, self.zone)
            self.names.setdefault(key, values)
            rows = self.delta_rows.get(add.absolute_path)
            if rows is None:
                rows = self.delta_rows[add.absolute_path] = delta_file_rows(self.io, add)
            out[key] = out.get(key, 0) + live_delta_rows(add, rows)
        return out

    def iceberg_counts(self, meta: TableMetadata) -> Counts:
        # The target's own storage: the Delta table's (self.io) may be another store altogether.
        table_io = FileIO.for_location(meta.location)
        manifests = [m for m in load_manifests(table_io, meta.current_snapshot()) if m.has_live_files()]
        unread = [m for m in manifests if m.manifest_path not in self.manifests]
        schema = meta.schema()

        def count(m: Any) -> Counts:
            return manifest_counts(m, meta.spec(m.partition_spec_id).partition_type(schema))

        for m, counts in zip(unread, parallel_map(count, unread), strict=True):
            self.manifests[m.manifest_path] = counts
        out: Counts = {}
        for m in manifests:
            add_counts(out, self.manifests[m.manifest_path])
        return out

    def check(
        self, snap: DeltaSnapshot, meta: TableMetadata, expected: Mapping[PartitionKey, int] | None = None
    ) -> None:
        """Fail unless ``meta``'s current snapshot holds what Delta version ``snap`` holds
        (``expected``: Delta's counts when the executors made them)."""
        want_all = self.delta_counts(snap, meta.default_spec_id) if expected is None else expected
        got = self.iceberg_counts(meta)
        for key in sorted(set(want_all) | set(got), key=repr):
            want, have = want_all.get(key, 0), got.get(key, 0)
            if want != have:
                raise VerificationFailed(
                    f"verification failed at Delta version {snap.version}, partition "
                    f"{_describe(self.names.get(key, key[1]))}: Delta holds {want} live rows, the "
                    f"converted snapshot {have}; nothing was published (report it with the table)"
                )
        self.versions += 1
        self.partitions += len(want_all)

    def check_rows(self, spark: SparkSession, snap: DeltaSnapshot, metadata_location: str) -> None:
        """Count both tables through Spark: delta-spark at the version, Iceberg Spark reading the
        staged metadata file."""
        delta = spark.read.format("delta").option("versionAsOf", snap.version).load(snap.root).count()
        iceberg = spark.read.format("iceberg").load(metadata_location).count()
        if delta != iceberg:
            raise VerificationFailed(
                f"verification failed at Delta version {snap.version}: delta-spark reads {delta} rows, "
                f"Iceberg Spark {iceberg} from the converted snapshot; nothing was published "
                "(report it with the table)"
            )
        self.rows_checked += 1

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": self.mode,
            "versions_verified": self.versions,
            "partitions_verified": self.partitions,
        }
        if self.mode == "rows":
            out["versions_row_counted"] = self.rows_checked
        return out


def verify_rows(
    verifier: Verifier, spark: SparkSession, snap: DeltaSnapshot, meta: TableMetadata, token: str
) -> None:
    """Count rows through Spark, Iceberg's side from the staged metadata written to a file of
    this run's own (removed again; a dead run's is removed with its staged files)."""
    location = f"{meta.location.rstrip('/')}/metadata/{token}-verify-{snap.version}.metadata.json"
    io = FileIO.for_location(location)
    io.write(location, table_metadata_to_bytes(meta))
    try:
        verifier.check_rows(spark, snap, location)
    finally:
        io.delete(location, missing_ok=True)


def _describe(partition: tuple[Any, ...]) -> str:
    return "(unpartitioned)" if not partition else repr(tuple(partition))
