"""Iceberg table format: pure models, (de)serialisation and planning helpers. No Spark, no paths."""
