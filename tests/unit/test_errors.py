from __future__ import annotations

import pytest

from tablekeeper import errors
from tablekeeper.errors import ExitCode


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (errors.ConfigError, ExitCode.USAGE),
        (errors.NotATableError, ExitCode.USAGE),
        (errors.CorruptMetadataError, ExitCode.REFUSED),
        (errors.UnsupportedFeatureError, ExitCode.REFUSED),
        (errors.SafetyRefusal, ExitCode.REFUSED),
        (errors.CommitConflict, ExitCode.CONFLICT),
        (errors.CommitStateUnknown, ExitCode.COMMIT_STATE_UNKNOWN),
    ],
)
def test_each_error_maps_to_its_documented_exit_code(cls: type[errors.TablekeeperError], code: int) -> None:
    err = cls("boom")
    assert isinstance(err, errors.TablekeeperError)
    assert errors.exit_code(err) == code


def test_messages_are_folded_to_one_line() -> None:
    assert errors.ConfigError("a\n  b\tc ").message == "a b c"


def test_foreign_exceptions_are_unexpected() -> None:
    assert errors.exit_code(ValueError("x")) == ExitCode.UNEXPECTED


def _error_classes(base: type[errors.TablekeeperError]) -> list[type[errors.TablekeeperError]]:
    return [base, *(c for sub in base.__subclasses__() for c in _error_classes(sub))]


@pytest.mark.parametrize("cls", _error_classes(errors.TablekeeperError))
def test_every_error_survives_the_trip_from_a_task_to_the_driver(cls: type[errors.TablekeeperError]) -> None:
    import pickle

    err = (
        cls("what broke: the fix", {"files": 3}) if cls is errors.CountsDiffer else cls("what broke: the fix")
    )
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and back.message == err.message and back.exit_code == err.exit_code
    assert dict(back.metrics) == dict(err.metrics)


JAVA_FAILURE = (
    "An error occurred while calling o87.collectToPython.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed "
    "1 times, most recent failure: Lost task 0.0 in stage 3.0 (TID 3) (127.0.0.1 executor driver): "
    "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
    '  File "/x/tablekeeper/spark/manifests.py", line 90, in task\n'
    "ValueError: bad varint\n\n"
    "During handling of the above exception, another exception occurred:\n\n"
    "Traceback (most recent call last):\n"
    "tablekeeper.errors.CorruptMetadataError: manifest s3://b/t/metadata/m1.avro is truncated at byte 512\n"
    "\n\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(...)\n"
)


def test_a_spark_tasks_typed_error_is_rebuilt_as_itself() -> None:
    typed = errors.task_error(RuntimeError(JAVA_FAILURE))
    assert isinstance(typed, errors.CorruptMetadataError)
    assert typed.message == "manifest s3://b/t/metadata/m1.avro is truncated at byte 512"
    assert errors.exit_code(typed) == ExitCode.REFUSED
    # A subclass defined outside errors.py, and one whose constructor takes more than a message.
    from tablekeeper.delta.replay import UnreadableCheckpoint

    text = "PythonException:\ntablekeeper.delta.replay.UnreadableCheckpoint: checkpoint c.parquet is cut\n"
    assert type(errors.task_error(RuntimeError(text))) is UnreadableCheckpoint
    counts = errors.task_error(RuntimeError("tablekeeper.errors.CountsDiffer: 3 rows, not 4"))
    assert isinstance(counts, errors.CountsDiffer) and counts.message == "3 rows, not 4"


@pytest.mark.parametrize(
    "text",
    [
        "Lost task 0.0: ValueError: x",
        "see tablekeeper.errors.NoSuchClass: y",
        "xtablekeeper.errors.ConfigError: z",
    ],
)
def test_a_failure_without_a_typed_error_stays_unexpected(text: str) -> None:
    assert errors.task_error(RuntimeError(text)) is None


def test_a_file_sparks_reader_cannot_read_is_a_refusal_naming_it() -> None:
    text = (
        "An error occurred while calling o41.collectToPython.\n: org.apache.spark.SparkException: "
        "[FAILED_READ_FILE.NO_HINT] Encountered error while reading file file:///t/data/d-1.parquet.  "
        "SQLSTATE: KD001\n\tat org.apache.spark.sql.errors..."
    )
    typed = errors.task_error(RuntimeError(text))
    assert isinstance(typed, errors.CorruptMetadataError)
    assert typed.message.startswith("could not read file:///t/data/d-1.parquet: truncated, corrupt")


