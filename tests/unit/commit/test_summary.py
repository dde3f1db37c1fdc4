"""Snapshot summaries: per-commit counts and the totals carried along a branch, as Java writes them."""

from __future__ import annotations

import pytest

from tablekeeper.commit.summary import TOTAL_KEYS, SummaryDelta, build_summary
from tablekeeper.iceberg.content import DATA, EQUALITY_DELETES, POSITION_DELETES, DataFile

LOCATION = "s3://bucket/db/events"


def data(name: str, records: int, size: int) -> DataFile:
    return DataFile(DATA, f"{LOCATION}/data/{name}.parquet", "PARQUET", (), records, size)


def position_deletes(name: str, records: int, size: int) -> DataFile:
    return DataFile(
        POSITION_DELETES,
        f"{LOCATION}/data/{name}-deletes.parquet",
        "PARQUET",
        (),
        records,
        size,
        referenced_data_file=f"{LOCATION}/data/{name}.parquet",
    )


def dv(name: str, cardinality: int, puffin_size: int, blob_size: int) -> DataFile:
    return DataFile(
        POSITION_DELETES,
        f"{LOCATION}/data/dvs.puffin",
        "PUFFIN",
        (),
        cardinality,
        puffin_size,
        referenced_data_file=f"{LOCATION}/data/{name}.parquet",
        content_offset=4,
        content_size_in_bytes=blob_size,
    )


def equality_deletes(name: str, records: int, size: int) -> DataFile:
    return DataFile(
        EQUALITY_DELETES,
        f"{LOCATION}/data/{name}-eq.parquet",
        "PARQUET",
        (),
        records,
        size,
        equality_ids=(1,),
    )


def test_empty_delta_is_zero() -> None:
    assert SummaryDelta.of() == SummaryDelta()
    assert SummaryDelta().to_summary() == {}


def test_data_files() -> None:
    delta = SummaryDelta.of(added=[data("a", 10, 100), data("b", 5, 50)], removed=[data("c", 7, 70)])
    assert delta == SummaryDelta(
        added_data_files=2,
        deleted_data_files=1,
        added_records=15,
        deleted_records=7,
        added_files_size=150,
        removed_files_size=70,
    )
    assert delta.to_summary() == {
        "added-data-files": "2",
        "deleted-data-files": "1",
        "added-records": "15",
        "deleted-records": "7",
        "added-files-size": "150",
        "removed-files-size": "70",
    }


def test_position_delete_files() -> None:
    delta = SummaryDelta.of(
        added=[position_deletes("a", 3, 300), position_deletes("b", 4, 400)],
        removed=[position_deletes("c", 2, 200)],
    )
    assert delta == SummaryDelta(
        added_delete_files=2,
        removed_delete_files=1,
        added_position_delete_files=2,
        removed_position_delete_files=1,
        added_position_deletes=7,
        removed_position_deletes=2,
        added_files_size=700,
        removed_files_size=200,
    )
    assert delta.to_summary() == {
        "added-delete-files": "2",
        "removed-delete-files": "1",
        "added-position-delete-files": "2",
        "removed-position-delete-files": "1",
        "added-files-size": "700",
        "removed-files-size": "200",
        "added-position-deletes": "7",
        "removed-position-deletes": "2",
    }


def test_dvs_are_counted_apart_from_position_delete_files() -> None:
    delta = SummaryDelta.of(
        added=[dv("a", 3, 5000, 40), dv("b", 9, 5000, 60)], removed=[dv("c", 2, 3000, 30)]
    )
    assert delta.added_dvs == 2
    assert delta.removed_dvs == 1
    assert delta.added_delete_files == 2
    assert delta.removed_delete_files == 1
    assert delta.added_position_delete_files == 0
    assert delta.removed_position_delete_files == 0
    assert delta.added_position_deletes == 12
    assert delta.removed_position_deletes == 2
    assert delta.added_data_files == 0
    assert delta.added_records == 0
    summary = delta.to_summary()
    assert summary["added-dvs"] == "2"
    assert summary["removed-dvs"] == "1"
    assert "added-position-delete-files" not in summary


def test_dv_size_is_its_blob_size_not_the_puffin_file_size() -> None:
    # Java 1.10 SnapshotSummary.UpdateMetrics uses ScanTaskUtil.contentSizeInBytes: a DV counts its
    # content_size_in_bytes (several DVs share one Puffin file, whose size would be counted per DV).
    delta = SummaryDelta.of(
        added=[dv("a", 3, 5000, 40), dv("b", 9, 5000, 60), position_deletes("p", 1, 700)],
        removed=[dv("c", 2, 3000, 30)],
    )
    assert delta.added_files_size == 40 + 60 + 700
    assert delta.removed_files_size == 30


def test_equality_delete_files() -> None:
    delta = SummaryDelta.of(added=[equality_deletes("a", 6, 600)], removed=[equality_deletes("b", 1, 100)])
    assert delta == SummaryDelta(
        added_delete_files=1,
        removed_delete_files=1,
        added_equality_delete_files=1,
        removed_equality_delete_files=1,
        added_equality_deletes=6,
        removed_equality_deletes=1,
        added_files_size=600,
        removed_files_size=100,
    )
    summary = delta.to_summary()
    assert summary["added-equality-delete-files"] == "1"
    assert summary["removed-equality-deletes"] == "1"
    assert "added-position-deletes" not in summary


