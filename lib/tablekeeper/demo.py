"""``make demo``: the main job end to end on embedded defaults.

Writes a sample Delta table with delta-spark (partitioned, deletion vectors on, a delete that
creates DVs), converts it with convert-delta into the local sqlite catalog, and reads the result
back with Iceberg Spark. Everything lives under ./warehouse (or $TABLEKEEPER_WAREHOUSE).
"""

from __future__ import annotations

import shutil
import sys

from tablekeeper.catalog import catalog_for
from tablekeeper.catalog.config import load_catalogs
from tablekeeper.jobs.convert_delta import ConvertOptions, run_convert
from tablekeeper.settings import default_warehouse
from tablekeeper.spark import get_spark

TARGET = "demo.events"


def main() -> int:
    warehouse = default_warehouse()
    catalogs = load_catalogs(warehouse=warehouse)
    catalog_name = catalogs.default
    spark = get_spark("tablekeeper-demo", catalogs=catalogs)
    source = warehouse / "delta" / "events"
    shutil.rmtree(source, ignore_errors=True)
    print(f"1. writing a Delta table with delta-spark at {source}", file=sys.stderr)
    (
        spark.range(0, 1000)
        .selectExpr(
            "id", "concat('user', id % 37) AS user", "id * 1.5 AS amount", "CAST(id % 4 AS STRING) AS region"
        )
        .write.format("delta")
        .partitionBy("region")
        .option("delta.enableDeletionVectors", "true")
        .save(str(source))
    )
    spark.sql(f"DELETE FROM delta.`{source}` WHERE id % 10 = 0")
    delta_rows = spark.read.format("delta").load(str(source)).count()

    print(f"2. converting it to Iceberg v3 as {catalog_name}.{TARGET}", file=sys.stderr)
    spark.sql(f"DROP TABLE IF EXISTS {catalog_name}.{TARGET}")
    result = run_convert(
        ConvertOptions(source=str(source), target=TARGET, format_version=3), catalog_for(catalogs.get(None))
    )
    print(result.to_json())

    print("3. reading the Iceberg table with Iceberg Spark", file=sys.stderr)
    table = f"{catalog_name}.{TARGET}"
    iceberg_rows = spark.table(table).count()
    spark.sql(
        f"SELECT region, count(*) AS rows, round(sum(amount), 1) AS amount FROM {table} "
        "GROUP BY region ORDER BY region"
    ).show()
    spark.sql(f"SELECT content, file_format, record_count FROM {table}.all_files ORDER BY content").show(
        truncate=False
    )
    same = iceberg_rows == delta_rows
    verdict = "identical counts" if same else "MISMATCH"
    print(f"rows: delta-spark {delta_rows}, Iceberg Spark {iceberg_rows} -> {verdict}")
    spark.stop()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
