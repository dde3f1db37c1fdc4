"""The delta-spark reference extractor (tests/support/delta_reference.py) on a table delta-spark writes."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.support.delta_reference import DeltaSparkRefused, delta_spark_state, delta_spark_versions

pytestmark = pytest.mark.spark


def _log_dv_ids(table: Path, version: int) -> dict[str, str]:
    """Relative add path → dvUniqueId, straight from one commit file (the digest's definition)."""
    ids = {}
    for line in (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
        add = json.loads(line).get("add") if line.strip() else None
        if add and add.get("deletionVector"):
            dv = add["deletionVector"]
            offset = f"@{dv['offset']}" if dv.get("offset") is not None else ""
            ids[add["path"]] = dv["storageType"] + dv["pathOrInlineDv"] + offset
    return ids


def test_reference_state_of_a_partitioned_table_with_a_deletion_vector(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "dv table"  # a space: paths must come back decoded, not as %20
    location = str(table)
    # Version 0: one file per partition (REPARTITION(1) and 10 rows in each of part=0 and part=1).
    spark.sql(
        f"""
        CREATE TABLE delta.`{location}` USING delta PARTITIONED BY (part)
        TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')
        AS SELECT /*+ REPARTITION(1) */ id, CAST(id % 2 AS INT) AS part FROM range(20)
        """
    )
    # Version 1: a DV on the part=1 file only; that file keeps its path and gains a dv id.
    spark.sql(f"DELETE FROM delta.`{location}` WHERE id = 3")

    ref = delta_spark_state(spark, location)
    assert ref.version == 1
    assert ref.partition_columns == ("part",)
    assert ref.configuration.get("delta.enableDeletionVectors") == "true"
    assert "deletionVectors" in ref.reader_features
    assert "deletionVectors" in ref.writer_features
    assert ref.min_reader_version == 3
    assert ref.min_writer_version == 7
    assert [f["name"] for f in ref.schema_json["fields"]] == ["id", "part"]

    assert len(ref.files) == 2
    for path in ref.paths:
        assert path.startswith(f"{location}/part="), path  # absolute, decoded, no file: scheme
        assert Path(path).is_file()
    expected_dvs = {f"{location}/{unquote(relative)}": dv for relative, dv in _log_dv_ids(table, 1).items()}
    assert len(expected_dvs) == 1
    assert ref.dv_files == expected_dvs
    (dv_path,) = expected_dvs
    assert "/part=1/" in dv_path
    assert all(dv is None for path, dv in ref.files if path != dv_path)
    assert ref.num_records == dict.fromkeys(ref.paths, 10)  # physical rows: the DV does not change stats

    before = delta_spark_state(spark, location, version=0)
    assert before.version == 0
    assert before.files == frozenset((path, None) for path in ref.paths)
    assert before.partition_columns == ("part",)

    assert delta_spark_versions(spark, location) == [0, 1]
    with pytest.raises(DeltaSparkRefused) as refused:
        delta_spark_state(spark, location, version=5)
    assert "\n" not in str(refused.value)
    assert refused.value.java_class
