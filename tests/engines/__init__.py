"""Engines and the bounding store: DuckDB and Spark, the same rows before noise."""
