"""A catalog type and a storage scheme from outside the package are each one class plus one
registration: named in the catalogs file (``impl:``, ``io-impl.<scheme>:``) or registered by code,
they open tables, give Spark their settings and run a job, touching no module of tablekeeper (no
Spark)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from tablekeeper.catalog import (
    Catalog,
    CatalogType,
    LoadedTable,
    catalog_for,
    delta_source,
    register_catalog_type,
)
from tablekeeper.catalog.base import (
    TableIdentifier,
    new_metadata_location,
    read_metadata,
    write_new_metadata,
)
from tablekeeper.catalog.config import CatalogConfig, parse_catalogs
from tablekeeper.catalog.spark_conf import iceberg_catalog_conf
from tablekeeper.cli import main
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.errors import CommitFailed, ConfigError, NotATableError, UnsupportedFeatureError
from tablekeeper.iceberg.metadata import TableMetadata
from tablekeeper.iceberg.updates import new_table_metadata
from tablekeeper.io import FileIO, storage
from tablekeeper.io.storage import configure_storage, storage_subset
from tablekeeper.io.stores import Store, hadoop_settings
from tests.support.iceberg_writer import write_rows
from tests.unit.files.test_journal import SCHEMA


class JsonCatalog(Catalog):
    """Every table's metadata pointer in one JSON file; a commit swaps it under an exclusive lock
    file (created with O_EXCL), checking that the pointer is still the one the commit started from."""

    def __init__(self, name: str, warehouse: str, pointers: str) -> None:
        self.name = name
        self.warehouse = warehouse.rstrip("/")
        self.pointers = Path(pointers)

    def _read(self) -> dict[str, str]:
        return json.loads(self.pointers.read_text()) if self.pointers.exists() else {}

    def _swap(self, identifier: str, expected: str | None, new: str) -> None:
        lock = self.pointers.with_suffix(".lock")
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        try:
            pointers = self._read()
            if pointers.get(identifier) != expected:
                raise CommitFailed(f"{identifier} changed meanwhile")
            pointers[identifier] = new
            self.pointers.write_text(json.dumps(pointers))
        finally:
            os.close(fd)
            lock.unlink()

    def load_table(self, identifier: str) -> LoadedTable:
        location = self._read().get(identifier)
        if location is None:
            raise NotATableError(f"no table {identifier} in {self.name}")
        io = FileIO.for_location(location)
        return LoadedTable(identifier, location, read_metadata(io, location), io)

    def commit(self, base: LoadedTable, new_metadata: TableMetadata) -> LoadedTable:
        location = new_metadata_location(new_metadata.location, 1 + len(new_metadata.metadata_log))
        write_new_metadata(base.io, location, new_metadata)
        self._swap(base.identifier, base.metadata_location, location)
        return LoadedTable(base.identifier, location, new_metadata, base.io)

    def create_table(self, identifier: str, metadata: TableMetadata) -> LoadedTable:
        location = new_metadata_location(metadata.location, 0)
        io = FileIO.for_location(location)
        write_new_metadata(io, location, metadata)
        self._swap(identifier, None, location)
        return LoadedTable(identifier, location, metadata, io)

    def table_exists(self, identifier: str) -> bool:
        return identifier in self._read()

    def default_table_location(self, identifier: str) -> str:
        ident = TableIdentifier.parse(identifier)
        return f"{self.warehouse}/{'/'.join(ident.namespace)}/{ident.name}"


def _open(config: CatalogConfig) -> Catalog:
    return JsonCatalog(config.name, config.warehouse, config.properties["pointers"])


# What a user's module holds: the class above and this one line (named by impl: in the file).
TOY = CatalogType("json-pointers", _open, lambda c: {"catalog-impl": "com.example.JsonCatalog"})


def _open_toy_store(authority: str, settings: Mapping[str, str]) -> pafs.FileSystem:
    """toy://<bucket>/<key>: a directory per bucket under the ``toy.root`` setting."""
    return pafs.SubTreeFileSystem(settings["toy.root"], pafs.LocalFileSystem())


# A store of the user's: the toy:// scheme, its one setting, and what Spark's Hadoop layer needs.
TOY_STORE = Store(
    "toy",
    frozenset({"toy"}),
    _open_toy_store,
    prefixes=("toy.",),
    directories=True,  # a directory tree underneath: parents are made
    hadoop=lambda settings: {"fs.toy.impl": "com.example.ToyFileSystem"},
)


@pytest.fixture(autouse=True)
def _process_storage_settings() -> Iterator[None]:
    """A job sets the process's storage settings from its catalog: later tests start unset."""
    saved = dict(storage._state)
    yield
    storage._state.clear()
    storage._state.update(saved)


def conf_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "catalogs.yaml"
    path.write_text(f"default: toy\ncatalogs:\n  toy:\n{body}")
    return path


def toy_file(tmp_path: Path) -> Path:
    """The toy catalog, its tables on the toy store (both named by import path)."""
    (tmp_path / "toy-root").mkdir()
    return conf_file(
        tmp_path,
        f"    impl: {__name__}:TOY\n    warehouse: toy://lake/wh\n    pointers: {tmp_path}/pointers.json\n"
        f"    io-impl.toy: {__name__}:TOY_STORE\n    toy.root: {tmp_path}/toy-root\n",
    )


