"""The SQL layer: plan(sql) = parse → analyse → price → rewrite (proxy/query/planner.py), all pure."""
