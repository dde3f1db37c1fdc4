"""The Delta protocol gate's refusals name the problem and what to do about it, on one line."""

from __future__ import annotations

import pytest

from tablekeeper.delta.models import Protocol
from tablekeeper.errors import UnsupportedFeatureError


def test_a_newer_reader_version_is_refused_with_the_fix() -> None:
    with pytest.raises(UnsupportedFeatureError) as info:
        Protocol(5, 7).check_readable()
    message = info.value.message
    assert "Delta reader version 5 is not supported" in message
    assert "upgrade tablekeeper" in message and "\n" not in message


def test_an_unknown_reader_feature_is_refused_naming_the_feature_to_drop() -> None:
    with pytest.raises(UnsupportedFeatureError) as info:
        Protocol(3, 7, ("futureFeature",), ("futureFeature",)).check_readable()
    message = info.value.message
    assert "'futureFeature' is not supported" in message
    assert "DROP FEATURE futureFeature" in message and "\n" not in message


def test_known_reader_features_pass() -> None:
    Protocol(
        3, 7, ("deletionVectors", "columnMapping"), ("deletionVectors", "columnMapping")
    ).check_readable()


def test_nanosecond_timestamps_are_refused_by_name_not_misread() -> None:
    """No mapping of the proposed nanosecond type is specified: the feature, not a column of an
    unknown type found later, is named."""
    with pytest.raises(UnsupportedFeatureError, match=r"'timestampNanos' is not supported"):
        Protocol(3, 7, ("timestampNanos",), ("timestampNanos",)).check_readable()
