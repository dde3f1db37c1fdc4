"""A log whose checkpoint's metaData differs from what replaying the commits before it gives: the
checkpoint is the table's metadata at its version (the Delta protocol: readers start from the
newest checkpoint), and a commit after it may change it again. ``--history all`` and ``latest``
must give the newest version the same schema."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import CatalogsConfig
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tablekeeper.tables.delta import history, load_snapshot
from tests.unit.tables.test_delta import (
    PROTOCOL,
    add,
    checkpoint_row,
    metadata,
    write_checkpoint,
    write_commit,
)


def _schema(*names: str) -> str:
    fields = [{"name": n, "type": "long", "nullable": True, "metadata": {}} for n in names]
    return json.dumps({"type": "struct", "fields": fields})


def _checkpoint_metadata(schema: str, config: dict[str, str]) -> dict[str, object]:
    meta = dict(metadata(config, schemaString=schema)["metaData"])
    meta["format"] = {"provider": "parquet", "options": []}
    meta["configuration"] = list(config.items())
    meta.setdefault("name", None)
    meta.setdefault("description", None)
    return meta


def _files(root: Path, *names: str) -> None:
    for name in names:
        pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64())}), root / name)


def _table(root: Path, later_metadata: bool) -> Path:
    """Commits 0-2 replay to schema (id); checkpoint 2 says (id, extra) and an appendOnly table;
    commit 3 appends, and with ``later_metadata`` also sets the schema to (id, extra, more)."""
    root.mkdir()
    _files(root, "a.parquet", "b.parquet", "c.parquet", "d.parquet")
    stats = json.dumps({"numRecords": 2})
    write_commit(root, 0, [PROTOCOL, metadata(schemaString=_schema("id")), add("a.parquet", stats=stats)])
    write_commit(root, 1, [add("b.parquet", stats=stats)])
    write_commit(root, 2, [add("c.parquet", stats=stats)])
    cp_add = {
        "path": "",
        "partitionValues": [],
        "size": 100,
        "modificationTime": 1_700_000_000_000,
        "dataChange": False,
        "stats": stats,
    }
    rows = [
        checkpoint_row(protocol={"minReaderVersion": 1, "minWriterVersion": 2}),
        checkpoint_row(metaData=_checkpoint_metadata(_schema("id", "extra"), {"delta.appendOnly": "true"})),
        *(checkpoint_row(add={**cp_add, "path": p}) for p in ("a.parquet", "b.parquet", "c.parquet")),
    ]
    write_checkpoint(root / "_delta_log", 2, rows)
    commit3: list[dict[str, object]] = [add("d.parquet", stats=stats)]
    if later_metadata:
        commit3.append(metadata(schemaString=_schema("id", "extra", "more")))
    write_commit(root, 3, commit3)
    return root


def test_history_takes_each_checkpoints_metadata_at_its_version(tmp_path: Path) -> None:
    for later in (False, True):
        root = _table(tmp_path / f"delta-{later}", later)
        for snap in history(str(root)):
            direct = load_snapshot(str(root), version=snap.version)
            assert snap.metadata == direct.metadata, snap.version
            assert snap.protocol == direct.protocol, snap.version
        names = [f.name for f in load_snapshot(str(root)).schema.fields]
        assert names == (["id", "extra", "more"] if later else ["id", "extra"])


def test_latest_and_all_give_the_newest_version_one_schema(tmp_path: Path, catalogs: CatalogsConfig) -> None:
    catalog = catalog_for(catalogs.get("tk"))
    root = _table(tmp_path / "delta", later_metadata=False)
    schemas = {}
    for mode in ("latest", "all"):
        target = f"cpmeta.{mode}"
        run_convert(ConvertDeltaOptions(source=str(root), target=target, history=mode), catalog)
        meta = catalog.require(target).metadata
        schemas[mode] = [(f.id, f.name) for f in meta.schema().fields]
    assert schemas["all"] == schemas["latest"]
    assert [name for _, name in schemas["latest"]] == ["id", "extra"]
