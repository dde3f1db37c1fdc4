"""Deciding a commit whose answer was lost from the pointer as it is now (catalog.base.landed):
ours current, or named in the log of a later writer's metadata, landed; another writer's state
without ours did not; anything that cannot be read, or a log cut at its limit, is unknown."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tablekeeper.catalog.base import landed, write_new_metadata
from tablekeeper.iceberg.metadata import MetadataLogEntry, TableMetadata
from tablekeeper.iceberg.types import LONG, NestedField, Schema
from tablekeeper.iceberg.updates import new_table_metadata
from tablekeeper.io import FileIO

pytestmark = pytest.mark.unit

SCHEMA = Schema(0, (NestedField(1, "id", LONG, required=True),))


def later(tmp_path: Path, name: str, log: list[str], cap: int | None = None) -> str:
    """A later writer's metadata file whose log names ``log``."""
    meta: TableMetadata = new_table_metadata(schema=SCHEMA, location=str(tmp_path), timestamp_ms=1)
    props = dict(meta.properties)
    if cap is not None:
        props["write.metadata.previous-versions-max"] = str(cap)
    meta = replace(
        meta,
        properties=props,
        metadata_log=tuple(MetadataLogEntry(i, f) for i, f in enumerate(log)),
    )
    location = str(tmp_path / name)
    write_new_metadata(FileIO.for_location(location), location, meta)
    return location


def test_a_lost_answer_is_decided_by_the_pointer_and_its_log(tmp_path: Path) -> None:
    io = FileIO.for_location(str(tmp_path))
    old, ours = str(tmp_path / "00001.metadata.json"), str(tmp_path / "00002.metadata.json")
    assert landed(io, ours, ours, old) is True
    assert landed(io, None, ours, old) is None  # no pointer, or no answer
    assert landed(io, old, ours, old) is None  # the server may still be applying ours
    on_top = later(tmp_path, "00003-a.metadata.json", [old, ours])
    assert landed(io, on_top, ours, old) is True  # another writer committed on top of ours
    beside = later(tmp_path, "00002-b.metadata.json", [old])
    assert landed(io, beside, ours, old) is False  # another writer won from the old state
    assert landed(io, str(tmp_path / "missing.metadata.json"), ours, old) is None
    full = later(tmp_path, "00009-c.metadata.json", [f"{tmp_path}/{i}.json" for i in range(3)], cap=3)
    assert landed(io, full, ours, old) is None  # ours may have dropped out of a full log
