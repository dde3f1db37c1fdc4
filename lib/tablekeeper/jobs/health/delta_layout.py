"""health's layout check of a Delta table: files a point lookup opens on its clustering or Z-order
columns, from the min and max values of each file's stats, and what a Z-order rewrite would leave.

The columns are the ones ``--layout-columns`` names, else the liquid clustering columns the table
declares (its ``delta.clustering`` domain). Z-order is no property of a Delta table (only of the
OPTIMIZE that wrote some of its files), so a Z-ordered table is judged by the columns named. The
stats are read as convert-delta reads them into Iceberg bounds (the same safety rules: a
truncated string maximum is no bound, timestamps' maxima are widened to the millisecond), and the
measure is the Iceberg check's (``tablekeeper.iceberg.layout``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import orjson

from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.delta.to_iceberg import MissingRecordCount, data_file, map_schema
from tablekeeper.delta.values import OPTIMIZE_MAX_FILE_SIZE
from tablekeeper.errors import TablekeeperError
from tablekeeper.iceberg.content import ManifestEntry
from tablekeeper.iceberg.layout import LayoutTally, placeable
from tablekeeper.jobs.health.layout import advise, after_rewrite, measure_columns
from tablekeeper.jobs.health.model import Recommendation, Thresholds

CLUSTERING_DOMAIN = "delta.clustering"
# Delta's OPTIMIZE writes files up to this (delta.optimize.maxFileSize; the table's
# delta.targetFileSize when set).
TARGET_PROPERTY = "delta.targetFileSize"


def _clustering(snapshot: DeltaSnapshot, logical: dict[tuple[str, ...], tuple[str, ...]]) -> list[str]:
    domain = snapshot.domains.get(CLUSTERING_DOMAIN)
    if domain is None or domain.removed:
        return []
    try:
        columns = orjson.loads(domain.configuration).get("clusteringColumns") or []
    except (orjson.JSONDecodeError, AttributeError):
        return []
    # The domain names physical paths; the user knows the logical ones.
    return [".".join(logical.get(tuple(c), tuple(c))) for c in columns if isinstance(c, list)]


def check_delta_layout(
    advice: list[Recommendation],
    metrics: dict[str, Any],
    snapshot: DeltaSnapshot,
    th: Thresholds,
    named: Sequence[str] | None,
    notes: list[str],
) -> None:
    configuration = snapshot.metadata.configuration
    try:
        mapped = map_schema(snapshot.schema, snapshot.column_mapping, configuration, format_version=3)
    except TablekeeperError as err:
        notes.append(f"layout not judged: {err.message}")
        return
    logical = {phys: path for path, phys in mapped.physical_by_path.items()}
    source = "columns" if named else "clustering"
    wanted = list(named) if named else _clustering(snapshot, logical)
    chosen: list[tuple[str, int]] = []
    for name in wanted:
        fid = mapped.ids_by_path.get(tuple(name.split(".")))
        t = mapped.schema.find_type(fid) if fid is not None else None
        if fid is None or t is None:
            notes.append(f"layout column {name!r} is not in the table's schema: not judged")
        elif not placeable(t):
            notes.append(f"layout column {name!r} has no ordered min and max: not judged")
        else:
            chosen.append((name, fid))
    if not chosen:
        return
    tallies = [
        LayoutTally(fid, mapped.schema.find_type(fid) or mapped.schema.as_struct()) for _, fid in chosen
    ]
    partition_columns = snapshot.partition_columns
    for add in snapshot.add_files():
        try:
            df = data_file(
                add,
                struct=snapshot.schema,
                mapping=snapshot.column_mapping,
                mapped=mapped,
                partition_columns=partition_columns,
            )
        except (MissingRecordCount, TablekeeperError, ValueError):
            notes.append(f"layout not judged: {add.absolute_path} has no usable stats")
            return
        entry = ManifestEntry(status=1, snapshot_id=None, data_file=df)
        for tally in tallies:
            tally.add(entry)
    measured = measure_columns(chosen, tallies)
    try:
        target = int(configuration.get(TARGET_PROPERTY) or OPTIMIZE_MAX_FILE_SIZE)
    except ValueError:
        target = OPTIMIZE_MAX_FILE_SIZE
    target = max(1, target)
    predicted = after_rewrite(
        measured[0][1], lambda size: max(1, math.ceil(size / target)), target, None, len(chosen)
    )
    joined = ", ".join(n for n, _ in chosen)
    if source == "clustering":
        # OPTIMIZE on a clustered table clusters; ZORDER BY is refused there.
        how = "OPTIMIZE (liquid clustering)"
        effect: dict[str, Any] = {"strategy": "binpack", "sort_order": None, "command": "compact"}
    else:
        how = f"OPTIMIZE ZORDER BY ({joined})"
        command = f'compact --strategy sort --sort-order "zorder({joined})"'
        effect = {"strategy": "sort", "sort_order": f"zorder({joined})", "command": command}
    advise(
        advice,
        metrics,
        source,
        {0: partition_columns},
        measured,
        predicted,
        th,
        strategy="clustering" if source == "clustering" else "zorder",
        files_word="files",
        how=f"; {how}",
        effect=effect,
    )
