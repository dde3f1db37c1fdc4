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
