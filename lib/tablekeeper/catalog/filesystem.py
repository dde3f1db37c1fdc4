"""The file-system catalog: Iceberg's HadoopCatalog layout, also used for path-only tables.

``<warehouse>/<ns...>/<table>/metadata/v<N>.metadata.json`` plus ``version-hint.text``. A commit
creates ``v<N+1>.metadata.json`` with create-if-absent, which is atomic on local disks and HDFS;
whoever creates the file first wins. The hint is only a shortcut: loads probe past it.
"""

from __future__ import annotations

import logging

from tablekeeper import faults
from tablekeeper.catalog.base import Catalog, LoadedTable, TableIdentifier, metadata_version, read_metadata
from tablekeeper.catalog.config import CatalogConfig
from tablekeeper.catalog.registry import CatalogType, register_catalog_type
from tablekeeper.errors import (
    AlreadyExists,
    CommitFailed,
    CommitStateUnknown,
    ConfigError,
    CorruptMetadataError,
    FileNotFound,
    NotATableError,
    StorageError,
    TablekeeperError,
)
from tablekeeper.iceberg.metadata import TableMetadata, table_metadata_to_bytes
from tablekeeper.io import FileIO

log = logging.getLogger(__name__)

VERSION_HINT = "version-hint.text"


def _metadata_dir(table_location: str) -> str:
    return f"{table_location.rstrip('/')}/metadata"


def _version_file(table_location: str, version: int, gzip_codec: bool) -> str:
    ext = ".gz.metadata.json" if gzip_codec else ".metadata.json"
    return f"{_metadata_dir(table_location)}/v{version}{ext}"


def find_current_version(io: FileIO, table_location: str, repair: bool = False) -> tuple[int, str] | None:
    """Highest vN metadata file: start at the hint, then probe upwards (the hint may lag a commit).

    A hint naming a version whose file is gone is refused rather than rolled back to an older
    version: jobs planned on stale metadata would treat the newest files as unreferenced.
    """
    meta_dir = _metadata_dir(table_location)
    hint: int | None = None
    stale_hint = True  # a hint file that says nothing usable is repaired like a lagging one
    try:
        text = io.read(f"{meta_dir}/{VERSION_HINT}").decode("utf-8", "replace").strip()
        hint = int(text.splitlines()[0]) if text else None
    except FileNotFound:
        stale_hint = False  # no hint at all: a layout without one is left as it is
    except (ValueError, IndexError):
        hint = None
    except StorageError:
        return None  # not a directory (a file was named), or unreadable: not a table here
    hinted = hint is not None
    if hint is None:
        try:
            versions = [
                v
                for info in io.list(meta_dir, recursive=False)
                if (v := metadata_version(info.location)) is not None
                and info.location.rsplit("/", 1)[-1].startswith("v")
            ]
        except (FileNotFound, StorageError):
            return None
        if not versions:
            return None
        hint = max(versions)
    current: tuple[int, str] | None = None
    version = hint
    while (found := _existing_version_file(io, table_location, version)) is not None:
        current = (version, found)
        version += 1
    if current is None and hinted and _has_version_files(io, meta_dir):
        raise CorruptMetadataError(
            f"{meta_dir}/{VERSION_HINT} says version {hint} but v{hint}.metadata.json is missing: "
            "refusing to fall back to older metadata"
        )
    if repair and current is not None and stale_hint and current[0] != hint:
        _repair_hint(io, table_location, current[0])
    return current


def _has_version_files(io: FileIO, meta_dir: str) -> bool:
    try:
        return any(
            metadata_version(i.location) is not None and i.location.rsplit("/", 1)[-1].startswith("v")
            for i in io.list(meta_dir, recursive=False)
        )
    except (FileNotFound, StorageError):
        return False


def _existing_version_file(io: FileIO, table_location: str, version: int) -> str | None:
    for gz in (False, True):
        candidate = _version_file(table_location, version, gz)
        if io.exists(candidate):
            return candidate
    legacy = f"{_metadata_dir(table_location)}/v{version}.metadata.json.gz"
    return legacy if io.exists(legacy) else None


