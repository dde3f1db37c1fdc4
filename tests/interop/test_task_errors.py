"""A typed error raised in a Spark task reaches the driver as itself: exit 3 naming the file, not
``unexpected Py4JJavaError ... Lost task`` cut short."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tablekeeper.cli import _run_job, build_parser
from tablekeeper.errors import CorruptMetadataError, task_error
from tablekeeper.jobs.common.result import JobResult

pytestmark = pytest.mark.spark

NAME = "s3://bucket/t/metadata/snap-1-m0.avro"


def _task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        if batch.num_rows:
            try:
                raise EOFError("ran out of input")
            except EOFError:
                raise CorruptMetadataError(f"manifest {NAME} is truncated or corrupt (EOFError)") from None
        yield batch


def test_a_tasks_typed_error_ends_the_job_as_itself(spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    df = spark.range(4, numPartitions=2).mapInArrow(_task, "id long")
    with pytest.raises(Exception) as raised:
        df.collect()
    assert not isinstance(raised.value, CorruptMetadataError)  # Spark's task failure, as raised
    typed = task_error(raised.value)
    assert isinstance(typed, CorruptMetadataError)
    assert typed.message == f"manifest {NAME} is truncated or corrupt (EOFError)"

    def run() -> JobResult:
        df.collect()
        raise AssertionError("the task did not fail")

    args = build_parser("rewrite-manifests").parse_args(["rewrite-manifests", "--table", "db.t"])
    with pytest.raises(CorruptMetadataError) as ended:
        _run_job(args, "rewrite-manifests", "db.t", run)
    assert ended.value.exit_code == 3 and NAME in ended.value.message
    assert '"status":"refused"' in capsys.readouterr().out


def test_a_truncated_parquet_file_spark_reads_is_named(spark: Any, tmp_path: Path) -> None:
    spark.range(50).write.parquet(str(tmp_path / "t"))
    victim = next((tmp_path / "t").glob("*.parquet"))
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    with pytest.raises(Exception) as raised:
        spark.read.schema("id long").parquet(str(tmp_path / "t")).selectExpr("sum(id)").collect()
    typed = task_error(raised.value)
    assert isinstance(typed, CorruptMetadataError) and victim.name in typed.message
