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
