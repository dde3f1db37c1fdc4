"""Optimistic commits: apply on the freshest base, swap, retry with backoff, clean up safely.

Cleanup rules (the ones that keep data safe): files written by a failed attempt are deleted only
when the failure is known to have left the pointer where it was (CommitFailed, and errors raised
before the swap). On CommitStateUnknown nothing is deleted, because the new metadata may be live
and reference every file written; nor on an interrupt, which may come just after the swap.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tablekeeper import faults, progress
from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.commit.producer import (
    SnapshotChange,
    apply_change,
    apply_manifest_replacement,
    new_commit_uuid,
    write_new_manifests,
)
from tablekeeper.errors import CommitConflict, CommitFailed, CommitStateUnknown
from tablekeeper.iceberg.content import ManifestFile
from tablekeeper.iceberg.metadata import MAIN_BRANCH, Snapshot, TableMetadata
from tablekeeper.iceberg.updates import new_snapshot_id, with_previous_metadata

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    num_retries: int = 4
    min_wait_ms: int = 100
    max_wait_ms: int = 60_000
    total_timeout_ms: int = 1_800_000

    @classmethod
    def from_metadata(cls, meta: TableMetadata) -> RetryPolicy:
        # Iceberg's commit.retry.* table properties and defaults.
        return cls(
            num_retries=meta.property_int("commit.retry.num-retries", 4),
            min_wait_ms=meta.property_int("commit.retry.min-wait-ms", 100),
            max_wait_ms=meta.property_int("commit.retry.max-wait-ms", 60_000),
            total_timeout_ms=meta.property_int("commit.retry.total-timeout-ms", 1_800_000),
        )

    def wait_ms(self, attempt: int) -> float:
        base = min(self.max_wait_ms, self.min_wait_ms * (2**attempt))
        return float(base * (0.5 + random.random() / 2))


@dataclass(frozen=True)
class CommitResult:
    table: LoadedTable
    snapshot: Snapshot | None
    attempts: int


class Committer:
    """Commits changes to one table through its catalog."""

    def __init__(
        self,
        catalog: Catalog,
        identifier: str,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        file_prefix: str | None = None,
    ) -> None:
        self.catalog = catalog
        self.identifier = identifier
        self.clock = clock
        self.sleep = sleep
        self.file_prefix = file_prefix

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _swap(self, base: LoadedTable, new: TableMetadata) -> LoadedTable:
        new = with_previous_metadata(new, base.metadata, base.metadata_location)
        return self.catalog.commit(base, new)

    def _retrying(
        self, step: Callable[[LoadedTable, int], tuple[TableMetadata, tuple[str, ...], object]]
    ) -> tuple[LoadedTable, object, int]:
        with progress.phase("committing", unit="attempts") as shown:
            return self._attempts(step, shown)

    def _attempts(
        self,
        step: Callable[[LoadedTable, int], tuple[TableMetadata, tuple[str, ...], object]],
        shown: progress.Phase,
    ) -> tuple[LoadedTable, object, int]:
        started = self._now_ms()
        attempt = 0
        while True:
            base = self.catalog.require(self.identifier)
            policy = RetryPolicy.from_metadata(base.metadata)
            new, written, extra = step(base, attempt)
            faults.kill_point("commit.manifests-written")
            try:
                return self._swap(base, new), extra, attempt + 1
            except CommitStateUnknown:
                raise  # the new metadata may be live: what it references must stay
            except CommitFailed as err:
                base.io.delete_many(list(written))
                out_of_time = self._now_ms() - started > policy.total_timeout_ms
                if attempt >= policy.num_retries or out_of_time:
                    raise CommitConflict(
                        f"commit to {self.identifier} still conflicting after {attempt + 1} attempts: "
                        f"{err.message}"
                    ) from err
                wait = policy.wait_ms(attempt)
                log.info("commit attempt %d lost (%s); retrying in %.0f ms", attempt + 1, err.message, wait)
                self.sleep(wait / 1000)
                attempt += 1
                shown.advance()
            except Exception:
                # Any other failure is known to have left the pointer where it was. An interrupt
                # (KeyboardInterrupt, SystemExit) may come after the swap: its files stay.
                base.io.delete_many(list(written))
                raise

    def commit_snapshot(self, change: SnapshotChange, snapshot_id: int | None = None) -> CommitResult:
        """Commit one snapshot. Manifests written elsewhere (on executors) for this commit come in
        ``change.added_manifests`` and must have been written for ``snapshot_id``."""
        snapshot_id = new_snapshot_id() if snapshot_id is None else snapshot_id
        stray = [m.manifest_path for m in change.added_manifests if m.added_snapshot_id != snapshot_id]
        if stray:
            raise ValueError(f"{stray[0]} was written for another snapshot than {snapshot_id}")
        commit_uuid = new_commit_uuid(self.file_prefix)
        counter = itertools.count()
        first = self.catalog.require(self.identifier)
        # Manifests of new files do not depend on the base, so every attempt reuses them.
        planned = first.metadata if change.prepare is None else change.prepare(first.metadata, self._now_ms())
        driver_manifests = write_new_manifests(
            first.io,
            planned,
            change.added_files,
            snapshot_id,
            commit_uuid,
            lambda: next(counter),
            change.data_sequence_number,
            change.data_sequence_numbers,
        )
        new_manifests = [*driver_manifests, *change.added_manifests]

        def step(base: LoadedTable, attempt: int) -> tuple[TableMetadata, tuple[str, ...], object]:
            result = apply_change(
                base.io,
                base.metadata,
                change,
                snapshot_id=snapshot_id,
                new_manifests=new_manifests,
                commit_uuid=commit_uuid,
                attempt=attempt + 1,
                counter=lambda: next(counter),
                timestamp_ms=self._now_ms(),
            )
            return result.metadata, result.written, result.snapshot

        try:
            table, snapshot, attempts = self._retrying(step)
        except CommitStateUnknown:
            raise  # the new metadata may be live and reference every manifest: keep them all
        except Exception:
            # Known failure (conflict, validation, I/O before the swap): nothing references them.
            first.io.delete_many([m.manifest_path for m in new_manifests])
            raise
        assert isinstance(snapshot, Snapshot)
        return CommitResult(table, snapshot, attempts)

    def replace_manifests(
        self,
        *,
        removed: frozenset[str],
        added: Sequence[ManifestFile],
        snapshot_id: int,
        entries_processed: int,
        branch: str = MAIN_BRANCH,
        summary: Mapping[str, str] | None = None,
    ) -> CommitResult:
        """Commit manifests rewritten elsewhere (written for ``snapshot_id``) in place of
        ``removed``, retried on lost races like any commit. When the rewrite cannot apply any more
        (``ManifestsChanged``) or fails for a known reason, the added manifests are deleted; on an
        unknown commit state they stay."""
        stray = [m.manifest_path for m in added if m.added_snapshot_id != snapshot_id]
        if stray:
            raise ValueError(f"{stray[0]} was written for another snapshot than {snapshot_id}")
        commit_uuid = new_commit_uuid(self.file_prefix)
        first = self.catalog.require(self.identifier)

        def step(base: LoadedTable, attempt: int) -> tuple[TableMetadata, tuple[str, ...], object]:
            result = apply_manifest_replacement(
                base.io,
                base.metadata,
                branch=branch,
                removed=removed,
                added=added,
                entries_processed=entries_processed,
                extra_summary=dict(summary or {}),
                snapshot_id=snapshot_id,
                commit_uuid=commit_uuid,
                attempt=attempt + 1,
                timestamp_ms=self._now_ms(),
            )
            return result.metadata, result.written, result.snapshot

        try:
            table, snapshot, attempts = self._retrying(step)
        except CommitStateUnknown:
            raise  # the new list may be live and reference every added manifest
        except Exception:
            first.io.delete_many([m.manifest_path for m in added])
            raise
        assert isinstance(snapshot, Snapshot)
        return CommitResult(table, snapshot, attempts)

    def update_metadata(self, update: Callable[[TableMetadata, int], TableMetadata]) -> CommitResult:
        """A metadata-only change (properties, refs, upgrade) re-applied on every retry."""

        def step(base: LoadedTable, attempt: int) -> tuple[TableMetadata, tuple[str, ...], object]:
            return update(base.metadata, self._now_ms()), (), None

        table, _, attempts = self._retrying(step)
        return CommitResult(table, None, attempts)
