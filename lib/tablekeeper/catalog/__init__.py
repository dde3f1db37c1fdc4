"""Catalogs: load a table's current metadata location and swap it atomically."""

from __future__ import annotations

from tablekeeper.catalog.base import Catalog, LoadedTable, TableIdentifier
from tablekeeper.catalog.config import CatalogConfig, CatalogsConfig
from tablekeeper.catalog.filesystem import FileSystemCatalog, PathCatalog
from tablekeeper.catalog.registry import CatalogType, register_catalog_type, type_of
from tablekeeper.catalog.sql import SqlCatalog

__all__ = [
    "Catalog",
    "CatalogType",
    "FileSystemCatalog",
    "LoadedTable",
    "PathCatalog",
    "SqlCatalog",
    "TableIdentifier",
    "catalog_for",
    "delta_source",
    "looks_like_path",
    "register_catalog_type",
    "resolve_table",
]


def catalog_for(config: CatalogConfig) -> Catalog:
    """The catalog a catalogs-file entry names, opened by its registered type."""
    return type_of(config).open(config)


def looks_like_path(table: str) -> bool:
    return "/" in table or "://" in table or table.startswith("file:")


def resolve_table(table: str, catalog: str | None, catalogs: CatalogsConfig) -> tuple[Catalog, str]:
    """A ``--table`` value and optional ``--catalog`` -> the catalog to use and the identifier in it."""
    if looks_like_path(table):
        return PathCatalog(), table.rstrip("/")
    return catalog_for(catalogs.get(catalog)), table


def delta_source(source: str, catalogs: CatalogsConfig) -> str:
    """A Delta table's location: ``source`` itself when it is a path or URI, else the location of
    ``<catalog>.<db>.<table>``, a Delta table registered in that catalog (a metastore)."""
    parts = source.split(".")
    if looks_like_path(source) or len(parts) != 3 or parts[0] not in catalogs.catalogs:
        return source
    return catalog_for(catalogs.get(parts[0])).delta_table_location(".".join(parts[1:]))