def test_mixed_commit() -> None:
    delta = SummaryDelta.of(
        added=[data("a", 10, 100), position_deletes("p", 3, 30), equality_deletes("e", 2, 20)],
        removed=[data("b", 4, 40)],
    )
    assert (delta.added_data_files, delta.added_delete_files, delta.deleted_data_files) == (1, 2, 1)
    assert (delta.added_records, delta.deleted_records) == (10, 4)
    assert (delta.added_files_size, delta.removed_files_size) == (150, 40)


def test_deltas_add_up() -> None:
    a = SummaryDelta.of(added=[data("a", 10, 100)])
    b = SummaryDelta.of(added=[data("b", 5, 50)], removed=[equality_deletes("e", 2, 20)])
    total = a + b
    assert total.added_data_files == 2
    assert total.added_records == 15
    assert total.removed_equality_delete_files == 1
    assert total.removed_files_size == 20


# -- totals -----------------------------------------------------------------------------------


def test_totals_start_at_zero_without_parent() -> None:
    summary = build_summary("append", SummaryDelta.of(added=[data("a", 10, 100)]), None)
    assert summary["operation"] == "append"
    assert next(iter(summary)) == "operation"
    assert {k: summary[k] for k in TOTAL_KEYS} == {
        "total-records": "10",
        "total-files-size": "100",
        "total-data-files": "1",
        "total-delete-files": "0",
        "total-position-deletes": "0",
        "total-equality-deletes": "0",
    }


def test_empty_commit_without_parent_writes_zero_totals() -> None:
    summary = build_summary("append", SummaryDelta(), None)
    assert {k: summary[k] for k in TOTAL_KEYS} == dict.fromkeys(TOTAL_KEYS, "0")


def test_all_six_totals_carry_forward() -> None:
    previous = {
        "operation": "append",
        "total-records": "1000",
        "total-files-size": "50000",
        "total-data-files": "10",
        "total-delete-files": "3",
        "total-position-deletes": "40",
        "total-equality-deletes": "7",
    }
    delta = SummaryDelta.of(
        added=[data("a", 100, 5000), position_deletes("p", 5, 300), position_deletes("q", 2, 50)],
        removed=[data("b", 30, 2000), equality_deletes("e", 7, 100)],
    )
    summary = build_summary("overwrite", delta, previous)
    assert {k: summary[k] for k in TOTAL_KEYS} == {
        "total-records": str(1000 + 100 - 30),
        "total-files-size": str(50000 + 5000 + 300 + 50 - 2000 - 100),
        "total-data-files": str(10 + 1 - 1),
        "total-delete-files": str(3 + 2 - 1),
        "total-position-deletes": str(40 + 5 + 2),
        "total-equality-deletes": str(7 - 7),
    }


def test_unchanged_totals_are_still_written() -> None:
    previous = dict.fromkeys(TOTAL_KEYS, "5")
    summary = build_summary("replace", SummaryDelta(), previous)
    assert {k: summary[k] for k in TOTAL_KEYS} == previous


@pytest.mark.parametrize("missing", TOTAL_KEYS)
def test_total_missing_from_previous_summary_is_omitted(missing: str) -> None:
    previous = {k: "5" for k in TOTAL_KEYS if k != missing}
    delta = SummaryDelta.of(added=[data("a", 1, 1), position_deletes("p", 1, 1), equality_deletes("e", 1, 1)])
    summary = build_summary("append", delta, previous)
    assert missing not in summary
    assert all(k in summary for k in TOTAL_KEYS if k != missing)


def test_parent_with_empty_summary_writes_no_totals() -> None:
    # Java: a previous snapshot without a summary gives an empty previous summary, so no totals.
    summary = build_summary("append", SummaryDelta.of(added=[data("a", 1, 1)]), {})
    assert not any(k in summary for k in TOTAL_KEYS)
    assert summary["added-data-files"] == "1"


def test_total_going_negative_is_omitted_like_java() -> None:
    # SnapshotProducer.updateTotal writes a total only when the result is >= 0.
    previous = dict.fromkeys(TOTAL_KEYS, "0")
    summary = build_summary("delete", SummaryDelta.of(removed=[data("a", 10, 100)]), previous)
    assert "total-records" not in summary
    assert "total-data-files" not in summary
    assert "total-files-size" not in summary
    assert summary["total-delete-files"] == "0"


def test_unparseable_previous_total_is_omitted_like_java() -> None:
    # SnapshotProducer.updateTotal ignores a NumberFormatException and leaves the total out.
    previous = {**dict.fromkeys(TOTAL_KEYS, "5"), "total-records": "many"}
    summary = build_summary("append", SummaryDelta.of(added=[data("a", 1, 1)]), previous)
    assert "total-records" not in summary
    assert summary["total-data-files"] == "6"


def test_extra_properties_and_changed_partitions() -> None:
    summary = build_summary(
        "replace",
        SummaryDelta.of(added=[data("a", 1, 1)], removed=[data("b", 1, 1)]),
        None,
        {"tablekeeper.job": "rewrite_data_files"},
        changed_partitions=3,
    )
    assert summary["changed-partition-count"] == "3"
    assert summary["tablekeeper.job"] == "rewrite_data_files"
    assert summary["engine-name"] == "tablekeeper"
    assert "changed-partition-count" not in build_summary("append", SummaryDelta(), None)
