"""Engines: DuckDB (the default, one machine) and Spark (a cluster), chosen per dataset in the policy."""
