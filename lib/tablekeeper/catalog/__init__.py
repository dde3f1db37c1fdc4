"""Catalogs: load a table's current metadata location and swap it atomically."""

from __future__ import annotations

from tablekeeper.catalog.base import Catalog, LoadedTable, TableIdentifier
from tablekeeper.catalog.config import CatalogConfig, CatalogsConfig
from tablekeeper.catalog.filesystem import FileSystemCatalog, PathCatalog
from tablekeeper.catalog.sql import SqlCatalog

__all__ = [
    "Catalog",
    "FileSystemCatalog",
    "LoadedTable",
    "PathCatalog",
    "SqlCatalog",
    "TableIdentifier",
    "catalog_for",
    "looks_like_path",
    "resolve_table",
]


def catalog_for(config: CatalogConfig) -> Catalog:
    if config.type == "filesystem":
        return FileSystemCatalog(config.name, config.warehouse)
    if config.type == "rest":
        from tablekeeper.catalog.rest import RestCatalog

        assert config.uri is not None
        return RestCatalog(config.name, config.uri, config.warehouse, config.properties)
    assert config.uri is not None
    return SqlCatalog(config.name, config.uri, config.warehouse)


def looks_like_path(table: str) -> bool:
    return "/" in table or "://" in table or table.startswith("file:")


def resolve_table(table: str, catalog: str | None, catalogs: CatalogsConfig) -> tuple[Catalog, str]:
    """A ``--table`` value and optional ``--catalog`` -> the catalog to use and the identifier in it."""
    if looks_like_path(table):
        return PathCatalog(), table.rstrip("/")
    return catalog_for(catalogs.get(catalog)), table