def latest_catalog_metadata(io: FileIO, table_location: str) -> str | None:
    """Newest ``NNNNN-<uuid>.metadata.json`` of a catalog-managed table read by its path."""
    best: tuple[int, int, str] | None = None
    try:
        for info in io.list(_metadata_dir(table_location), recursive=False):
            name = info.location.rsplit("/", 1)[-1]
            version = metadata_version(info.location)
            if version is None or name.startswith("v"):
                continue
            key = (version, info.mtime_ms, info.location)
            best = key if best is None or key > best else best
    except FileNotFound:
        return None
    return None if best is None else best[2]


def load_path_table(io: FileIO, table_location: str, identifier: str | None = None) -> LoadedTable:
    """A table by location: the file-system layout, else the newest catalog-named file (read-only).

    A hint that lags the newest version (a writer died between its commit and the hint) is
    brought up to date: readers probe past it, but tools that trust it would miss the commit.
    """
    current = find_current_version(io, table_location, repair=True)
    location = current[1] if current is not None else latest_catalog_metadata(io, table_location)
    if location is None:
        raise NotATableError(
            f"{table_location} is not an Iceberg table (no metadata/*.metadata.json under it): check the path"
        )
    return LoadedTable(identifier or table_location, location, read_metadata(io, location), io)


def commit_path_table(base: LoadedTable, new_metadata: TableMetadata) -> LoadedTable:
    version = metadata_version(base.metadata_location)
    if version is None or not base.metadata_location.rsplit("/", 1)[-1].startswith("v"):
        raise ConfigError(
            f"{base.metadata_location} is not in the file-system layout (v<N>.metadata.json): "
            "commit through the table's catalog instead of its path"
        )
    table_location = base.metadata_location.rsplit("/metadata/", 1)[0]
    gzip_codec = new_metadata.properties.get("write.metadata.compression-codec", "none").lower() == "gzip"
    target = _version_file(table_location, version + 1, gzip_codec)
    other = _version_file(table_location, version + 1, not gzip_codec)
    io = base.io
    if io.exists(other):
        raise CommitFailed(f"version {version + 1} of {table_location} was committed by another writer")
    # Creating the version file is the swap: there is no moment with one written but not current.
    faults.kill_point("commit.metadata-written")
    try:
        io.create_if_absent(target, table_metadata_to_bytes(new_metadata, gzip_codec))
    except AlreadyExists:
        raise CommitFailed(
            f"version {version + 1} of {table_location} was committed by another writer"
        ) from None
    except StorageError as err:
        # The file may or may not exist now; only a later load can tell.
        raise CommitStateUnknown(f"writing {target} failed midway ({err.message}); check the table") from err
    faults.kill_point("commit.swapped")
    _write_hint(io, table_location, version + 1)
    return LoadedTable(base.identifier, target, new_metadata, io)


def _repair_hint(io: FileIO, table_location: str, version: int) -> None:
    """Bring a lagging hint up to ``version``, never down: a writer may have moved it on since."""
    try:
        text = io.read(f"{_metadata_dir(table_location)}/{VERSION_HINT}").decode("utf-8", "replace").strip()
        if int(text.splitlines()[0]) >= version:
            return
    except (TablekeeperError, ValueError, IndexError):
        pass  # missing or unreadable: write it
    log.info("version hint of %s lagged: the table is at version %d", table_location, version)
    _write_hint(io, table_location, version)


def _write_hint(io: FileIO, table_location: str, version: int) -> None:
    try:
        io.write(f"{_metadata_dir(table_location)}/{VERSION_HINT}", str(version).encode("ascii"))
    except StorageError as err:  # the hint is an optimisation: loads probe past it
        log.warning("could not update %s of %s: %s", VERSION_HINT, table_location, err.message)


