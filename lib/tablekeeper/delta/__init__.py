"""Delta Lake protocol: pure models, log replay and parsing. No Spark, no paths."""
