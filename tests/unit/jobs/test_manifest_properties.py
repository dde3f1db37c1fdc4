"""Bad manifest table properties are reported by their own name: never blamed on an option that
was not given, never silently replaced by a default (no Spark)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tablekeeper.catalog import LoadedTable
from tablekeeper.catalog.sql import SqlCatalog
from tablekeeper.errors import ConfigError
from tablekeeper.jobs.health_iceberg import _manifests
from tablekeeper.jobs.health_model import Thresholds
from tablekeeper.jobs.rewrite_manifests import RewriteManifestsOptions, plan_rewrite
from tests.support.small_tables import sql_table


def table_with(tmp_path: Path, **properties: str) -> LoadedTable:
    sql_table(tmp_path, [("a.parquet", 1, 10), ("b.parquet", 1, 10)], format_version=2)
    loaded = SqlCatalog("c", f"sqlite:///{tmp_path}/c.db", str(tmp_path)).load_table("db.t")
    meta = replace(loaded.metadata, properties={**loaded.metadata.properties, **properties})
    return replace(loaded, metadata=meta)


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_a_bad_target_size_property_is_named(tmp_path: Path, value: str) -> None:
    table = table_with(tmp_path, **{"commit.manifest.target-size-bytes": value})
    with pytest.raises(ConfigError) as err:
        plan_rewrite(RewriteManifestsOptions(table="db.t"), table, "db.t")
    assert f"commit.manifest.target-size-bytes={value!r}" in err.value.message
    assert "must be positive" not in err.value.message  # not the option's message


def test_a_bad_target_size_option_is_named(tmp_path: Path) -> None:
    table = table_with(tmp_path)
    with pytest.raises(ConfigError, match="--target-manifest-size 0 must be positive"):
        plan_rewrite(RewriteManifestsOptions(table="db.t", target_manifest_size="0"), table, "db.t")


@pytest.mark.parametrize("value", ["abc", "-2"])
def test_health_reports_a_bad_merge_count_by_name(tmp_path: Path, value: str) -> None:
    table = table_with(tmp_path, **{"commit.manifest.min-count-to-merge": value})
    with pytest.raises(ConfigError, match=r"commit\.manifest\.min-count-to-merge"):
        Thresholds().min_manifests(table.metadata.properties)
    notes: list[str] = []
    _manifests([], table, "db.t", Thresholds(), notes)
    assert len(notes) == 1 and f"commit.manifest.min-count-to-merge={value!r}" in notes[0]
    assert Thresholds().as_keys(table.metadata.properties)["rewrite-manifests.min-manifests"] is None
    # An explicit threshold makes the property irrelevant.
    assert Thresholds(rewrite_manifests_min_manifests=3).min_manifests(table.metadata.properties) == 3
