"""What every catalog does: load a table's current metadata and swap it atomically."""

from __future__ import annotations

import logging
import re
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass

from tablekeeper.errors import (
    AlreadyExists,
    ConfigError,
    CorruptMetadataError,
    FileNotFound,
    NotATableError,
    TablekeeperError,
    UnsupportedFeatureError,
)
from tablekeeper.iceberg.metadata import TableMetadata, parse_table_metadata, table_metadata_to_bytes
from tablekeeper.io import FileIO

log = logging.getLogger(__name__)

_HADOOP_NAME = re.compile(r"^v(\d+)(\.gz)?\.metadata\.json(\.gz)?$")
_CATALOG_NAME = re.compile(r"^(\d+)-[0-9a-fA-F-]+(\.gz)?\.metadata\.json$")


@dataclass(frozen=True)
class TableIdentifier:
    namespace: tuple[str, ...]
    name: str

    @classmethod
    def parse(cls, text: str) -> TableIdentifier:
        parts = text.strip().split(".")
        if len(parts) < 2 or not all(parts):
            raise ConfigError(f"table {text!r} is not <namespace>.<table>: name it like db.events")
        return cls(tuple(parts[:-1]), parts[-1])

    def __str__(self) -> str:
        return ".".join((*self.namespace, self.name))


@dataclass(frozen=True)
class LoadedTable:
    """A table as loaded: where its metadata lives and what it says."""

    identifier: str
    metadata_location: str
    metadata: TableMetadata
    io: FileIO


def metadata_version(location: str) -> int | None:
    """The version a metadata file name encodes (v3.metadata.json -> 3, 00007-<uuid>... -> 7)."""
    name = location.rstrip("/").rsplit("/", 1)[-1]
    m = _HADOOP_NAME.match(name) or _CATALOG_NAME.match(name)
    return int(m.group(1)) if m else None


def new_metadata_location(table_location: str, version: int, gzip_codec: bool = False) -> str:
    ext = ".gz.metadata.json" if gzip_codec else ".metadata.json"
    return f"{table_location.rstrip('/')}/metadata/{version:05d}-{uuid.uuid4()}{ext}"


def read_metadata(io: FileIO, location: str) -> TableMetadata:
    try:
        data = io.read(location)
    except FileNotFound:
        raise CorruptMetadataError(
            f"metadata file {location} is missing: the catalog points at a deleted file"
        ) from None
    return parse_table_metadata(data, source=location)


def gzip_codec(metadata: TableMetadata) -> bool:
    """Whether the table asks for gzip metadata files (their names say so, and readers go by it)."""
    return metadata.properties.get("write.metadata.compression-codec", "none").lower() == "gzip"


def landed(io: FileIO, current: str | None, location: str, old: str | None) -> bool | None:
    """Whether a swap to ``location`` whose answer was lost landed, judged from the pointer as it is
    now (``current``; None when there is none, or no answer).

    True when the pointer holds ``location``, or a later metadata file whose log names it: another
    writer may commit on top of ours before we look (Iceberg Java's commit-status check looks at
    the log too). False when another writer's state is current and its log does not name ours.
    None when it cannot be told: no pointer, the pointer still at ``old`` (the server may still be
    applying ours), the current file unreadable, or a log cut at its size limit (ours may have
    dropped out of it)."""
    if current == location:
        return True
    if current is None or current == old:
        return None
    try:
        metadata = read_metadata(io, current)
    except TablekeeperError:
        return None
    history = [entry.metadata_file for entry in metadata.metadata_log]
    if location in history:
        return True
    cap = metadata.properties.get("write.metadata.previous-versions-max", "100")
    if not cap.isdigit() or len(history) >= int(cap):
        return None
    return False


def write_new_metadata(io: FileIO, location: str, metadata: TableMetadata) -> None:
    try:
        io.create_if_absent(location, table_metadata_to_bytes(metadata, gzip_codec(metadata)))
    except AlreadyExists:
        raise CorruptMetadataError(
            f"metadata file {location} already exists: refusing to overwrite it"
        ) from None


class Catalog(ABC):
    name: str
    # How long a commit whose sender died may still land (a server finishing its request):
    # journals of a dead run are finished only once that has passed. Local catalogs: at once.
    commit_settle_ms: int = 0

    @abstractmethod
    def load_table(self, identifier: str) -> LoadedTable: ...

    @abstractmethod
    def commit(self, base: LoadedTable, new_metadata: TableMetadata) -> LoadedTable:
        """Swap base -> new atomically.

        Raises CommitFailed when another commit won (nothing changed; safe to clean up and retry)
        and CommitStateUnknown when the outcome cannot be known (clean up nothing).
        """

    @abstractmethod
    def create_table(self, identifier: str, metadata: TableMetadata) -> LoadedTable: ...

    @abstractmethod
    def table_exists(self, identifier: str) -> bool: ...

    @abstractmethod
    def default_table_location(self, identifier: str) -> str: ...

    def new_table_location(self, identifier: str) -> str:
        """Where a table about to be created will live: a staged creation writes its files there
        before the catalog knows the table."""
        location = self.default_table_location(identifier)
        if not location:
            raise ConfigError(f"catalog {self.name} gives no location for {identifier}: set its warehouse")
        return location

    def list_namespaces(self) -> list[str]:
        """Every namespace, dotted (health over a whole catalog)."""
        raise UnsupportedFeatureError(f"catalog {self.name} cannot list its namespaces: name one")

    def list_tables(self, namespace: str) -> list[str]:
        """The identifiers of the Iceberg tables in ``namespace``, sorted."""
        raise UnsupportedFeatureError(f"catalog {self.name} cannot list its tables: name them")

    def delta_tables(self, namespace: str) -> list[str]:
        """Locations of the Delta tables kept beside the namespace's Iceberg tables (a warehouse
        directory can hold both); none where the catalog has no directory of its own."""
        return []

    def delta_table_location(self, identifier: str) -> str:
        """Where the Delta table registered under ``identifier`` keeps its files, for a catalog
        that registers Delta tables by name (Glue does)."""
        raise UnsupportedFeatureError(
            f"catalog {self.name} registers no Delta tables by name: give {identifier}'s path instead"
        )

    def load_if_exists(self, identifier: str) -> LoadedTable | None:
        """The table as it is now, or None when the catalog has no such table."""
        try:
            return self.load_table(identifier)
        except NotATableError:
            return None

    def require(self, identifier: str) -> LoadedTable:
        try:
            return self.load_table(identifier)
        except NotATableError:
            raise
        except FileNotFound as err:
            raise NotATableError(
                f"table {identifier} not found in catalog {self.name}: {err.message}"
            ) from err


def write_next_metadata(io: FileIO, metadata: TableMetadata, previous: str | None) -> str:
    """Write ``metadata`` as the file that follows ``previous`` (None: a new table's first, version
    0) under the table's location, named as gzip when the table asks for it; its location."""
    version = 0 if previous is None else (metadata_version(previous) or 0) + 1
    location = new_metadata_location(metadata.location, version, gzip_codec(metadata))
    write_new_metadata(io, location, metadata)
    return location
