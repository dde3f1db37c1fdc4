"""convert-delta on the driver: zone-less timestamp partition values read in the writer's zone."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import parse_catalogs
from tablekeeper.delta.deletion_vectors import z85_encode
from tablekeeper.errors import ConfigError
from tablekeeper.iceberg.puffin import DV_MAGIC
from tablekeeper.iceberg.roaring import RoaringBitmap64
from tablekeeper.io import FileIO
from tablekeeper.jobs.convert_delta import ConvertDeltaOptions, run_convert
from tablekeeper.tables.iceberg import iter_live_entries
from tests.unit.tables.test_delta import PROTOCOL, add, metadata, write_commit, write_log

SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
        ],
    }
)
# delta-spark with spark.sql.session.timeZone=America/New_York and UTC partition values off,
# around the 2021-03-14 spring-forward, and one file a newer writer wrote as UTC.
VALUES = {
    "a.parquet": "2021-03-14 01:30:00",  # EST: 06:30Z
    "b.parquet": "2021-03-14 03:30:00",  # EDT: 07:30Z
    "c.parquet": "2021-07-01T12:00:00.000000Z",
}


def micros(text: str) -> int:
    return (dt.datetime.fromisoformat(text) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(
        microseconds=1
    )


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "delta"
    adds = [
        add(name, pv={"ts": value}, stats=json.dumps({"numRecords": 2})) for name, value in VALUES.items()
    ]
    meta = metadata(schemaString=SCHEMA, partitionColumns=["ts"])
    write_log(root, [[{"commitInfo": {"timestamp": 1}}, PROTOCOL, meta, *adds]])
    return root


def convert(
    tmp_path: Path, source: Path, target: str, zone: str | None, **more: Any
) -> tuple[dict[str, Any], dict[str, int]]:
    conf = "catalogs:\n  c: {type: sql, uri: 'sqlite:///${warehouse}/c.db', warehouse: '${warehouse}'}\n"
    catalog = catalog_for(parse_catalogs(conf, tmp_path).get("c"))
    options = ConvertDeltaOptions(str(source), target, verify="metadata", partition_timezone=zone, **more)
    result = run_convert(options, catalog)
    meta = catalog.require(target).metadata
    io = FileIO.for_location(meta.location)
    entries = iter_live_entries(io, meta, meta.current_snapshot())
    partitions = {e.data_file.file_path.rsplit("/", 1)[-1]: e.data_file.partition[0] for e in entries}
    return dict(result.metrics), partitions


def test_stated_zone_gives_each_value_its_own_offset(tmp_path: Path, source: Path) -> None:
    metrics, partitions = convert(tmp_path, source, "db.ny", "America/New_York")
    assert partitions == {
        "a.parquet": micros("2021-03-14T06:30:00+00:00"),
        "b.parquet": micros("2021-03-14T07:30:00+00:00"),
        "c.parquet": micros("2021-07-01T12:00:00+00:00"),
    }
    assert metrics["partition_timezone"] == "America/New_York"
    assert metrics["partition_timezone_assumed"] is None
    assert metrics["verified"]["partitions_verified"] == 3


def test_without_a_zone_the_result_names_utc_as_assumed(tmp_path: Path, source: Path) -> None:
    metrics, partitions = convert(tmp_path, source, "db.utc", None)
    assert partitions["a.parquet"] == micros("2021-03-14T01:30:00+00:00")
    assert partitions["c.parquet"] == micros("2021-07-01T12:00:00+00:00")
    assumed = metrics["partition_timezone_assumed"]
    assert assumed.startswith("UTC: timestamp partition column(s) ts ") and "--partition-timezone" in assumed


def test_a_table_whose_values_name_their_zone_assumes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "delta"
    adds = [add("c.parquet", pv={"ts": VALUES["c.parquet"]}, stats=json.dumps({"numRecords": 2}))]
    meta = metadata(schemaString=SCHEMA, partitionColumns=["ts"])
    write_log(root, [[{"commitInfo": {"timestamp": 1}}, PROTOCOL, meta, *adds]])
    metrics, _ = convert(tmp_path, root, "db.z", None)
    assert metrics["partition_timezone_assumed"] is None


def test_zone_names_are_checked_with_the_options() -> None:
    with pytest.raises(ConfigError, match="'EST5' is not a time zone name") as info:
        ConvertDeltaOptions("s", "db.t", partition_timezone="EST5")
    assert info.value.exit_code == 2


def test_catalogs_file_states_a_default_zone_kept_out_of_the_catalog_properties(tmp_path: Path) -> None:
    text = "catalogs:\n  c: {type: filesystem, warehouse: /w, delta-partition-timezone: Asia/Tokyo}\n"
    catalog = parse_catalogs(text, tmp_path).get("c")
    assert catalog.delta_partition_timezone == "Asia/Tokyo"
    assert "delta-partition-timezone" not in catalog.properties
    with pytest.raises(
        ConfigError, match="catalog 'c': delta-partition-timezone: 'Tokio' is not a time zone"
    ):
        parse_catalogs(text.replace("Asia/Tokyo", "Tokio"), tmp_path)


def test_the_first_conversions_zone_is_kept_by_later_runs(tmp_path: Path, source: Path) -> None:
    convert(tmp_path, source, "db.inc", "America/New_York")
    write_commit(source, 1, [add("d.parquet", pv={"ts": "2021-11-07 01:30:00"}, stats='{"numRecords": 1}')])
    # Not stated again (nor by a catalog default): the target's own zone reads the new version.
    metrics, partitions = convert(
        tmp_path, source, "db.inc", None, mode="incremental", default_partition_timezone="Asia/Tokyo"
    )
    assert partitions["d.parquet"] == micros("2021-11-07T05:30:00+00:00")  # EDT, the earlier
    assert metrics["partition_timezone"] == "America/New_York"
    write_commit(source, 2, [add("e.parquet", pv={"ts": "2021-12-01 00:00:00"}, stats='{"numRecords": 1}')])
    with pytest.raises(ConfigError, match="was converted with --partition-timezone America/New_York") as info:
        convert(tmp_path, source, "db.inc", "UTC", mode="incremental")
    assert info.value.exit_code == 2


def test_a_target_converted_as_utc_refuses_another_zone_later(tmp_path: Path, source: Path) -> None:
    convert(tmp_path, source, "db.was_utc", None)
    write_commit(source, 1, [add("d.parquet", pv={"ts": "2021-12-01 00:00:00"}, stats='{"numRecords": 1}')])
    with pytest.raises(ConfigError, match=r"no --partition-timezone \(UTC\)"):
        convert(tmp_path, source, "db.was_utc", "America/New_York", mode="incremental")


def test_the_per_file_path_reads_the_same_zone(tmp_path: Path) -> None:
    """A file with a deletion vector takes the per-file builder (and its delete file the same
    partition): the zone reaches it too."""
    bitmap = DV_MAGIC + RoaringBitmap64([0]).serialize()
    inline = {
        "storageType": "i",
        "pathOrInlineDv": z85_encode(bitmap + bytes(-len(bitmap) % 4)),
        "sizeInBytes": len(bitmap),
        "cardinality": 1,
    }
    root = tmp_path / "delta"
    stats = json.dumps({"numRecords": 2})
    adds = [add("a.parquet", pv={"ts": VALUES["a.parquet"]}, stats=stats, deletionVector=inline)]
    meta = metadata(schemaString=SCHEMA, partitionColumns=["ts"])
    write_log(root, [[{"commitInfo": {"timestamp": 1}}, PROTOCOL, meta, *adds]])
    metrics, partitions = convert(tmp_path, root, "db.dv", "America/New_York")
    assert metrics["delete_files"] == 1 and metrics["verified"]["partitions_verified"] == 1
    assert set(partitions.values()) == {micros("2021-03-14T06:30:00+00:00")}  # data and delete file
