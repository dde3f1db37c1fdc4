"""health's thresholds: the documented keys and defaults, where each can be set (--threshold beats
the table's ``tablekeeper.health.*`` property, which beats the catalogs file's ``health:``
section, which beats the default), and one-line ConfigErrors for unknown keys and bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from tablekeeper.errors import ConfigError
from tablekeeper.jobs.health import HealthOptions, file_thresholds
from tablekeeper.jobs.health.model import PROPERTY_PREFIX, Thresholds, parse_threshold_args

DEFAULTS = {
    "compact.min-files": 5,
    "compact.max-files-per-lookup": 2.0,
    "expire-snapshots.min-snapshots": 1,
    "expire-snapshots.min-bytes": 0,
    "rewrite-manifests.min-manifests": None,
    "rewrite-manifests.max-share-after": 0.5,
    "rewrite-position-deletes.min-files": 5,
    "rewrite-equality-deletes.min-files": 1,
    "remove-orphans.min-files": 1,
    "delta.max-commits-since-checkpoint": 100,
    "v3-readiness": False,
}


def _values(t: Thresholds) -> dict[str, object]:
    return {key: getattr(t, name) for key, name in Thresholds.keys().items()}


def _conf(tmp_path: Path, text: str) -> str:
    path = tmp_path / "catalogs.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _one_line(err: pytest.ExceptionInfo[ConfigError]) -> str:
    message = str(err.value)
    assert message == err.value.message and "\n" not in message and message.strip() == message
    return message


def test_the_documented_keys_and_defaults() -> None:
    assert _values(Thresholds()) == DEFAULTS


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        ({}, 100),
        ({"commit.manifest.min-count-to-merge": "40"}, 40),
    ],
)
def test_min_manifests_follows_the_tables_merge_count_unless_set(
    properties: dict[str, str], expected: int
) -> None:
    assert Thresholds().min_manifests(properties) == expected
    # Set anywhere, the threshold wins over the table's merge count.
    set_by_property = Thresholds().for_table(
        {**properties, f"{PROPERTY_PREFIX}rewrite-manifests.min-manifests": "7"}, {}
    )
    assert set_by_property.min_manifests(properties) == 7
    assert (
        Thresholds().for_table(properties, {"rewrite-manifests.min-manifests": "3"}).min_manifests(properties)
        == 3
    )


def test_precedence_cli_over_table_property_over_file_over_default(tmp_path: Path) -> None:
    conf = _conf(
        tmp_path,
        """
default: local
catalogs:
  local: {type: filesystem, warehouse: /tmp/nowhere}
health:
  compact.min-files: 10
  expire-snapshots.min-bytes: 2048
  remove-orphans.min-files: 4
  rewrite-manifests.max-share-after: 0.25
""",
    )
    base = file_thresholds(conf)
    assert _values(base) == DEFAULTS | {
        "compact.min-files": 10,
        "expire-snapshots.min-bytes": 2048,
        "remove-orphans.min-files": 4,
        "rewrite-manifests.max-share-after": 0.25,
    }
    properties = {
        f"{PROPERTY_PREFIX}compact.min-files": "20",
        f"{PROPERTY_PREFIX}expire-snapshots.min-bytes": "4096",
        f"{PROPERTY_PREFIX}v3-readiness": "TRUE",
        "write.target-file-size-bytes": "1024",  # not a health key: ignored
        "tablekeeper.health": "not a key either",  # the prefix without a key
    }
    cli = {"compact.min-files": "30"}
    got = base.for_table(properties, cli)
    assert _values(got) == DEFAULTS | {
        "compact.min-files": 30,  # --threshold beats the property and the file
        "expire-snapshots.min-bytes": 4096,  # the property beats the file
        "remove-orphans.min-files": 4,  # only in the file
        "rewrite-manifests.max-share-after": 0.25,
        "v3-readiness": True,  # only on the table
    }
    # Without a --threshold the property wins; without either the file; without the file the default.
    assert base.for_table(properties, {}).compact_min_files == 20
    assert base.for_table({}, {}).compact_min_files == 10
    assert Thresholds().for_table({}, {}).compact_min_files == 5


def test_v3_readiness_flag_is_a_threshold_the_cli_sets() -> None:
    assert HealthOptions(table="db.t").cli_thresholds == {}
    flagged = HealthOptions(table="db.t", v3_readiness=True, thresholds={"compact.min-files": "9"})
    assert flagged.cli_thresholds == {"compact.min-files": "9", "v3-readiness": "true"}
    assert Thresholds().for_table({}, flagged.cli_thresholds).v3_readiness is True
    # A table that said false still gets the question when the run asks for readiness.
    assert (
        Thresholds()
        .for_table({f"{PROPERTY_PREFIX}v3-readiness": "false"}, flagged.cli_thresholds)
        .v3_readiness
    )


def test_table_and_catalog_selection_do_not_mix() -> None:
    with pytest.raises(ConfigError) as err:
        HealthOptions(table="db.t", namespace="db")
    assert "--table" in _one_line(err)
    with pytest.raises(ConfigError):
        HealthOptions(table="db.t", tables="events_*")


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (None, {}),
        (["compact.min-files=10"], {"compact.min-files": "10"}),
        (
            [" compact.min-files = 10 ", "v3-readiness=true"],
            {"compact.min-files": "10", "v3-readiness": "true"},
        ),
        (["compact.min-files=3", "compact.min-files=4"], {"compact.min-files": "4"}),  # the last one wins
    ],
)
def test_threshold_arguments(items: list[str] | None, expected: dict[str, str]) -> None:
    assert parse_threshold_args(items) == expected


@pytest.mark.parametrize("item", ["compact.min-files", "=5", " =5", ""])
def test_threshold_argument_that_is_not_key_value(item: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_threshold_args([item])
    assert "KEY=VALUE" in _one_line(err)


@pytest.mark.parametrize(
    ("where", "apply"),
    [
        ("--threshold", lambda kv: parse_threshold_args([f"{k}={v}" for k, v in kv.items()])),
        ("--threshold", lambda kv: Thresholds().for_table({}, kv)),
        (
            "table properties",
            lambda kv: Thresholds().for_table({PROPERTY_PREFIX + k: v for k, v in kv.items()}, {}),
        ),
    ],
)
@pytest.mark.parametrize("key", ["compact.min-file", "compact_min_files", "expire.min-snapshots", "bogus"])
def test_unknown_key_is_a_one_line_error_naming_it_and_where(where: str, apply, key: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as err:
        apply({key: "1"})
    message = _one_line(err)
    assert f"unknown health threshold {key!r}" in message and where in message
    assert "compact.min-files" in message  # the known keys are listed


BAD_VALUES = [
    ("compact.min-files", "ten"),
    ("compact.min-files", "-1"),
    ("compact.min-files", "2.5"),
    ("compact.min-files", ""),
    ("expire-snapshots.min-bytes", "1KB"),
    ("rewrite-manifests.min-manifests", "none"),
    ("delta.max-commits-since-checkpoint", "-100"),
    ("v3-readiness", "yes"),
    ("v3-readiness", "1"),
    ("rewrite-manifests.max-share-after", "half"),
    # A share of the manifests before: only 0..1 means anything.
    ("rewrite-manifests.max-share-after", "nan"),
    ("rewrite-manifests.max-share-after", "inf"),
    ("rewrite-manifests.max-share-after", "-0.5"),
]


@pytest.mark.parametrize(("key", "value"), BAD_VALUES)
def test_bad_value_is_a_one_line_error_naming_key_and_value(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_threshold_args([f"{key}={value}"])
    message = _one_line(err)
    assert key in message and "--threshold" in message
    with pytest.raises(ConfigError) as err:
        Thresholds().for_table({PROPERTY_PREFIX + key: value}, {})
    assert key in _one_line(err) and "table properties" in str(err.value)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("compact.min-files", "0", 0),
        ("expire-snapshots.min-bytes", "1073741824", 1 << 30),
        ("rewrite-manifests.max-share-after", "0", 0.0),
        ("rewrite-manifests.max-share-after", "1", 1.0),
        ("rewrite-manifests.max-share-after", "0.75", 0.75),
        ("v3-readiness", "False", False),
        ("v3-readiness", " true ", True),
    ],
)
def test_good_values(key: str, value: str, expected: object) -> None:
    got = _values(Thresholds().override({key: value}, "test"))[key]
    assert got == expected and type(got) is type(expected)


def test_file_health_section_parses_yaml_types(tmp_path: Path) -> None:
    conf = _conf(
        tmp_path,
        """
