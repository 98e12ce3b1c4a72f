"""Two-level aggregation over units: an aggregate per privacy unit, then a histogram or aggregate over the units
(docs/privacy.md §14). recognise.py finds the shape before a BI wrapper is flattened; inner.py checks the per-unit
query and declares its result as a virtual one-row-per-unit table; sql.py rebuilds the per-unit query; outer.py
analyses the outer query over the virtual table with the ordinary rules, so the price, the rewrite and the release
are the ones every other query has."""
