"""Queries over public tables alone (a product catalogue, a calendar, TPC-H's part and supplier, a BI tool's filter
dropdown): answered exactly, with no noise and no charge, since the policy declares every table they read public
(docs/privacy.md §3, *Public tables alone*, and §3.1). Each is still checked by a positive allow-list and rebuilt from
declared names and checked literals, like every other query (docs/architecture.md, the security boundary).

- sources.py: which tables a query reads; `reads_public`, whether every one of its relations is public.
- single_table.py: one table, no join or subquery: the WHERE rules of the DP path (analyse/where.py).
- joined.py: joins, subqueries (correlated or not), CTEs, HAVING: clause by clause, with scope.py (names) and
  expressions.py (the allow-list of nodes); protected.py: the refusal of a protected table in a subquery.
- result.py: `PublicQuery`, what the rebuild gives.

Example:
    >>> from proxy.query.parse.statement import parse
    >>> from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
    >>> d = PublicTable("departments", (ColumnSpec("category", "VARCHAR"), ColumnSpec("department", "VARCHAR")),
    ...     ("category",))
    >>> c = Catalog((TableSchema("v", "u", (ColumnSpec("u", "BIGINT"),)),), public=(d,))
    >>> public_query(parse("SELECT COUNT(*) FROM departments a JOIN departments b ON a.category = b.category"),
    ...     c, max_rows=10).tree.sql("duckdb")
    'SELECT COUNT(*) AS "COUNT(*)" FROM "departments" AS "t1" JOIN "departments" AS "t2" ON "t1"."category" = \
"t2"."category" LIMIT 11'
    >>> public_query(parse("SELECT COUNT(*) FROM v"), c, max_rows=1000) is None  # a protected table: DP
    True
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.catalog import Catalog
from proxy.query.public.joined import rebuilt
from proxy.query.public.result import PublicQuery
from proxy.query.public.single_table import single_table_query
from proxy.query.public.sources import is_single_table, reads_public

__all__ = ["PublicQuery", "public_query", "reads_public"]


def public_query(select: exp.Select, catalog: Catalog, *, max_rows: int) -> PublicQuery | None:
    """`select` checked and rebuilt as a query over public tables; None when one of its relations is a protected
    (or undeclared) table, so it is analysed as a DP query; a refusal for anything else."""
    if not reads_public(select, catalog):
        return None
    if is_single_table(select):
        return single_table_query(select, catalog, max_rows=max_rows)
    return rebuilt(select, catalog, max_rows=max_rows)
