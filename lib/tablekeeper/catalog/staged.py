"""A table built in memory by ordinary commits and made visible in its catalog in one step.

Commits to a staged table write their manifests and manifest lists where they belong (those files
are final) but no metadata file: the metadata stays in this process until ``publish`` creates the
table in the real catalog, or commits to it when it existed before, in a single catalog
operation. A run that dies before then leaves no table and no new snapshot for anyone to read,
only files that its staging journal names.
"""

from __future__ import annotations

from dataclasses import replace

from tablekeeper.catalog.base import Catalog, LoadedTable
from tablekeeper.errors import CommitFailed, ConfigError, NotATableError
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.updates import with_previous_metadata
from tablekeeper.io import FileIO


class StagedTable(Catalog):
    """One table of ``real``, staged. ``base`` is the table as loaded (None when it is new)."""

    def __init__(self, real: Catalog, identifier: str, base: LoadedTable | None, location: str) -> None:
        self.name = real.name
        self.real = real
        self.commit_settle_ms = real.commit_settle_ms
        self.identifier = identifier
        self.base = base
        self.location = location
        self.io = base.io if base is not None else FileIO.for_location(location)
        self.current: TableMetadata | None = base.metadata if base is not None else None
        self.version = 0

    def _check(self, identifier: str) -> None:
        if identifier != self.identifier:
            raise ConfigError(f"staged table {self.identifier} cannot stand in for {identifier}")

    def _loaded(self) -> LoadedTable:
        assert self.current is not None
        # Never written: the location only tells the versions of this run apart.
        return LoadedTable(self.identifier, f"staged:{self.version}", self.current, self.io)

    def load_table(self, identifier: str) -> LoadedTable:
        self._check(identifier)
        if self.current is None:
            raise NotATableError(f"table {identifier} is not staged yet")
        return self._loaded()

    def table_exists(self, identifier: str) -> bool:
        self._check(identifier)
        return self.current is not None

    def default_table_location(self, identifier: str) -> str:
        self._check(identifier)
        return self.location

    def create_table(self, identifier: str, metadata: TableMetadata) -> LoadedTable:
        self._check(identifier)
        if self.current is not None:
            raise ConfigError(f"table {identifier} is already staged")
        self.current = metadata
        return self._loaded()

    def commit(self, base: LoadedTable, new_metadata: TableMetadata) -> LoadedTable:
        if self.current is None or base.metadata is not self.current:
            raise CommitFailed(f"staged table {self.identifier} moved on since {base.metadata_location}")
        # Staged versions are never written, so they stay out of the metadata log; the log is
        # the real table's until publish adds its current file.
        log = self.base.metadata.metadata_log if self.base is not None else ()
        self.current = replace(new_metadata, metadata_log=log)
        self.version += 1
        return self._loaded()

    @property
    def changed(self) -> bool:
        return self.version > 0 or (self.base is None and self.current is not None)

    def publish(self) -> LoadedTable:
        """Make the staged table visible: create it, or commit it over the table it started from
        (``CommitFailed`` when that table moved meanwhile, ``CommitStateUnknown`` as any commit)."""
        if self.current is None:
            raise NotATableError(f"nothing staged for {self.identifier}")
        if self.base is None:
            return self.real.create_table(self.identifier, self.current)
        if not self.changed:
            return self.base
        new = with_previous_metadata(self.current, self.base.metadata, self.base.metadata_location)
        return self.real.commit(self.base, new)
