"""Small Iceberg tables made by tablekeeper's own committer, without a JVM, for CLI tests: table
``db.t`` in a sqlite catalog ``c`` whose file (``catalogs.yaml``) points at the same root."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

CATALOGS_YAML = (
    "default: c\ncatalogs:\n  c:\n    type: sql\n"
    "    uri: sqlite:///${warehouse}/c.db\n    warehouse: ${warehouse}\n"
)


def sql_table(
    root: Path, files: Sequence[tuple[str, int, int]], *, format_version: int, write_files: bool = False
) -> tuple[Path, str]:
    """``db.t`` with one append per (file name under data/, record count, size in bytes); the
    files themselves are written too when ``write_files``. Returns the catalog file and the
    table location."""
    from tablekeeper.catalog.sql import SqlCatalog
    from tablekeeper.commit import Committer, SnapshotChange
    from tablekeeper.iceberg.content import DATA, DataFile
    from tablekeeper.iceberg.types import LONG, NestedField, Schema
    from tablekeeper.iceberg.updates import new_table_metadata

    conf = root / "catalogs.yaml"
    conf.write_text(CATALOGS_YAML)
    catalog = SqlCatalog("c", f"sqlite:///{root}/c.db", str(root))
    location = catalog.default_table_location("db.t")
    meta = new_table_metadata(
        schema=Schema(0, (NestedField(1, "id", LONG, True),)),
        location=location,
        timestamp_ms=int(time.time() * 1000),
        format_version=format_version,
    )
    catalog.create_table("db.t", meta)
    data = Path(location.removeprefix("file://")) / "data"
    for name, records, size in files:
        if write_files:
            data.mkdir(parents=True, exist_ok=True)
            (data / name).write_bytes(b"x" * size)
        f = DataFile(DATA, f"{location}/data/{name}", "PARQUET", (), records, size)
        Committer(catalog, "db.t").commit_snapshot(SnapshotChange("append", added_files=(f,)))
    return conf, location
