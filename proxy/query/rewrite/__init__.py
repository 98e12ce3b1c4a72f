"""The SQL that runs: contribution bounding and per-group measures, rendered per engine."""
