"""The bounding store: built once per dataset (DuckDB or Spark), kept true, swapped atomically."""
