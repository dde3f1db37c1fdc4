"""health of one table: its --engine is used (the fleet's was; one table's was not)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tablekeeper.catalog.config import load_catalogs
from tablekeeper.jobs import health
from tablekeeper.jobs.common.context import JobContext
from tablekeeper.jobs.health import iceberg as health_iceberg
from tablekeeper.jobs.health.model import TableHealth


@pytest.mark.parametrize(
    ("engine", "expected"), [("driver", None), ("auto", "submitted"), ("spark", "started")]
)
def test_one_iceberg_table_reads_with_the_engine_asked(
    engine: str, expected: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []

    def tally(
        catalog: object, identifier: str, *args: object, spark: object = None, **kwargs: object
    ) -> TableHealth:
        seen.append(spark)
        return TableHealth(identifier, "iceberg")

    monkeypatch.setattr(health_iceberg, "iceberg_health", tally)
    conf = tmp_path / "catalogs.yaml"
    conf.write_text(f"default: fs\ncatalogs:\n  fs:\n    type: filesystem\n    warehouse: {tmp_path}/wh\n")
    context = JobContext(load_catalogs(conf, None), spark=lambda: "started", submitted=lambda: "submitted")  # type: ignore[arg-type,return-value]
    options = health.HealthOptions(table="db.t", engine=engine, output="json", conf_file=str(conf))
    health.run(options, context)
    assert seen == [expected]