class FileSystemCatalog(Catalog):
    def __init__(self, name: str, warehouse: str, io: FileIO | None = None) -> None:
        self.name = name
        self.warehouse = warehouse.rstrip("/")
        self.io = io or FileIO.for_location(warehouse)

    def default_table_location(self, identifier: str) -> str:
        ident = TableIdentifier.parse(identifier)
        return "/".join((self.warehouse, *ident.namespace, ident.name))

    def load_table(self, identifier: str) -> LoadedTable:
        location = self.default_table_location(identifier)
        try:
            return load_path_table(self.io, location, identifier)
        except NotATableError:
            raise NotATableError(
                f"table {identifier} not found in catalog {self.name} (no metadata under {location})"
            ) from None

    def table_exists(self, identifier: str) -> bool:
        return find_current_version(self.io, self.default_table_location(identifier)) is not None

    def _children(self, location: str) -> list[str]:
        return sorted(self.io.list_dir(location)[1])

    def list_namespaces(self) -> list[str]:
        """Directories of the warehouse that are not tables themselves (one level: HadoopCatalog's
        nested namespaces are rare; name them with --namespace)."""
        return [
            c.rsplit("/", 1)[-1]
            for c in self._children(self.warehouse)
            if find_current_version(self.io, c) is None and not self.io.exists(f"{c}/_delta_log")
        ]

    def list_tables(self, namespace: str) -> list[str]:
        base = "/".join((self.warehouse, *namespace.split(".")))
        return [
            f"{namespace}.{c.rsplit('/', 1)[-1]}"
            for c in self._children(base)
            if find_current_version(self.io, c)
        ]

    def delta_tables(self, namespace: str) -> list[str]:
        base = "/".join((self.warehouse, *namespace.split(".")))
        return [
            c
            for c in self._children(base)
            if any(True for _ in self.io.list(f"{c}/_delta_log", recursive=False))
        ]

    def commit(self, base: LoadedTable, new_metadata: TableMetadata) -> LoadedTable:
        return commit_path_table(base, new_metadata)

    def create_table(self, identifier: str, metadata: TableMetadata) -> LoadedTable:
        location = self.default_table_location(identifier)
        if self.table_exists(identifier):
            raise ConfigError(f"table {identifier} already exists in catalog {self.name}")
        target = _version_file(location, 1, False)
        faults.kill_point("commit.metadata-written")
        try:
            self.io.create_if_absent(target, table_metadata_to_bytes(metadata))
        except AlreadyExists:
            raise CommitFailed(f"table {identifier} was created concurrently") from None
        except StorageError as err:
            # The file may or may not exist now (an object store's answer can be lost).
            raise CommitStateUnknown(
                f"creating {target} failed midway ({err.message}); check whether {identifier} exists"
            ) from err
        faults.kill_point("commit.swapped")
        _write_hint(self.io, location, 1)
        return LoadedTable(identifier, target, metadata, self.io)


class PathCatalog(Catalog):
    """A table named by its location alone; commits use the file-system layout."""

    def __init__(self, io: FileIO | None = None) -> None:
        self.name = "path"
        self._io = io

    def _io_for(self, location: str) -> FileIO:
        return self._io or FileIO.for_location(location)

    def default_table_location(self, identifier: str) -> str:
        return identifier.rstrip("/")

    def load_table(self, identifier: str) -> LoadedTable:
        return load_path_table(self._io_for(identifier), identifier.rstrip("/"), identifier)

    def table_exists(self, identifier: str) -> bool:
        return find_current_version(self._io_for(identifier), identifier.rstrip("/")) is not None

    def commit(self, base: LoadedTable, new_metadata: TableMetadata) -> LoadedTable:
        return commit_path_table(base, new_metadata)

    def create_table(self, identifier: str, metadata: TableMetadata) -> LoadedTable:
        return FileSystemCatalog(
            "path", identifier.rstrip("/").rsplit("/", 2)[0], self._io_for(identifier)
        ).create_table(".".join(identifier.rstrip("/").rsplit("/", 2)[1:]), metadata)


def _open(config: CatalogConfig) -> Catalog:
    return FileSystemCatalog(config.name, config.warehouse)


# Iceberg's Hadoop catalog keeps the same version files and hint in the same warehouse layout.
CATALOG_TYPE = register_catalog_type(CatalogType("filesystem", _open, lambda _: {"type": "hadoop"}))
