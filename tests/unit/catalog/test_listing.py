"""Catalogs list their namespaces and tables (health over a catalog); a filesystem catalog also
finds the Delta tables kept in a namespace's directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tablekeeper.catalog.base import Catalog
from tablekeeper.catalog.filesystem import FileSystemCatalog
from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.iceberg.types import LONG, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata

SCHEMA = Schema(0, (NestedField(1, "id", LONG),))


def _catalog(kind: str, root: Path) -> Catalog:
    if kind == "filesystem":
        return FileSystemCatalog("fs", str(root / "warehouse"))
    return SqlCatalog("tk", f"sqlite:///{root}/c.db", str(root / "warehouse"))


def _create(catalog: Catalog, identifier: str) -> None:
    meta = new_table_metadata(
        schema=SCHEMA, location=catalog.default_table_location(identifier), timestamp_ms=1_700_000_000_000
    )
    catalog.create_table(identifier, meta)


@pytest.mark.parametrize("kind", ["sql", "filesystem"])
def test_namespaces_and_tables_are_listed_sorted(kind: str, tmp_path: Path) -> None:
    catalog = _catalog(kind, tmp_path)
    for identifier in ("db.b", "db.a", "other.x"):
        _create(catalog, identifier)

    assert catalog.list_namespaces() == ["db", "other"]
    assert catalog.list_tables("db") == ["db.a", "db.b"]
    assert catalog.list_tables("other") == ["other.x"]
    assert catalog.list_tables("missing") == []


def test_a_filesystem_catalog_finds_delta_tables_beside_its_iceberg_tables(tmp_path: Path) -> None:
    catalog = FileSystemCatalog("fs", str(tmp_path / "warehouse"))
    _create(catalog, "db.iceberg")
    log = tmp_path / "warehouse" / "db" / "events" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("{}\n")
    (tmp_path / "warehouse" / "db" / "empty_dir").mkdir()
    top = tmp_path / "warehouse" / "loose" / "_delta_log"
    top.mkdir(parents=True)
    (top / "00000000000000000000.json").write_text("{}\n")

    assert catalog.list_tables("db") == ["db.iceberg"]
    assert catalog.delta_tables("db") == [str(tmp_path / "warehouse" / "db" / "events")]
    # A Delta table at the top of the warehouse is not a namespace.
    assert catalog.list_namespaces() == ["db"]
