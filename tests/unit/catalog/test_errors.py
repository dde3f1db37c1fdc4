"""Bad input through the catalogs: every failure is a typed error with a one-line message naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tablekeeper.catalog import Catalog, FileSystemCatalog, LoadedTable, PathCatalog, SqlCatalog
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.errors import (
    CommitFailed,
    CorruptMetadataError,
    NotATableError,
    TablekeeperError,
    UnsupportedFeatureError,
)
from tablekeeper.iceberg.content import DATA, DataFile
from tablekeeper.iceberg.metadata import TableMetadata, table_metadata_to_bytes
from tablekeeper.iceberg.types import LONG, STRING, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata, set_properties
from tablekeeper.tables.iceberg import live_files, load_manifests

IDENT = "db.events"
T0 = 1_700_000_000_000
SCHEMA = Schema(0, (NestedField(1, "id", LONG, required=True), NestedField(2, "name", STRING)))
KINDS = ["filesystem", "sql"]


def make_catalog(kind: str, root: Path) -> Catalog:
    if kind == "filesystem":
        return FileSystemCatalog("fs", str(root / "warehouse"))
    return SqlCatalog("tk", f"sqlite:///{root}/c.db", str(root / "warehouse"))


def create(catalog: Catalog, format_version: int = 2) -> LoadedTable:
    meta = new_table_metadata(
        schema=SCHEMA,
        location=catalog.default_table_location(IDENT),
        timestamp_ms=T0,
        format_version=format_version,
    )
    return catalog.create_table(IDENT, meta)


def append(catalog: Catalog, name: str = "a") -> LoadedTable:
    location = catalog.default_table_location(IDENT)
    f = DataFile(DATA, f"{location}/data/{name}.parquet", "PARQUET", (), 10, 1000)
    return Committer(catalog, IDENT).commit_snapshot(SnapshotChange("append", added_files=(f,))).table


def assert_one_line(err: TablekeeperError) -> str:
    message = str(err)
    assert message
    assert "\n" not in message
    assert "Traceback" not in message
    return message


def metadata_files(table: LoadedTable) -> list[str]:
    return sorted(p.name for p in (Path(table.metadata.location) / "metadata").iterdir())


@pytest.fixture(params=KINDS)
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Catalog:
    kind: str = request.param
    return make_catalog(kind, tmp_path)


# -- (a) truncated, (b) corrupt, (c) unsupported metadata files -------------------------------


def test_truncated_metadata_json(catalog: Catalog) -> None:
    create(catalog)
    table = append(catalog)
    path = Path(table.metadata_location)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptMetadataError) as info:
        catalog.load_table(IDENT)
    message = assert_one_line(info.value)
    assert message.startswith(f"{table.metadata_location} is not valid JSON (line 1 col ")
    assert message.endswith("the file is truncated or corrupt")


def test_empty_metadata_file(catalog: Catalog) -> None:
    table = create(catalog)
    Path(table.metadata_location).write_bytes(b"")
    with pytest.raises(CorruptMetadataError) as info:
        catalog.load_table(IDENT)
    message = assert_one_line(info.value)
    assert message.startswith(f"{table.metadata_location} is not valid JSON")


def test_text_garbage_metadata(catalog: Catalog) -> None:
    table = create(catalog)
    Path(table.metadata_location).write_text("<html>503 Service Unavailable</html>\n<p>retry</p>\n")
    with pytest.raises(CorruptMetadataError) as info:
        catalog.load_table(IDENT)
    message = assert_one_line(info.value)
    assert message.startswith(f"{table.metadata_location} is not valid JSON (line 1 col 1: Expecting value)")


def test_binary_garbage_metadata(catalog: Catalog) -> None:
    table = create(catalog)
    Path(table.metadata_location).write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe garbage")
    with pytest.raises(CorruptMetadataError) as info:
        catalog.load_table(IDENT)
    assert "is not UTF-8 JSON" in assert_one_line(info.value)


def test_corrupt_gzip_metadata(catalog: Catalog) -> None:
    table = create(catalog)
    Path(table.metadata_location).write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xffnot deflate data")
    with pytest.raises(CorruptMetadataError) as info:
        catalog.load_table(IDENT)
    assert "is gzip that is truncated or corrupt" in assert_one_line(info.value)


def test_truncated_gzip_metadata(catalog: Catalog) -> None:
    table = create(catalog)
    meta = set_properties(table.metadata, {"write.metadata.compression-codec": "gzip"}, timestamp_ms=T0 + 1)
    gz = catalog.commit(table, meta)
    data = Path(gz.metadata_location).read_bytes()
    assert data[:2] == b"\x1f\x8b"
    Path(gz.metadata_location).write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptMetadataError) as info:
        catalog.load_table(IDENT)
    assert "is gzip that is truncated or corrupt" in assert_one_line(info.value)


def test_json_that_is_not_table_metadata(catalog: Catalog) -> None:
    table = create(catalog)
    Path(table.metadata_location).write_text(json.dumps({"hello": "world"}))
    with pytest.raises(CorruptMetadataError) as info:
        catalog.load_table(IDENT)
    message = assert_one_line(info.value)
    assert message == f"{table.metadata_location}: table metadata is missing required key 'format-version'"


@pytest.mark.parametrize(
    "content",
    [b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe garbage", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"],
    ids=["binary", "broken-gzip"],
)
def test_undecodable_metadata_message_names_the_file(tmp_path: Path, content: bytes) -> None:
    # Every other metadata parse error names the file; a table has many, the user needs to know which.
    catalog = make_catalog("filesystem", tmp_path)
    table = create(catalog)
    Path(table.metadata_location).write_bytes(content)
    with pytest.raises(CorruptMetadataError) as info:
        catalog.load_table(IDENT)
    assert table.metadata_location in assert_one_line(info.value)


def test_format_version_4(catalog: Catalog) -> None:
    table = create(catalog, format_version=3)
    path = Path(table.metadata_location)
    obj = json.loads(path.read_text())
    obj["format-version"] = 4
    path.write_text(json.dumps(obj))
    with pytest.raises(UnsupportedFeatureError) as info:
        catalog.load_table(IDENT)
    message = assert_one_line(info.value)
    assert "format version 4" in message
    assert "not supported" in message


def test_format_version_4_refuses_a_commit(catalog: Catalog) -> None:
    table = create(catalog, format_version=3)
    obj = json.loads(Path(table.metadata_location).read_text())
    obj["format-version"] = 4
    Path(table.metadata_location).write_text(json.dumps(obj))
    before = metadata_files(table)
    with pytest.raises(UnsupportedFeatureError, match="format version 4"):
        append(catalog)
    assert metadata_files(table) == before


# -- (d) a missing manifest or manifest list --------------------------------------------------


def test_missing_manifest(catalog: Catalog) -> None:
    create(catalog)
    append(catalog)
    loaded = catalog.load_table(IDENT)
    snapshot = loaded.metadata.current_snapshot()
    (manifest,) = load_manifests(loaded.io, snapshot)
    Path(manifest.manifest_path).unlink()
    with pytest.raises(CorruptMetadataError) as info:
        live_files(loaded.io, loaded.metadata, snapshot)
    message = assert_one_line(info.value)
    assert message == f"manifest {manifest.manifest_path} is missing: the table's metadata references it"


def test_missing_manifest_list(catalog: Catalog) -> None:
    create(catalog)
    append(catalog)
    loaded = catalog.load_table(IDENT)
    snapshot = loaded.metadata.current_snapshot()
    assert snapshot is not None and snapshot.manifest_list is not None
    Path(snapshot.manifest_list).unlink()
    with pytest.raises(CorruptMetadataError) as info:
        live_files(loaded.io, loaded.metadata, snapshot)
    message = assert_one_line(info.value)
    assert message == f"manifest list {snapshot.manifest_list} is missing: the table's metadata references it"


def test_truncated_manifest(catalog: Catalog) -> None:
    create(catalog)
    append(catalog)
    loaded = catalog.load_table(IDENT)
    snapshot = loaded.metadata.current_snapshot()
    (manifest,) = load_manifests(loaded.io, snapshot)
    path = Path(manifest.manifest_path)
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(CorruptMetadataError) as info:
        live_files(loaded.io, loaded.metadata, snapshot)
    assert f"manifest {manifest.manifest_path}" in assert_one_line(info.value)


def test_live_files_after_append(catalog: Catalog) -> None:
    create(catalog)
    append(catalog, "a")
    append(catalog, "b")
    loaded = catalog.load_table(IDENT)
    files = live_files(loaded.io, loaded.metadata, loaded.metadata.current_snapshot())
    location = catalog.default_table_location(IDENT)
    assert sorted(e.data_file.file_path for e in files.data) == [
        f"{location}/data/a.parquet",
        f"{location}/data/b.parquet",
    ]
    assert files.deletes == ()


# -- (e) wrong paths, (f) directories that are not tables -------------------------------------


def test_nonexistent_path() -> None:
    with pytest.raises(NotATableError) as info:
        PathCatalog().load_table("/nonexistent/x")
    message = assert_one_line(info.value)
    assert message.startswith("/nonexistent/x is not an Iceberg table")
    assert "check the path" in message


def test_nonexistent_path_under_tmp(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "table"
    with pytest.raises(NotATableError) as info:
        PathCatalog().load_table(str(missing))
    assert assert_one_line(info.value).startswith(f"{missing} is not an Iceberg table")


def test_path_naming_a_regular_file(tmp_path: Path) -> None:
    # E.g. the user passed a metadata.json instead of the table directory.
    target = tmp_path / "v3.metadata.json"
    target.write_text("{}")
    with pytest.raises(NotATableError) as info:
        PathCatalog().load_table(str(target))
    assert str(target) in assert_one_line(info.value)


def test_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(NotATableError) as info:
        PathCatalog().load_table(str(tmp_path))
    assert assert_one_line(info.value).startswith(f"{tmp_path} is not an Iceberg table")


def test_directory_with_random_files(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("hello")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "part-0.parquet").write_bytes(b"PAR1")
    (tmp_path / "metadata").mkdir()
    (tmp_path / "metadata" / "notes.txt").write_text("not metadata")
    (tmp_path / "metadata" / "snap-1-1-abc.avro").write_bytes(b"Obj\x01")
    with pytest.raises(NotATableError) as info:
        PathCatalog().load_table(str(tmp_path))
    assert assert_one_line(info.value).startswith(f"{tmp_path} is not an Iceberg table")


def test_directory_with_only_a_version_hint(tmp_path: Path) -> None:
    (tmp_path / "metadata").mkdir()
    (tmp_path / "metadata" / "version-hint.text").write_text("3")
    with pytest.raises(NotATableError) as info:
        PathCatalog().load_table(str(tmp_path))
    assert assert_one_line(info.value).startswith(f"{tmp_path} is not an Iceberg table")


def test_delta_table_directory_is_not_an_iceberg_table(tmp_path: Path) -> None:
    log = tmp_path / "_delta_log"
    log.mkdir()
    (log / "00000000000000000000.json").write_text(
        '{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\n'
    )
    with pytest.raises(NotATableError):
        PathCatalog().load_table(str(tmp_path))


def test_filesystem_catalog_unknown_table(tmp_path: Path) -> None:
    catalog = make_catalog("filesystem", tmp_path)
    with pytest.raises(NotATableError) as info:
        catalog.load_table("db.missing")
    message = assert_one_line(info.value)
    assert message.startswith("table db.missing not found in catalog fs")
    assert catalog.default_table_location("db.missing") in message
    assert not catalog.table_exists("db.missing")


def test_path_catalog_loads_a_filesystem_table(tmp_path: Path) -> None:
    catalog = make_catalog("filesystem", tmp_path)
    create(catalog)
    committed = append(catalog)
    loaded = PathCatalog().load_table(catalog.default_table_location(IDENT))
    assert loaded.metadata_location == committed.metadata_location
    assert loaded.metadata == committed.metadata


# -- (g) unknown tables, (h) the current metadata file deleted --------------------------------


def test_sql_catalog_unknown_table(tmp_path: Path) -> None:
    catalog = make_catalog("sql", tmp_path)
    create(catalog)
    with pytest.raises(NotATableError) as info:
        catalog.load_table("db.missing")
    message = assert_one_line(info.value)
    assert message.startswith("table db.missing not found in catalog tk")
    assert not catalog.table_exists("db.missing")
    with pytest.raises(NotATableError):
        catalog.require("db.missing")


def test_sql_catalog_unknown_namespace(tmp_path: Path) -> None:
    catalog = make_catalog("sql", tmp_path)
    with pytest.raises(NotATableError, match=r"table other\.events not found in catalog tk"):
        catalog.load_table("other.events")


def test_sql_catalog_row_pointing_at_deleted_metadata(tmp_path: Path) -> None:
    catalog = make_catalog("sql", tmp_path)
    create(catalog)
    table = append(catalog)
    Path(table.metadata_location).unlink()
    with pytest.raises(CorruptMetadataError) as info:
        catalog.load_table(IDENT)
    message = assert_one_line(info.value)
    assert (
        message == f"metadata file {table.metadata_location} is missing: the catalog points at a deleted file"
    )


def test_filesystem_catalog_current_version_deleted(tmp_path: Path) -> None:
    # version-hint.text says 3 but v3.metadata.json is gone. Java's HadoopTableOperations.refresh
    # fails ("Metadata file for version 3 is missing"); silently loading v2 would roll the table
    # back, and a maintenance job would then treat v3's files as unreferenced.
    catalog = make_catalog("filesystem", tmp_path)
    create(catalog)
    append(catalog, "a")
    table = append(catalog, "b")
    assert table.metadata_location.endswith("/v3.metadata.json")
    Path(table.metadata_location).unlink()
    with pytest.raises(CorruptMetadataError) as info:
        catalog.load_table(IDENT)
    message = assert_one_line(info.value)
    assert "missing" in message
    assert "v3.metadata.json" in message or "version 3" in message


def test_filesystem_catalog_hint_lagging_behind_is_fine(tmp_path: Path) -> None:
    catalog = make_catalog("filesystem", tmp_path)
    create(catalog)
    table = append(catalog)
    hint = Path(table.metadata.location) / "metadata" / "version-hint.text"
    hint.write_text("1")
    assert catalog.load_table(IDENT).metadata_location == table.metadata_location
    hint.unlink()
    assert catalog.load_table(IDENT).metadata_location == table.metadata_location
    hint.write_text("garbage")
    assert catalog.load_table(IDENT).metadata_location == table.metadata_location


# -- stale commits ----------------------------------------------------------------------------


def property_change(meta: TableMetadata, key: str) -> TableMetadata:
    return set_properties(meta, {key: "1"}, timestamp_ms=T0 + 1000)


def test_stale_commit_fails(catalog: Catalog) -> None:
    create(catalog)
    a = catalog.load_table(IDENT)
    b = catalog.load_table(IDENT)
    won = catalog.commit(b, property_change(b.metadata, "b"))
    files_after_b = metadata_files(won)
    with pytest.raises(CommitFailed) as info:
        catalog.commit(a, property_change(a.metadata, "a"))
    message = assert_one_line(info.value)
    assert "another writer" in message
    current = catalog.load_table(IDENT)
    assert current.metadata_location == won.metadata_location
    assert current.metadata.properties.get("b") == "1"
    assert "a" not in current.metadata.properties
    # The loser leaves nothing behind: no extra metadata file, no temporary file.
    assert metadata_files(current) == files_after_b


def test_stale_commit_message_filesystem(tmp_path: Path) -> None:
    catalog = make_catalog("filesystem", tmp_path)
    create(catalog)
    a = catalog.load_table(IDENT)
    catalog.commit(a, property_change(a.metadata, "b"))
    with pytest.raises(CommitFailed) as info:
        catalog.commit(a, property_change(a.metadata, "a"))
    location = catalog.default_table_location(IDENT)
    assert str(info.value) == f"version 2 of {location} was committed by another writer"


def test_stale_commit_message_and_cleanup_sql(tmp_path: Path) -> None:
    catalog = make_catalog("sql", tmp_path)
    created = create(catalog)
    a = catalog.load_table(IDENT)
    won = catalog.commit(a, property_change(a.metadata, "b"))
    with pytest.raises(CommitFailed) as info:
        catalog.commit(a, property_change(a.metadata, "a"))
    assert str(info.value) == f"{IDENT} was changed by another writer since it was loaded"
    names = metadata_files(won)
    assert names == sorted([Path(created.metadata_location).name, Path(won.metadata_location).name])
    assert all(name.endswith(".metadata.json") for name in names)


def test_commit_on_current_base_succeeds(catalog: Catalog) -> None:
    create(catalog)
    base = catalog.load_table(IDENT)
    new = catalog.commit(base, property_change(base.metadata, "k"))
    loaded = catalog.load_table(IDENT)
    assert loaded.metadata_location == new.metadata_location
    assert loaded.metadata.properties["k"] == "1"
    assert Path(new.metadata_location).read_bytes() == table_metadata_to_bytes(new.metadata)
