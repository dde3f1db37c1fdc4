"""convert-delta over the shared Delta tables (written by Spark, Databricks and delta-rs), read back
by the line's Iceberg Spark with exactly the rows the line's delta-spark reads from the source.

Every table with its data files is converted to v3 (those with deletion vectors also to v2, where
the vectors become position delete files); the tables the converter refuses are refused by name.
Both sides are collected as one JSON text per row, in the Iceberg table's types, and compared as
sorted lists: every value of every row, and nothing more than two small scans per table.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tablekeeper.cli import main
from tablekeeper.errors import ExitCode, TablekeeperError
from tests.compat.conftest import Line
from tests.conftest import SQL_CATALOG
from tests.support.delta_corpus import conversion_target
from tests.support.delta_tables import LOG_ONLY, SHARED_TABLES

pytestmark = pytest.mark.spark

# Refused by the converter on every line, with words its one-line message must contain.
REFUSED = {
    "simple_table_features": "Delta reader version 5",
    "table-with-domain-metadata": "no commit file for version 108",
}
WITH_DVS = {"table-with-dv-small", "cdf-table-with-cdc-and-dvs", "table_with_deletion_logs"}
VARIANTS = {"spark-variant-checkpoint", "spark-shredded-variant-preview-delta"}
# 1.1 million rows: what it proves is volume, not a reader feature of the line, and its two scans
# cost a tenth of a line's budget; the corpus tier converts and compares it on the default line.
VOLUME_ONLY = {"COVID-19_NYT"}
CASES = [(n, 3) for n in SHARED_TABLES if n not in LOG_ONLY | VOLUME_ONLY] + [
    (n, 2) for n in sorted(WITH_DVS)
]
HAS_VARIANT = hasattr(T, "VariantType")  # Spark 4.0 on


def json_rows(frame: DataFrame, schema: T.StructType) -> list[str]:
    """Each row as one JSON text, every column cast to the Iceberg table's type first (the
    converter widens byte and short to int, and so on), sorted."""
    cols = [F.col(f"`{f.name}`").cast(f.dataType).alias(f.name) for f in schema]
    return sorted(r[0] for r in frame.select(F.to_json(F.struct(*cols))).collect())


@pytest.mark.parametrize(("name", "version"), CASES)
def test_iceberg_spark_reads_the_conversion_as_delta_spark_reads_the_source(
    spark: Any,
    delta_corpus: Any,
    conf_file: Any,
    line: Line,
    capsys: pytest.CaptureFixture[str],
    name: str,
    version: int,
) -> None:
    if name in REFUSED:
        with pytest.raises(TablekeeperError) as info:
            delta_corpus.converted(name, version)
        assert REFUSED[name] in str(info.value) and "\n" not in str(info.value)
        return
    result = delta_corpus.converted(name, version)
    assert result.status == "ok", result
    assert result.metrics["delete_files"] == (1 if name in WITH_DVS else 0), result.metrics
    target = conversion_target(name, version)
    if name in VARIANTS and not HAS_VARIANT:
        # The line has no variant type: neither its readers nor tablekeeper's Spark paths can take
        # the column, and a job that would need one refuses by name instead of doing otherwise.
        capsys.readouterr()
        code = main(["compact", "--table", target, "--rewrite-all", "--conf-file", str(conf_file)])
        reason = capsys.readouterr().err.strip().splitlines()[-1]
        assert code == ExitCode.REFUSED, reason
        assert "variant" in reason and f"Spark {line.spark_minor}" in reason, reason
        return
    iceberg = spark.table(f"{SQL_CATALOG}.{target}")
    got = json_rows(iceberg, iceberg.schema)
    assert got == json_rows(delta_corpus.rows(name), iceberg.schema)
