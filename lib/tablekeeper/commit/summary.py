"""Snapshot summaries with the keys Iceberg Java writes, totals carried along each branch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

from tablekeeper.iceberg.content import DATA, EQUALITY_DELETES, POSITION_DELETES, DataFile

TOTAL_KEYS = (
    "total-records",
    "total-files-size",
    "total-data-files",
    "total-delete-files",
    "total-position-deletes",
    "total-equality-deletes",
)


@dataclass(frozen=True)
class SummaryDelta:
    added_data_files: int = 0
    deleted_data_files: int = 0
    added_delete_files: int = 0
    removed_delete_files: int = 0
    added_position_delete_files: int = 0
    removed_position_delete_files: int = 0
    added_dvs: int = 0
    removed_dvs: int = 0
    added_equality_delete_files: int = 0
    removed_equality_delete_files: int = 0
    added_records: int = 0
    deleted_records: int = 0
    added_files_size: int = 0
    removed_files_size: int = 0
    added_position_deletes: int = 0
    removed_position_deletes: int = 0
    added_equality_deletes: int = 0
    removed_equality_deletes: int = 0

    def __add__(self, other: SummaryDelta) -> SummaryDelta:
        return SummaryDelta(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @classmethod
    def of(cls, added: Iterable[DataFile] = (), removed: Iterable[DataFile] = ()) -> SummaryDelta:
        c: dict[str, int] = {f.name: 0 for f in fields(cls)}
        for f, side in [(f, "added") for f in added] + [(f, "removed") for f in removed]:
            adding = side == "added"
            # A DV counts by its blob, not the Puffin file it shares with other DVs (as Java does).
            size = (
                f.content_size_in_bytes
                if f.is_dv and f.content_size_in_bytes is not None
                else f.file_size_in_bytes
            )
            c["added_files_size" if adding else "removed_files_size"] += size
            if f.content == DATA:
                c["added_data_files" if adding else "deleted_data_files"] += 1
                c["added_records" if adding else "deleted_records"] += f.record_count
                continue
            c["added_delete_files" if adding else "removed_delete_files"] += 1
            if f.content == POSITION_DELETES:
                if f.is_dv:
                    c["added_dvs" if adding else "removed_dvs"] += 1
                else:
                    c["added_position_delete_files" if adding else "removed_position_delete_files"] += 1
                c["added_position_deletes" if adding else "removed_position_deletes"] += f.record_count
            elif f.content == EQUALITY_DELETES:
                c["added_equality_delete_files" if adding else "removed_equality_delete_files"] += 1
                c["added_equality_deletes" if adding else "removed_equality_deletes"] += f.record_count
        return cls(**c)

    def to_summary(self) -> dict[str, str]:
        # Java writes a count key only when it is non-zero.
        return {f.name.replace("_", "-"): str(v) for f in fields(self) if (v := getattr(self, f.name)) > 0}


def build_summary(
    operation: str,
    delta: SummaryDelta,
    previous: Mapping[str, str] | None,
    extra: Mapping[str, str] | None = None,
    changed_partitions: int | None = None,
) -> dict[str, str]:
    out = {"operation": operation, **delta.to_summary()}
    if changed_partitions is not None:
        out["changed-partition-count"] = str(changed_partitions)
    prev = previous or {}

    def total(key: str, plus: int, minus: int) -> None:
        try:
            base = int(prev[key]) if previous is not None else 0
        except (KeyError, ValueError):
            return  # like Java: an unknown previous total cannot be carried forward
        value = base + plus - minus
        if value >= 0:  # a negative total means the previous one was wrong: omit, as Java does
            out[key] = str(value)

    total("total-records", delta.added_records, delta.deleted_records)
    total("total-files-size", delta.added_files_size, delta.removed_files_size)
    total("total-data-files", delta.added_data_files, delta.deleted_data_files)
    total("total-delete-files", delta.added_delete_files, delta.removed_delete_files)
    total("total-position-deletes", delta.added_position_deletes, delta.removed_position_deletes)
    total("total-equality-deletes", delta.added_equality_deletes, delta.removed_equality_deletes)
    out.update(extra or {})
    out["engine-name"] = "tablekeeper"
    return out
