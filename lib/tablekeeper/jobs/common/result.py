"""The one result every job prints: a JSON object, the last line of stdout (and --result-file)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tablekeeper import __version__

Status = Literal["ok", "dry_run", "refused", "failed"]


@dataclass(frozen=True)
class LedgerNote:
    """Where a run's result was appended to the ledger of runs, or why it was not."""

    table: str | None
    written: bool
    run_id: str | None = None
    error: str | None = None

    def to_obj(self) -> dict[str, Any]:
        body: dict[str, Any] = {"table": self.table, "written": self.written}
        if self.run_id is not None:
            body["run_id"] = self.run_id
        if self.error is not None:
            body["error"] = self.error
        return body


@dataclass(frozen=True)
class Prediction:
    """What ``health`` predicted for this run of a job on this table, beside what the run did.

    It travels inside the result (and so the ledger's ``result_json``) rather than as new ledger
    columns: a ledger made by any earlier version keeps its exact schema (``check_ledger``
    recognises unmarked ledgers by it, and older versions append to newer ledgers by name), the
    scheduler reading the result line sees it too, and SQL still reaches every figure with the
    engines' JSON functions (``get_json_object(result_json, '$.prediction.actual.files_removed')``
    in Spark, ``json_extract_scalar`` in Trino).
    """

    health_run_id: str
    health_started_at: str
    table: str  # as health named it
    catalog: str | None  # the catalog the job resolved its table in; None for a path
    bytes_freed: int
    files_removed: int
    duration_ms: int | None  # None: health had no past runs to estimate from
    actual_bytes_freed: int | None
    actual_files_removed: int | None
    actual_duration_ms: int

    def to_obj(self) -> dict[str, Any]:
        return {
            "health_run_id": self.health_run_id,
            "health_started_at": self.health_started_at,
            "catalog": self.catalog,
            "table": self.table,
            "predicted": {
                "bytes_freed": self.bytes_freed,
                "files_removed": self.files_removed,
                "duration_ms": self.duration_ms,
            },
            "actual": {
                "bytes_freed": self.actual_bytes_freed,
                "files_removed": self.actual_files_removed,
                "duration_ms": self.actual_duration_ms,
            },
        }


@dataclass(frozen=True)
class JobResult:
    job: str
    table: str
    status: Status
    dry_run: bool
    started_at: str
    duration_ms: int
    metrics: Mapping[str, Any] = field(default_factory=dict, hash=False)
    files: Sequence[str] | None = None
    error: str | None = None
    tablekeeper_version: str = __version__
    # Set after the run: health's prediction for it, found in the ledger (jobs.common.predictions).
    prediction: Prediction | None = None
    # Set after the run, once its result is in the ledger (or failed to get there).
    ledger: LedgerNote | None = None

    def to_json(self) -> str:
        body: dict[str, Any] = {
            "job": self.job,
            "table": self.table,
            "status": self.status,
            "dry_run": self.dry_run,
            "metrics": dict(self.metrics),
        }
        if self.files is not None:
            body["files"] = list(self.files)
        if self.error is not None:
            body["error"] = self.error
        body.update(
            started_at=self.started_at,
            duration_ms=self.duration_ms,
            tablekeeper_version=self.tablekeeper_version,
        )
        if self.prediction is not None:
            body["prediction"] = self.prediction.to_obj()
        # Last: the ledger row holds the result as it was before this note existed.
        if self.ledger is not None:
            body["ledger"] = self.ledger.to_obj()
        return json.dumps(body, default=str, separators=(",", ":"))


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def iso_utc(moment: dt.datetime) -> str:
    """The one way results spell a time: ISO-8601 in UTC, to the millisecond, with a Z."""
    return moment.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_now_iso() -> str:
    return iso_utc(dt.datetime.now(dt.timezone.utc))


def iso_to_micros(text: str) -> int:
    parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return (parsed - EPOCH) // dt.timedelta(microseconds=1)


def iso_ms(epoch_ms: int) -> str:
    return iso_utc(EPOCH + dt.timedelta(milliseconds=epoch_ms))


@dataclass(frozen=True)
class JobClock:
    """Started when a job starts; its result carries the start time and the duration."""

    started_at: str = field(default_factory=utc_now_iso)
    t0: float = field(default_factory=time.perf_counter)

    def result(
        self,
        job: str,
        table: str,
        *,
        dry_run: bool,
        metrics: Mapping[str, Any],
        files: Sequence[str] | None = None,
    ) -> JobResult:
        return JobResult(
            job=job,
            table=table,
            status="dry_run" if dry_run else "ok",
            dry_run=dry_run,
            started_at=self.started_at,
            duration_ms=int((time.perf_counter() - self.t0) * 1000),
            metrics=metrics,
            files=files,
        )


def new_run_id() -> str:
    """A UUIDv7 (RFC 9562): the run's id in the ledger and its OpenLineage events. Time-ordered, so
    ids sort by start like the runs do; 74 random bits keep runs started in the same millisecond
    apart."""
    ms = (time.time_ns() // 1_000_000) & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big") & ((1 << 74) - 1)
    # unix_ts_ms (48 bits) | version 7 (4) | rand_a (12) | variant 0b10 (2) | rand_b (62)
    value = ms << 80 | 0x7 << 76 | (rand >> 62) << 64 | 0b10 << 62 | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


@dataclass(frozen=True)
class Outcome:
    """What a run did, in the typed counts the ledger's columns and the exported metrics share;
    None where the job reports no such figure, and for dry runs (which change nothing)."""

    files_rewritten: int | None = None
    files_added: int | None = None
    files_deleted: int | None = None
    bytes_freed: int | None = None


# From the metric names the jobs report (Iceberg's procedure output names): the first name present
# wins. files_deleted is deleted_files_count, else the sum of the per-kind deleted_<kind>_count
# (expire-snapshots).
_FIRST_OF: Mapping[str, tuple[str, ...]] = {
    "files_rewritten": (
        "rewritten_data_files_count",
        "rewritten_delete_files_count",
        "rewritten_manifests_count",
    ),
    "files_added": ("added_data_files_count", "added_delete_files_count", "added_manifests_count"),
    "bytes_freed": ("bytes_freed",),
}
_DELETED_KIND = re.compile(r"^deleted_[a-z_]+_count$")


def outcome(result: JobResult) -> Outcome:
    if result.dry_run:
        return Outcome()
    metrics = result.metrics
    return Outcome(
        files_rewritten=_first_count(metrics, _FIRST_OF["files_rewritten"]),
        files_added=_first_count(metrics, _FIRST_OF["files_added"]),
        files_deleted=_deleted_count(metrics),
        bytes_freed=_first_count(metrics, _FIRST_OF["bytes_freed"]),
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _first_count(metrics: Mapping[str, Any], names: Sequence[str]) -> int | None:
    return next((v for n in names if (v := _int(metrics.get(n))) is not None), None)


def _deleted_count(metrics: Mapping[str, Any]) -> int | None:
    total = _int(metrics.get("deleted_files_count"))
    if total is not None:
        return total
    kinds = [v for k, raw in metrics.items() if _DELETED_KIND.match(k) and (v := _int(raw)) is not None]
    return sum(kinds) if kinds else None
