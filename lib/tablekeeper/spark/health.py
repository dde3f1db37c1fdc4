"""health's read of a big table on the executors: each task tallies a slice of the manifests.

Tallies come back in manifest order (``collect`` keeps the partitions' order), so the files
compaction would pack stay in the order its planner sees them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pyspark.sql import SparkSession

from tablekeeper.catalog.base import LoadedTable
from tablekeeper.iceberg.content import ManifestFile
from tablekeeper.iceberg.delete_index import DeleteIndex
from tablekeeper.iceberg.health import Tally, new_tally
from tablekeeper.iceberg.rewrite_plan import RewriteOptions
from tablekeeper.io import FileIO
from tablekeeper.tables.iceberg import tally_manifests

# Manifests per task: enough to amortise a task's start, few enough to spread over the cores.
MANIFESTS_PER_TASK = 16


def spark_tally(
    session: SparkSession,
) -> Callable[[LoadedTable, Sequence[ManifestFile], DeleteIndex, RewriteOptions], Tally]:
    def read(
        table: LoadedTable, manifests: Sequence[ManifestFile], index: DeleteIndex, options: RewriteOptions
    ) -> Tally:
        meta = table.metadata
        live = [m for m in manifests if m.has_live_files()]

        def one(part: Iterable[ManifestFile]) -> Iterable[Tally]:
            todo = list(part)
            if todo:
                io = FileIO.for_location(todo[0].manifest_path)
                yield tally_manifests(io, meta, todo, index, options)

        sc = session.sparkContext
        sc.setJobDescription(f"health: {len(live)} manifests of {table.identifier}")
        slices = max(1, min(len(live), -(-len(live) // MANIFESTS_PER_TASK)))
        tally = new_tally(meta, options)
        for part in sc.parallelize(live, slices).mapPartitions(one).collect():
            tally.merge(part)
        return tally

    return read
