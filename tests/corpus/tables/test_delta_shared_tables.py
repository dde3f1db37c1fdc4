"""The pure log reader on the shared delta-rs test tables (read-only, no Spark)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tablekeeper.delta.deletion_vectors import delta_dv_relative_path, read_delta_dv, read_delta_inline_dv
from tablekeeper.delta.snapshot import DeltaSnapshot
from tablekeeper.delta.values import leaf_stats, parse_partition_value, parse_stats
from tablekeeper.errors import CorruptMetadataError, NotATableError, TablekeeperError, UnsupportedFeatureError
from tablekeeper.tables.delta import load_snapshot
from tests.support.delta_tables import LOG_ONLY

DELTA_TABLES = Path(__file__).resolve().parents[3].parent / "shared" / "delta-tables" / "delta-rs"

# Tables the reader must refuse, and why.
REFUSED: dict[str, tuple[type[TablekeeperError], str]] = {
    # Reader version 5 (and an unknown reader feature "blahabl").
    "simple_table_features": (UnsupportedFeatureError, "reader version 5"),
    # Only 00000000000000000108.checkpoint.parquet: the commit file of version 108 is gone.
    "table-with-domain-metadata": (CorruptMetadataError, "no commit file for version 108"),
}
# Directories without a _delta_log (only a .gitignore).
NOT_TABLES = frozenset({"checkpoints_tombstones"})


def _table_dirs() -> list[str]:
    out = []
    for d in sorted(DELTA_TABLES.iterdir()):
        if (d / "_delta_log").is_dir():
            out.append(d.name)
        elif d.is_dir():
            out.extend(f"{d.name}/{c.name}" for c in sorted(d.iterdir()) if (c / "_delta_log").is_dir())
    return out


TABLES = _table_dirs()
READABLE = [t for t in TABLES if t not in REFUSED]


def load(name: str, *, version: int | None = None, timestamp_ms: int | None = None) -> DeltaSnapshot:
    return load_snapshot(str(DELTA_TABLES / name), version=version, timestamp_ms=timestamp_ms)


def test_the_table_lists_match_what_is_on_disk() -> None:
    assert len(TABLES) >= 45
    assert set(TABLES) >= LOG_ONLY
    assert set(REFUSED) <= set(TABLES)
    assert "golden/data-reader-array-primitives" in TABLES
    for name in NOT_TABLES:
        assert (DELTA_TABLES / name).is_dir()
        assert name not in TABLES


@pytest.mark.parametrize("name", sorted(NOT_TABLES))
def test_directory_without_log_is_not_a_table(name: str) -> None:
    with pytest.raises(NotATableError):
        load(name)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_tables(name: str) -> None:
    error, message = REFUSED[name]
    with pytest.raises(error, match=message):
        load(name)


@pytest.mark.parametrize("name", READABLE)
def test_every_live_file_exists_on_disk(name: str) -> None:
    snap = load(name)
    files = list(snap.add_files())
    paths = [f.absolute_path for f in files]
    assert len(set(paths)) == len(paths), "a path is live twice"
    if name in LOG_ONLY:
        assert files, "log-only tables are listed because they have live files"
        assert not any(Path(p).exists() for p in paths), f"{name} has data now: take it off LOG_ONLY"
        return
    missing = [p for p in paths if not Path(p).exists()]
    assert missing == []
    for p in paths:
        assert Path(p).is_relative_to(DELTA_TABLES / name)


@pytest.mark.parametrize("name", [t for t in READABLE if t not in LOG_ONLY])
def test_every_deletion_vector_resolves_and_decodes(name: str) -> None:
    snap = load(name)
    for f in snap.add_files():
        dv = f.deletion_vector
        if dv is None:
            continue
        if dv.storage_type == "i":
            bitmap, _ = read_delta_inline_dv(dv.path_or_inline_dv, dv.size_in_bytes, dv.cardinality)
        else:
            assert dv.storage_type == "u"
            dv_path = Path(snap.root) / delta_dv_relative_path(dv.path_or_inline_dv)
            assert dv_path.exists()
            bitmap, _ = read_delta_dv(dv_path.read_bytes(), dv.offset or 1, dv.size_in_bytes, dv.cardinality)
        stats = parse_stats(f.stats)
        assert stats is not None
        assert stats.num_records is not None
        assert all(0 <= pos < stats.num_records for pos in bitmap)


@pytest.mark.parametrize("name", READABLE)
def test_every_partition_value_and_stats_parse(name: str) -> None:
    snap = load(name)
    mapping = snap.column_mapping
    schema = snap.schema
    physical = mapping.physical_partition_columns(schema, snap.partition_columns)
    for f in snap.add_files():
        assert set(f.partition_values) == set(physical.values())
        for logical, key in physical.items():
            column = schema.field(logical)
            assert column is not None
            parse_partition_value(column.type, f.partition_values[key])
        stats = parse_stats(f.stats)
        if stats is not None:
            leaf_stats(stats, schema, mapping)


def _crc_files() -> list[tuple[str, int]]:
    out = []
    for name in READABLE:
        for crc in sorted((DELTA_TABLES / name / "_delta_log").glob("*.crc")):
            if not crc.name.startswith("."):
                out.append((name, int(crc.name.split(".")[0])))
    return out


@pytest.mark.parametrize(("name", "version"), _crc_files())
def test_replay_matches_version_checksum_file(name: str, version: int) -> None:
    crc = json.loads((DELTA_TABLES / name / "_delta_log" / f"{version:020d}.crc").read_text())
    snap = load(name, version=version)
    assert snap.version == version
    assert snap.num_files == crc["numFiles"]
    assert sum(f.size for f in snap.add_files()) == crc["tableSizeBytes"]
    if "metadata" in crc:  # older writers left metadata and protocol out
        assert snap.metadata.id == crc["metadata"]["id"]
        assert snap.protocol.min_reader_version == crc["protocol"]["minReaderVersion"]
    if "setTransactions" in crc:
        assert {t["appId"]: t["version"] for t in crc["setTransactions"]} == {
            k: t.version for k, t in snap.txns.items()
        }
    if "domainMetadata" in crc:
        assert {d["domain"] for d in crc["domainMetadata"]} == set(snap.domains)


# --- individual tables ---------------------------------------------------------------------------


def test_table_with_dv_small() -> None:
    snap = load("table-with-dv-small")
    assert snap.version == 1
    (live,) = snap.add_files()
    dv = live.deletion_vector
    assert dv is not None
    assert dv.unique_id == "uvBn[lx{q8@P<9BNH/isA@1"
    assert live.key == (
        str(
            DELTA_TABLES
            / "table-with-dv-small"
            / "part-00000-fae5310a-a37d-4e51-827b-c3d5516560ca-c000.snappy.parquet"
        ),
        "uvBn[lx{q8@P<9BNH/isA@1",
    )
    relative = delta_dv_relative_path(dv.path_or_inline_dv)
    assert relative == "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin"
    data = (DELTA_TABLES / "table-with-dv-small" / relative).read_bytes()
    assert dv.offset == 1
    bitmap, blob = read_delta_dv(data, dv.offset, dv.size_in_bytes, dv.cardinality)
    assert list(bitmap) == [0, 9]
    assert blob == data[1 : 1 + dv.size_in_bytes + 8]
    # The remove of the DV-less file is the tombstone.
    assert snap.tombstones.column("dv_id").to_pylist() == [None]
    assert snap.tombstones.column("absolute_path").to_pylist() == [live.absolute_path]

    (before,) = load("table-with-dv-small", version=0).add_files()
    assert before.deletion_vector is None
    assert before.absolute_path == live.absolute_path


def test_table_with_column_mapping() -> None:
    snap = load("table_with_column_mapping")
    mapping = snap.column_mapping
    assert mapping.mode == "name"
    assert snap.partition_columns == ("Company Very Short",)
    physical = mapping.physical_partition_columns(snap.schema, snap.partition_columns)
    company = "col-173b4db9-b5ad-427f-9e75-516aae37fbbb"
    assert physical == {"Company Very Short": company}
    name_field = snap.schema.field("Super Name")
    assert name_field is not None
    assert mapping.physical_name(name_field) == "col-3877fd94-0973-4941-ac6b-646849a1ff65"
    assert name_field.column_id == 2

    files = {Path(f.absolute_path).parent.name: f for f in snap.add_files()}
    assert set(files) == {"BH", "8v"}  # random prefixes: directory names mean nothing
    company_field = snap.schema.field("Company Very Short")
    assert company_field is not None
    values = {}
    for prefix, f in files.items():
        assert set(f.partition_values) == {company}
        values[prefix] = parse_partition_value(company_field.type, f.partition_values[company])
    assert values == {"BH": "BMS", "8v": "BME"}

    stats = parse_stats(files["BH"].stats)
    assert stats is not None
    leaves = leaf_stats(stats, snap.schema, mapping)
    assert leaves[("Super Name",)] == ("Anthony Johnson", "Stephanie Mcgrath", 0)
    assert leaves[("Company Very Short",)] == (None, None, None)  # no stats for partition columns


def test_special_partition_paths_decode_once() -> None:
    root = DELTA_TABLES / "delta-0.8.0-special-partition"
    snap = load("delta-0.8.0-special-partition")
    files = {f.partition_values["x"]: f for f in snap.add_files()}
    assert set(files) == {"A/A", "B B"}
    assert files["A/A"].path.startswith("x=A%252FA/")
    assert Path(files["A/A"].absolute_path).parent == root / "x=A%2FA"
    assert Path(files["B B"].absolute_path).parent == root / "x=B%20B"
    for f in files.values():
        assert Path(f.absolute_path).exists()


def test_checkpoint_v2_table_reads_sidecars() -> None:
    root = DELTA_TABLES / "checkpoint-v2-table"
    snap = load("checkpoint-v2-table")
    assert snap.version == 9
    assert snap.checkpoint_version == 8
    assert snap.num_files == 8
    for f in snap.add_files():
        assert Path(f.absolute_path).exists()

    # Version 8 is exactly the UUID checkpoint, whose add actions all live in its sidecar.
    at_cp = load("checkpoint-v2-table", version=8)
    assert at_cp.checkpoint_version == 8
    sidecar = root / "_delta_log" / "_sidecars"
    sidecar_file = (
        sidecar
        / "00000000000000000008.checkpoint.0000000001.0000000001.d55fb2cb-b8d3-4362-8572-c52142a9da1f.parquet"
    )
    adds = pq.read_table(sidecar_file, columns=["add"]).column("add").to_pylist()
    expected = {str(root / a["path"]) for a in adds if a is not None}
    assert len(expected) == 7
    assert {f.absolute_path for f in at_cp.add_files()} == expected

    # The older UUID checkpoint (version 6) and its sidecar serve time travel.
    at_7 = load("checkpoint-v2-table", version=7)
    assert at_7.checkpoint_version == 6
    assert at_7.num_files == 6
    assert load("checkpoint-v2-table", version=5).checkpoint_version is None


def test_checkpoint_tables_agree_with_full_replay() -> None:
    # latest_not_checkpointed and with_checkpoint_no_last_checkpoint hold the same log; one has
    # _last_checkpoint and one does not.
    a = load("latest_not_checkpointed")
    b = load("with_checkpoint_no_last_checkpoint")
    assert a.version == b.version == 3
    assert a.checkpoint_version == b.checkpoint_version == 2
    assert {Path(p).name for p, _ in a.file_keys()} == {Path(p).name for p, _ in b.file_keys()}


def test_checkpoints_vacuumed_time_travel() -> None:
    # Commits before 5 are gone; checkpoint 5 and 10 remain.
    snap = load("checkpoints_vacuumed", version=7)
    assert snap.checkpoint_version == 5
    with pytest.raises(TablekeeperError, match="can no longer be reconstructed"):
        load("checkpoints_vacuumed", version=4)


def _ict(name: str, version: int) -> int:
    first = (DELTA_TABLES / name / "_delta_log" / f"{version:020d}.json").read_text().split("\n", 1)[0]
    return int(json.loads(first)["commitInfo"]["inCommitTimestamp"])


def test_in_commit_timestamps_of_cdc_ict_table() -> None:
    name = "cdc_ict_table"
    for version in (0, 2, 3):
        assert load(name, version=version).timestamp_ms == _ict(name, version)
    # (version 0 by timestamp: see the non-monotonic test below)
    for version in (2, 3):
        assert load(name, timestamp_ms=_ict(name, version)).version == version
    assert load(name, timestamp_ms=_ict(name, 3) - 1).version == 2
    assert load(name).timestamp_ms == _ict(name, 3)


def test_non_monotonic_in_commit_timestamp_does_not_reorder_versions() -> None:
    # Version 1's inCommitTimestamp is 100e9 ms before version 0's (its .crc has the real value):
    # in-commit timestamps must increase (max(attempt time, previous + 1)), so this log is either
    # refused or read as if version 1 came after version 0. Time travel to version 0's own
    # timestamp must never answer version 1, and no time before version 0 may answer anything.
    name = "cdc_ict_table"
    ict0, ict1 = _ict(name, 0), _ict(name, 1)
    assert ict1 < ict0
    try:
        at_v0 = load(name, timestamp_ms=ict0)
    except CorruptMetadataError:
        return  # refusing the log is correct too
    assert at_v0.version == 0
    with pytest.raises(TablekeeperError):
        load(name, timestamp_ms=ict1)
    assert load(name, version=1).timestamp_ms > ict0


def test_partition_column_renamed_after_upgrade_to_name_mapping() -> None:
    # Name mapping enabled on an existing table (physical name = the old name "id"), then the
    # column was renamed to "newid": partition values stay keyed by "id".
    snap = load("table_with_partitioning_mapping")
    assert snap.partition_columns == ("newid",)
    mapping = snap.column_mapping
    assert mapping.physical_partition_columns(snap.schema, snap.partition_columns) == {"newid": "id"}
    newid = snap.schema.field("newid")
    assert newid is not None
    values = sorted(parse_partition_value(newid.type, f.partition_values["id"]) for f in snap.add_files())
    assert values == [1, 2]


def test_stale_last_checkpoint_of_real_table_is_overridden_by_listing() -> None:
    # _last_checkpoint says 1, but checkpoint 3 was written (the hint update failed).
    hint = json.loads(
        (DELTA_TABLES / "table_failed_last_checkpoint_update" / "_delta_log" / "_last_checkpoint").read_text()
    )
    assert hint["version"] == 1
    snap = load("table_failed_last_checkpoint_update")
    assert snap.version == 3
    assert snap.checkpoint_version == 3
    assert load("table_failed_last_checkpoint_update", version=2).checkpoint_version == 1


def test_null_partition_value() -> None:
    snap = load("delta-0.8.0-null-partition")
    values = sorted((f.partition_values["k"] for f in snap.add_files()), key=str)
    assert values == ["A", None]
    for f in snap.add_files():
        assert Path(f.absolute_path).exists()


V2_CHECKPOINT = "00000000000000000008.checkpoint.e5ac4dc4-be27-4106-8a55-609707487f83.json"
V2_SIDECAR = (
    "00000000000000000008.checkpoint.0000000001.0000000001.d55fb2cb-b8d3-4362-8572-c52142a9da1f.parquet"
)


def _copy_v2_table(tmp_path: Path) -> Path:
    root = tmp_path / "checkpoint v2"
    shutil.copytree(DELTA_TABLES / "checkpoint-v2-table", root)
    for p in root.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return root


def _rewrite_sidecar_path(root: Path, new_path: str) -> None:
    checkpoint = root / "_delta_log" / V2_CHECKPOINT
    lines = checkpoint.read_text().splitlines()
    out = []
    for line in lines:
        obj = json.loads(line)
        if "sidecar" in obj:
            assert obj["sidecar"]["path"] == V2_SIDECAR
            obj["sidecar"]["path"] = new_path
        out.append(json.dumps(obj))
    checkpoint.write_text("\n".join(out) + "\n")


def test_v2_checkpoint_with_missing_sidecar_is_corrupt(tmp_path: Path) -> None:
    root = _copy_v2_table(tmp_path)
    (root / "_delta_log" / "_sidecars" / V2_SIDECAR).unlink()
    with pytest.raises(CorruptMetadataError, match="sidecar"):
        load_snapshot(str(root))
    assert load_snapshot(str(root), version=7).num_files == 6  # checkpoint 6 has its own sidecar


def test_v2_sidecar_named_by_absolute_uri(tmp_path: Path) -> None:
    # The spec only encourages a bare file name; a full URI (percent-encoded) names the same file.
    root = _copy_v2_table(tmp_path)
    sidecar = root / "_delta_log" / "_sidecars" / V2_SIDECAR
    _rewrite_sidecar_path(root, sidecar.as_uri())
    snap = load_snapshot(str(root))
    assert snap.num_files == 8
    assert all(Path(f.absolute_path).exists() for f in snap.add_files())


def test_v2_sidecar_name_is_percent_decoded(tmp_path: Path) -> None:
    root = _copy_v2_table(tmp_path)
    sidecars = root / "_delta_log" / "_sidecars"
    (sidecars / V2_SIDECAR).rename(sidecars / "side car%.parquet")
    _rewrite_sidecar_path(root, "side%20car%25.parquet")
    assert load_snapshot(str(root)).num_files == 8