def _lost_task(cause: str) -> str:
    """A Spark task failure's text as py4j hands it over, a Java reader's exception inside."""
    return (
        "An error occurred while calling o379.collectToPython.\n: org.apache.spark.SparkException: Job "
        "aborted due to stage failure: Task 2 in stage 63.0 failed 1 times, most recent failure: Lost "
        f"task 2.0 in stage 63.0 (TID 90) (localhost executor driver): {cause}\n"
        + "\tat org.apache.spark.rdd.RDD.iterator(RDD.scala:338)\n" * 60
        + "Driver stacktrace:\n\tat org.apache.spark.scheduler.DAGScheduler.abortStage(DAGScheduler.scala:1)"
    )


F = "s3://bucket/t/data/00000-1-a.parquet"
M = "s3://bucket/t/metadata/b-m0.avro"


@pytest.mark.parametrize(
    ("cause", "path"),
    [
        (
            f"org.apache.iceberg.exceptions.RuntimeIOException: Failed to open Parquet file: {F}\n\tat "
            "org.apache.iceberg.parquet.ReadConf.newReader(ReadConf.java:196)\nCaused by: "
            f"java.lang.RuntimeException: {F} is not a Parquet file. Expected magic number at tail",
            F,
        ),
        (
            "org.apache.iceberg.shaded.org.apache.parquet.io.ParquetDecodingException: "
            f"Can not read value at 0 in block -1 in file {F}",
            F,
        ),
        (
            f"org.apache.iceberg.exceptions.RuntimeIOException: Failed to read manifest {M}\n"
            "Caused by: java.io.EOFException",
            M,
        ),
        (f"org.apache.avro.InvalidAvroMagicException: Not an Avro data file: {M}", M),
        (f"org.apache.avro.AvroRuntimeException: java.io.EOFException reading {M}", M),
        (f"org.apache.hadoop.fs.ChecksumException: Checksum error: {F} at 0 exp: 1 got: 2", F),
        (f"org.apache.iceberg.exceptions.NotFoundException: File does not exist: {F}", F),
    ],
)
def test_a_java_readers_failure_on_a_file_is_a_refusal_naming_it(cause: str, path: str) -> None:
    typed = errors.task_error(RuntimeError(_lost_task(cause)))
    assert isinstance(typed, errors.CorruptMetadataError) and typed.exit_code == ExitCode.REFUSED
    assert typed.message.startswith(f"could not read {path} (")
    assert len(typed.message) < 400 and "Lost task" not in typed.message


@pytest.mark.parametrize(
    "cause",
    [
        # writing, or storage refusing: the file read may be sound, no refusal
        f"org.apache.iceberg.exceptions.RuntimeIOException: Failed to create file: {F}",
        f"java.io.FileNotFoundException: {F} (Permission denied)",
        f"org.apache.iceberg.exceptions.RuntimeIOException: Connection reset reading {F}",
        # a reader's failure naming no file: nothing to name, so no refusal
        "java.io.EOFException: Reached the end of stream",
        # not a reader's failure
        f"java.lang.OutOfMemoryError: Java heap space while reading {F}",
    ],
)
def test_other_java_failures_stay_unexpected(cause: str) -> None:
    assert errors.task_error(RuntimeError(_lost_task(cause))) is None


def test_an_unexpected_java_failure_puts_its_cause_and_file_first() -> None:
    from tablekeeper.cli import unexpected_reason

    text = _lost_task(
        f"org.apache.spark.SparkException: Task failed while writing rows\nCaused by: "
        f"java.lang.IllegalStateException: Unexpected state in {F}\n\tat a.b.C.d(C.java:1)"
    )
    reason = unexpected_reason(RuntimeError(text))
    assert reason.startswith(f"unexpected RuntimeError: IllegalStateException reading {F}: Unexpected state")


def test_an_engines_task_failure_keeps_the_tasks_error_class() -> None:
    from tablekeeper.files.engine import task_failure

    traceback = (
        "Traceback (most recent call last):\ntablekeeper.errors.OutsideTable: s3://x/y is outside the table"
    )
    typed = task_failure(
        RuntimeError(_lost_task(f"org.apache.spark.api.python.PythonException: {traceback}")), "expire"
    )
    assert isinstance(typed, errors.OutsideTable) and typed.message == "expire: s3://x/y is outside the table"
    gone = task_failure(RuntimeError("tablekeeper.errors.FileNotFound: f.parquet is gone"), "scan")
    assert isinstance(gone, errors.CorruptMetadataError)
    corrupt = task_failure(
        RuntimeError(_lost_task(f"org.apache.avro.InvalidAvroMagicException: Not an Avro data file: {M}")),
        "scan",
    )
    assert isinstance(corrupt, errors.CorruptMetadataError) and corrupt.message.startswith(
        f"scan: could not read {M}"
    )
