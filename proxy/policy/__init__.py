"""The policy file: datasets, their catalogs, analysts, keys, limits, and how each reads SQL."""
