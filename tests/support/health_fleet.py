"""A small catalog for health's predictions and report, made without a JVM: a sqlite catalog
``tk`` with a ledger block, and three tables written by tablekeeper's own committer.

- ``db.orders``: snapshots past its own ``history.expire`` rules (expire-snapshots is recommended,
  and runs on the driver);
- ``db.events``: six small data files (compact) and two position delete files (delete pressure);
- ``db.fresh``: one file, nothing to do.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.cli import main
from tablekeeper.commit import Committer, SnapshotChange
from tablekeeper.iceberg.content import POSITION_DELETES, DataFile
from tablekeeper.iceberg.types import LONG, STRING, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata
from tests.support.iceberg_writer import write_rows

CATALOG = "tk"
SCHEMA = Schema(0, (NestedField(1, "id", LONG, True), NestedField(2, "s", STRING)))
EXPIRE_EVERYTHING_OLD = {
    "history.expire.max-snapshot-age-ms": "1",
    "history.expire.min-snapshots-to-keep": "1",
}


def write_conf(root: Path, ledger: str = f"ledger: {{catalog: {CATALOG}}}") -> Path:
    conf = root / "catalogs.yaml"
    conf.write_text(
        f"default: {CATALOG}\ncatalogs:\n  {CATALOG}:\n    type: sql\n"
        f"    uri: sqlite:///${{warehouse}}/catalog.db\n    warehouse: ${{warehouse}}/sql\n{ledger}\n"
    )
    return conf


def sql_catalog(root: Path) -> SqlCatalog:
    return SqlCatalog(CATALOG, f"sqlite:///{root}/catalog.db", str(root / "sql"))


def create(root: Path, ident: str, properties: dict[str, str] | None = None) -> None:
    catalog = sql_catalog(root)
    meta = new_table_metadata(
        schema=SCHEMA,
        location=catalog.default_table_location(ident),
        timestamp_ms=int(time.time() * 1000) - 60_000,
        properties=properties or {},
    )
    catalog.create_table(ident, meta)


def append(root: Path, ident: str, count: int = 1) -> list[DataFile]:
    """``count`` appends of one small file each."""
    catalog = sql_catalog(root)
    added: list[DataFile] = []
    for i in range(count):
        files = write_rows(catalog.load_table(ident).metadata, [{"id": i, "s": f"r{i}" * 50}])
        Committer(catalog, ident).commit_snapshot(SnapshotChange("append", added_files=tuple(files)))
        added += files
    return added


def add_position_deletes(root: Path, ident: str, targets: list[DataFile]) -> None:
    """Position delete files naming ``targets`` (metadata only: health reads manifests)."""
    catalog = sql_catalog(root)
    location = catalog.load_table(ident).metadata.location
    deletes = tuple(
        DataFile(
            POSITION_DELETES,
            f"{location}/data/deletes-{i}.parquet",
            "PARQUET",
            (),
            3,
            700,
            referenced_data_file=t.file_path,
        )
        for i, t in enumerate(targets)
    )
    Committer(catalog, ident).commit_snapshot(SnapshotChange("overwrite", added_files=deletes))


def build(root: Path) -> Path:
    """The three tables; returns the catalog file (its ledger block names ``tk``)."""
    conf = write_conf(root)
    create(root, "db.orders", EXPIRE_EVERYTHING_OLD)
    append(root, "db.orders", 3)
    create(root, "db.events")
    files = append(root, "db.events", 6)
    add_position_deletes(root, "db.events", files[:2])
    create(root, "db.fresh")
    append(root, "db.fresh", 1)
    return conf


def cli(conf: Path, root: Path, *argv: str) -> dict[str, Any]:
    """One command; its printed JSON (the last line of stdout) after a zero exit."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--conf-file", str(conf), "--warehouse", str(root)])
    assert code == 0, out.getvalue()[-2000:]
    body: dict[str, Any] = json.loads(out.getvalue().strip().splitlines()[-1])
    return body