default: local
catalogs:
  local: {type: filesystem, warehouse: /tmp/nowhere}
health:
  compact.min-files: 12
  v3-readiness: true
  rewrite-manifests.max-share-after: 0.3
  rewrite-manifests.min-manifests: 50
  delta.max-commits-since-checkpoint: "20"
""",
    )
    assert _values(file_thresholds(conf)) == DEFAULTS | {
        "compact.min-files": 12,
        "v3-readiness": True,
        "rewrite-manifests.max-share-after": 0.3,
        "rewrite-manifests.min-manifests": 50,
        "delta.max-commits-since-checkpoint": 20,
    }


@pytest.mark.parametrize(
    "text",
    [
        "default: local\ncatalogs:\n  local: {type: filesystem, warehouse: /tmp/x}\n",  # no section
        "health:\n",  # an empty section
        "",  # an empty file
    ],
)
def test_file_without_thresholds_gives_the_defaults(tmp_path: Path, text: str) -> None:
    assert file_thresholds(_conf(tmp_path, text)) == Thresholds()


def test_missing_file_gives_the_defaults(tmp_path: Path) -> None:
    assert file_thresholds(str(tmp_path / "absent.yaml")) == Thresholds()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("health: 5\n", "health must map threshold names to values"),
        ("health: [compact.min-files]\n", "health must map threshold names to values"),
        ("health:\n  compact.min-file: 3\n", "unknown health threshold 'compact.min-file'"),
        ("health:\n  compact.min-files: many\n", "compact.min-files='many'"),
        ("health:\n  compact.min-files: true\n", "compact.min-files='true'"),
        ("health:\n  v3-readiness: 1\n", "v3-readiness='1'"),
        ("health: {compact.min-files: [1\n", "cannot read"),  # not YAML
    ],
)
def test_bad_file_section_is_a_one_line_error_naming_the_file(tmp_path: Path, text: str, needle: str) -> None:
    conf = _conf(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        file_thresholds(conf)
    message = _one_line(err)
    assert needle in message and conf in message


def test_thresholds_in_effect_are_reported_by_key() -> None:
    """What a table's result shows: every key, min-manifests resolved against its properties."""
    merge = {"commit.manifest.min-count-to-merge": "40"}
    assert Thresholds().as_keys(merge) == DEFAULTS | {"rewrite-manifests.min-manifests": 40}
    assert Thresholds().as_keys({})["rewrite-manifests.min-manifests"] == 100
    chosen = Thresholds().for_table(
        {f"{PROPERTY_PREFIX}rewrite-manifests.min-manifests": "7"}, {"v3-readiness": "true"}
    )
    assert chosen.as_keys(merge) == DEFAULTS | {"rewrite-manifests.min-manifests": 7, "v3-readiness": True}
