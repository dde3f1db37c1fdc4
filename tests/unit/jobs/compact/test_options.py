"""compact's option parsing: sizes, sort orders and the command line."""

from __future__ import annotations

import pytest

from tablekeeper.cli import build_parser
from tablekeeper.errors import ConfigError
from tablekeeper.jobs.common.options import SortKey, parse_size, parse_sort_order


@pytest.mark.parametrize(
    ("text", "size"),
    [("536870912", 536870912), ("512MB", 512 << 20), ("512m", 512 << 20), ("1.5GiB", 3 << 29), ("8KB", 8192)],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text, "--target-file-size") == size


@pytest.mark.parametrize("text", ["", "big", "12XB", "-5MB"])
def test_bad_sizes_name_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match="--target-file-size"):
        parse_size(text, "--target-file-size")


def test_sort_orders_default_nulls_like_iceberg() -> None:
    spec = parse_sort_order("c1 ASC NULLS LAST, c2 DESC, `odd name`, c3 desc nulls first")
    assert spec.keys == (
        SortKey("c1", True, False),
        SortKey("c2", False, False),
        SortKey("odd name", True, True),
        SortKey("c3", False, True),
    )
    assert parse_sort_order("zorder(a, b)").zorder == ("a", "b")


def test_sort_orders_with_transforms() -> None:
    spec = parse_sort_order("bucket(16, id) DESC, truncate(name, 4), days(ts) NULLS LAST, hours(`t 2`)")
    assert spec.keys == (
        SortKey("id", False, False, "bucket[16]"),
        SortKey("name", True, True, "truncate[4]"),
        SortKey("ts", True, False, "day"),
        SortKey("t 2", True, True, "hour"),
    )


@pytest.mark.parametrize("text", ["bucket(id)", "c1 UP", "zorder()", "spin(3, id)", "days(2, ts)"])
def test_bad_sort_orders(text: str) -> None:
    with pytest.raises(ConfigError, match="sort-order"):
        parse_sort_order(text)


def test_command_line_options() -> None:
    args = build_parser().parse_args(
        ["compact", "--table", "db.t", "--strategy", "sort", "--sort-order", "k DESC", "--partial-progress"]
    )
    assert (args.strategy, args.sort_order, args.partial_progress, args.min_input_files) == (
        "sort",
        "k DESC",
        True,
        5,
    )
    with pytest.raises(SystemExit):
        build_parser().parse_args(["compact", "--table", "db.t", "--strategy", "zorder"])


@pytest.mark.parametrize(
    ("value", "size"),
    [("128MB", 128 << 20), ("134217728b", 134217728), ("4194304", 4194304), ("1g", 1 << 30)],
)
def test_spark_size_settings(value: str, size: int) -> None:
    from tablekeeper.spark.rewrite import _conf_bytes

    assert _conf_bytes(value, 0) == size
    assert _conf_bytes(None, 7) == 7 and _conf_bytes("lots", 7) == 7
