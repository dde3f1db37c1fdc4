"""The spliced EXISTING records of a manifest rewrite equal what the model path encodes, byte for
byte, for every inheritance case; other layouts go through the model path."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest

from tablekeeper.errors import CorruptMetadataError
from tablekeeper.iceberg.content import ADDED, DELETED, EXISTING, MANIFEST_DELETES, ManifestEntry
from tablekeeper.iceberg.manifest import entry_encoder, read_manifest
from tablekeeper.iceberg.manifest_rewrite import as_existing
from tablekeeper.iceberg.manifest_splice import _compile, existing_entries
from tablekeeper.iceberg.partitioning import UNPARTITIONED
from tests.unit.iceberg.test_manifest import (
    OLD_SNAPSHOT_ID,
    PARTITIONS,
    SCHEMA,
    SPEC,
    committed,
    data_file,
    dv,
    equality_delete,
    position_delete,
    write,
)


def _model(data: bytes, manifest: Any, version: int, spec: Any = SPEC) -> list[Any]:
    encode = entry_encoder(version, spec, SCHEMA, manifest.content)
    ptype = spec.partition_type(SCHEMA)
    return [encode(as_existing(e)) for e in read_manifest(data, manifest, ptype) if e.is_live]


def _spliced(data: bytes, manifest: Any, version: int, spec: Any = SPEC) -> list[Any]:
    return list(existing_entries(data, manifest, format_version=version, spec=spec, schema=SCHEMA))


DATA_ENTRIES = [
    ManifestEntry(ADDED, None, data_file("a", PARTITIONS[0], records=10)),
    ManifestEntry(DELETED, OLD_SNAPSHOT_ID, data_file("b", PARTITIONS[0], records=5), 1, 1),
    ManifestEntry(EXISTING, OLD_SNAPSHOT_ID, data_file("c", PARTITIONS[1], records=7), 2, 2),
    ManifestEntry(ADDED, None, data_file("d", PARTITIONS[2], records=4, first_row_id=3)),
    ManifestEntry(
        EXISTING, OLD_SNAPSHOT_ID, data_file("e", PARTITIONS[1], records=1, split_offsets=None), 2, None
    ),
]


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("first_row_id", [100, None])
def test_spliced_data_entries_equal_the_model_path(version: int, first_row_id: int | None) -> None:
    data, manifest = write(DATA_ENTRIES, version)
    manifest = committed(manifest, 5, first_row_id=first_row_id if version >= 3 else None)
    spliced = _spliced(data, manifest, version)
    assert _compile.cache_info().currsize > 0  # the scanner was generated: no model path here
    assert spliced == _model(data, manifest, version)
    assert len(spliced) == 4 and all(e.status == EXISTING for e in spliced)
    assert [e.sequence_number for e in spliced] == [5, 2, 5, 2]
    if version == 3 and first_row_id is not None:
        # Inherited ids are written explicitly: a reader of the new manifest gets the same ones.
        rows = [r["data_file"]["first_row_id"] for r in _records(version, spliced)]
        assert rows == [100, 110, 3, 117]


def test_spliced_delete_entries_and_unpartitioned_manifests() -> None:
    deletes = [
        ManifestEntry(ADDED, None, position_delete("p", PARTITIONS[0])),
        ManifestEntry(EXISTING, OLD_SNAPSHOT_ID, equality_delete("q", PARTITIONS[1]), 3, 3),
        ManifestEntry(ADDED, None, dv("r", PARTITIONS[2])),
    ]
    data, manifest = write(deletes, 3, content=MANIFEST_DELETES)
    manifest = committed(manifest, 7)
    assert _spliced(data, manifest, 3) == _model(data, manifest, 3)
    plain = [ManifestEntry(ADDED, None, data_file("u", (), spec_id=0))]
    data, manifest = write(plain, 2, spec=UNPARTITIONED)
    manifest = committed(manifest, 2)
    assert _spliced(data, manifest, 2, UNPARTITIONED) == _model(data, manifest, 2, UNPARTITIONED)


def test_a_v1_manifest_in_a_v2_rewrite_goes_through_the_models() -> None:
    data, manifest = write(DATA_ENTRIES[:3], 1)
    manifest = committed(manifest, 0)
    assert _spliced(data, manifest, 2) == _model(data, manifest, 2)


def _records(version: int, entries: list[Any]) -> list[dict[str, Any]]:
    from tablekeeper.iceberg.avro_schemas import manifest_entry_avro

    parsed = fastavro.parse_schema(manifest_entry_avro(version, SPEC.partition_type(SCHEMA)))
    return [fastavro.schemaless_reader(io.BytesIO(e.record), parsed, None) for e in entries]  # type: ignore[misc]


@pytest.mark.parametrize("cut", [200, 1])
def test_a_truncated_manifest_is_corrupt_metadata_not_a_crash(cut: int) -> None:
    entries = [ManifestEntry(ADDED, None, data_file(f"f{i}", PARTITIONS[i % 3])) for i in range(50)]
    data, manifest = write(entries, 2)
    with pytest.raises(CorruptMetadataError):
        _spliced(data[:-cut], committed(manifest, 3), 2)
