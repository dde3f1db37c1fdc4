"""compact's options as delta-spark's OPTIMIZE settings (no JVM: the mapping itself)."""

from __future__ import annotations

import pytest

from tablekeeper.errors import ConfigError, UnsupportedFeatureError
from tablekeeper.jobs.common.delta_maintenance import (
    OPTIMIZE_BATCH_SIZE,
    OPTIMIZE_MAX_SIZE,
    OPTIMIZE_MAX_THREADS,
    OPTIMIZE_MIN_SIZE,
    OptimizeSettings,
)
from tablekeeper.jobs.compact.options import CompactOptions


def test_sizes_threads_and_batches_become_optimize_settings() -> None:
    plain = OptimizeSettings.of(CompactOptions("t"))
    assert plain.conf(1000) == {OPTIMIZE_MAX_THREADS: "5"}  # delta-spark's own file sizes
    sized = OptimizeSettings.of(CompactOptions("t", target_file_size="64MB", max_concurrent_groups=2))
    # Files under the target are compacted, as delta-spark's defaults pair min and max.
    assert sized.conf(1000) == {
        OPTIMIZE_MAX_THREADS: "2",
        OPTIMIZE_MAX_SIZE: str(64 << 20),
        OPTIMIZE_MIN_SIZE: str(64 << 20),
    }
    low = OptimizeSettings.of(CompactOptions("t", target_file_size="64MB", min_file_size="8MB"))
    assert low.conf(0)[OPTIMIZE_MIN_SIZE] == str(8 << 20)
    batched = OptimizeSettings.of(CompactOptions("t", partial_progress=True, max_commits=4))
    assert batched.conf(1001)[OPTIMIZE_BATCH_SIZE] == "251"  # never more than 4 commits
    assert OPTIMIZE_BATCH_SIZE not in OptimizeSettings.of(CompactOptions("t", max_commits=4)).conf(1001)


def test_orders_a_delta_table_cannot_take_are_refused() -> None:
    assert OptimizeSettings.of(CompactOptions("t", strategy="sort", sort_order="zorder(a, b)")).zorder == (
        "a",
        "b",
    )
    with pytest.raises(UnsupportedFeatureError, match="needs --sort-order zorder"):
        OptimizeSettings.of(CompactOptions("t", strategy="sort"))
    with pytest.raises(UnsupportedFeatureError, match="linear --sort-order is Iceberg-only"):
        OptimizeSettings.of(CompactOptions("t", strategy="sort", sort_order="a DESC"))
    with pytest.raises(ConfigError, match="--sort-order needs --strategy sort"):
        OptimizeSettings.of(CompactOptions("t", sort_order="zorder(a)"))


def test_a_dry_run_cannot_plan_a_where_it_cannot_evaluate() -> None:
    """The dry run's plan comes from the log: with --where it would have listed every file."""
    with pytest.raises(ConfigError, match="--where with --dry-run on a Delta table"):
        OptimizeSettings.of(CompactOptions("t", where="p = 1", dry_run=True))
