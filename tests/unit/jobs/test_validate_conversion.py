"""validate-conversion checks its inputs before any JVM and never builds SQL from them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tablekeeper.cli import build_parser, main
from tablekeeper.errors import ConfigError
from tablekeeper.jobs.validate_conversion import ValidateConversionOptions, count_rows


def options(*extra: str) -> ValidateConversionOptions:
    argv = ["validate-conversion", "--source", "/data/t", "--target", "db.t", *extra]
    return ValidateConversionOptions.from_args(build_parser("validate-conversion").parse_args(argv))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--delta-version", "-1"], "--delta-version -1 is negative"),
        (["--convert-result", json.dumps({"metrics": {"delta_version": -3}})], "is negative"),
        (["--convert-result", json.dumps({"metrics": {"delta_version": "1 OR 1=1"}})], "not a whole number"),
        (["--convert-result", json.dumps({"metrics": {"delta_version": 1.5}})], "not a whole number"),
        (
            ["--delta-version", "1", "--convert-result", json.dumps({"metrics": {"snapshot_id": "x"}})],
            "--snapshot-id 'x' is not a whole number",
        ),
        (["--delta-version", "1", "--snapshot-id", str(1 << 63)], "out of range"),
    ],
)
def test_bad_versions_are_refused_by_name(extra: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        options(*extra)


def test_a_bad_version_is_exit_2_before_any_spark(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark was asked for")

    monkeypatch.setattr("tablekeeper.cli._spark_session", no_spark)
    argv = ["validate-conversion", "--source", "/data/t", "--target", "db.t", "--delta-version", "-1"]
    assert main(argv) == 2
    assert "--delta-version -1 is negative" in capsys.readouterr().err.strip().splitlines()[-1]


class Recorder:
    """A stand-in for the session: records reader calls, and fails on SQL text."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    @property
    def read(self) -> Recorder:
        return self

    def format(self, name: str) -> Recorder:
        self.calls.append(("format", name))
        return self

    def option(self, key: str, value: str) -> Recorder:
        self.calls.append(("option", key, value))
        return self

    def load(self, path: str) -> Recorder:
        self.calls.append(("load", path))
        return self

    def count(self) -> int:
        return 7

    def sql(self, text: str) -> Any:
        raise AssertionError(f"SQL built from inputs: {text}")


def test_paths_and_versions_go_as_reader_options() -> None:
    spark = Recorder()
    path = "/data/odd` path' VERSION AS OF 0 --"
    assert count_rows(spark, path, 3, "`tk`.`db`.`t`", 42) == (7, 7)  # type: ignore[arg-type]
    assert spark.calls == [
        ("format", "delta"),
        ("option", "versionAsOf", "3"),
        ("load", path),
        ("format", "iceberg"),
        ("option", "versionAsOf", "42"),
        ("load", "`tk`.`db`.`t`"),
    ]
