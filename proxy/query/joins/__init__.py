"""A join's virtual table: the records describing a chain of joins and the SQL computing it (chain.py)."""