def test_a_catalog_type_and_a_store_named_in_the_catalogs_file_run_a_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = toy_file(tmp_path)
    config = parse_catalogs(path.read_text(), tmp_path).get("toy")
    assert config.type == "json-pointers" and "impl" not in config.properties
    # The store's settings travel with S3's (to executors too): its name and its own keys.
    assert storage_subset(config.properties) == {
        "io-impl.toy": f"{__name__}:TOY_STORE",
        "toy.root": f"{tmp_path}/toy-root",
    }
    configure_storage(config.storage)  # as a job does with its catalog's
    catalog = catalog_for(config)
    assert isinstance(catalog, JsonCatalog)
    io = FileIO.for_location("toy://lake/x")
    meta = new_table_metadata(
        schema=SCHEMA, location=catalog.default_table_location("db.t"), timestamp_ms=1, format_version=2
    )
    assert meta.location == "toy://lake/wh/db/t"
    catalog.create_table("db.t", meta)
    for i in range(3):
        files = write_rows(catalog.require("db.t").metadata, [{"id": i, "s": f"r{i}"}])
        Committer(catalog, "db.t").commit_snapshot(SnapshotChange("append", added_files=tuple(files)))
    before = catalog.require("db.t")
    assert len(before.metadata.snapshots) == 3 and before.metadata_location.startswith("toy://lake/wh/")
    lists = [s.manifest_list for s in before.metadata.snapshots]
    assert all(io.exists(m) for m in lists)
    assert (tmp_path / "toy-root" / "lake" / "wh" / "db" / "t" / "metadata").is_dir()  # on the store
    argv = ["expire-snapshots", "--table", "db.t", "--retain-last", "1", "--older-than", "0s"]
    code = main([*argv, "--engine", "driver", "--conf-file", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["status"] == "ok" and result["metrics"]["expired_snapshots_count"] == 2
    after = catalog.require("db.t")
    assert len(after.metadata.snapshots) == 1  # committed through the toy catalog's own swap
    assert json.loads((tmp_path / "pointers.json").read_text())["db.t"] == after.metadata_location
    # The expired snapshots' manifest lists were deleted through the toy store; the kept one stays.
    kept = after.metadata.snapshots[0].manifest_list
    assert [io.exists(m) for m in lists] == [m == kept for m in lists]
    # Iceberg's Spark catalog gets the type's own settings, then the entry's other properties.
    spark = iceberg_catalog_conf(config)
    assert spark["spark.sql.catalog.toy.catalog-impl"] == "com.example.JsonCatalog"
    assert spark["spark.sql.catalog.toy.warehouse"] == "toy://lake/wh"
    assert spark["spark.sql.catalog.toy.pointers"] == f"{tmp_path}/pointers.json"
    assert hadoop_settings(config.storage) == {"fs.toy.impl": "com.example.ToyFileSystem"}


def test_a_catalog_type_registered_by_code_is_a_type_name(tmp_path: Path) -> None:
    register_catalog_type(CatalogType("json-registered", _open, lambda c: {}, uri_example=None))
    path = conf_file(
        tmp_path,
        f"    type: json-registered\n    warehouse: {tmp_path}/wh\n    pointers: {tmp_path}/p.json\n",
    )
    assert isinstance(catalog_for(parse_catalogs(path.read_text(), tmp_path).get("toy")), JsonCatalog)


def test_an_unknown_type_names_every_registered_one(tmp_path: Path) -> None:
    register_catalog_type(CatalogType("json-listed", _open, lambda c: {}))
    path = conf_file(tmp_path, "    type: nessie\n    warehouse: /w\n")
    with pytest.raises(
        ConfigError, match=r"has type 'nessie'; use one of sql, filesystem, rest, glue, hive.*json-listed"
    ):
        parse_catalogs(path.read_text(), tmp_path)


@pytest.mark.parametrize(
    ("impl", "said"),
    [
        ("no_such_module_anywhere:X", "cannot be imported"),
        (f"{__name__}:NOTHING", "has no 'NOTHING'"),
        (f"{__name__}:conf_file", "is a function, not a CatalogType"),
        ("bare", "is not 'package.module:NAME'"),
    ],
)
def test_a_bad_impl_fails_only_the_jobs_that_use_its_catalog(tmp_path: Path, impl: str, said: str) -> None:
    path = tmp_path / "catalogs.yaml"
    path.write_text(
        f"default: fs\ncatalogs:\n  fs: {{type: filesystem, warehouse: {tmp_path}}}\n"
        f"  toy: {{impl: '{impl}', warehouse: /w}}\n"
    )
    catalogs = parse_catalogs(path.read_text(), tmp_path)
    assert catalogs.get("fs").type == "filesystem"  # the rest of the file is usable
    with pytest.raises(ConfigError, match=said):
        catalogs.get("toy")


@pytest.mark.parametrize(
    ("impl", "said"),
    [
        ("no_such_module_anywhere:X", "cannot be imported"),
        (f"{__name__}:TOY", "is a CatalogType, not a Store"),
        (f"{__name__}:TOY_STORE", r"names a store for \['toy'\]"),
        ("bare", "is not 'package.module:NAME'"),
    ],
)
def test_a_bad_store_setting_is_refused_by_name(impl: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        FileIO.for_location("toy2://b/x", {"io-impl.toy2": impl})


def test_a_delta_source_is_a_path_or_a_table_a_catalog_registered(tmp_path: Path) -> None:
    catalogs = parse_catalogs(
        f"catalogs:\n  fs:\n    type: filesystem\n    warehouse: {tmp_path}\n", tmp_path
    )
    for path in ("s3://bucket/db.events", "/lake/db.events", "other.db.events", "db.events"):
        assert delta_source(path, catalogs) == path  # paths, and names of no catalog, stay as given
    with pytest.raises(UnsupportedFeatureError, match="catalog fs registers no Delta tables by name"):
        delta_source("fs.db.events", catalogs)
