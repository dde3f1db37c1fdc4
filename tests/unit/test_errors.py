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
    assert "Spark could not read file:///t/data/d-1.parquet (truncated" in typed.message
