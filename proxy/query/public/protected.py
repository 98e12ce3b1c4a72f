"""The refusal of a protected table inside a query over public tables (a subquery in WHERE, HAVING, SELECT or ON).

A query over public tables alone is answered exactly and free because its answer is the same on every pair of
neighbouring datasets. A subquery over a protected table breaks that: its rows decide, exactly, which public
rows are shown or what they carry (TPC-H Q20's `ps_availqty > (SELECT 0.5 * SUM(l_quantity) FROM lineitem
WHERE l_partkey = ps_partkey …)` is one exact aggregate of protected rows per outer row). So it is refused, with
what it would have released.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> c = Catalog((TableSchema("lineitem", "l_orderkey", (ColumnSpec("l_orderkey", "BIGINT"),
    ...     ColumnSpec("l_partkey", "BIGINT"), ColumnSpec("l_quantity", "INTEGER"))),))
    >>> sub = parse_one("SELECT 0.5 * SUM(l_quantity) FROM lineitem WHERE l_partkey = ps_partkey")
    >>> refusal(sub, "lineitem", "WHERE", c).message.split(": ")[1].split("; ")[0]
    'a correlated aggregate over protected rows would be a release inside the WHERE, exact and free'
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.catalog import Catalog
from proxy.query.errors import UnsupportedQuery


def refusal(select: exp.Select, table: str, clause: str, catalog: Catalog) -> UnsupportedQuery:
    """Why the subquery `select` over the protected `table`, in `clause` of a query over public tables, is refused."""
    aggregated = any(isinstance(e, exp.AggFunc) for item in select.expressions for e in item.walk())
    if aggregated:
        what = "a correlated aggregate" if _correlated(select, catalog) else "an aggregate"
        why = f"{what} over protected rows would be a release inside the {clause}, exact and free"
    else:
        why = (f"protected rows would decide, exactly and free, which public rows the {clause} keeps (a membership "
               "test is a release of those rows)")
    return UnsupportedQuery(
        f"the subquery over the protected table {table!r} in a query over public tables is refused: {why}; "
        "a query over public tables alone is answered exactly, and protected rows only through a DP aggregate "
        "(FROM the protected table, GROUP BY public keys)", construct="SUBQUERY", table=table, position=clause,
        hint="query the protected table as a DP GROUP BY, or drop the subquery")


def _correlated(select: exp.Select, catalog: Catalog) -> bool:
    """Whether a column of `select` names something outside its own FROM (an outer query's table or column)."""
    items = [select.args["from_"].this] if select.args.get("from_") is not None else []
    items += [j.this for j in select.args.get("joins") or []]
    local = {i.alias_or_name.lower() for i in items} | {i.name.lower() for i in items if isinstance(i, exp.Table)}
    declared: set[str] = set()
    for item in items:
        table = catalog.table(item.name) or catalog.public_table(item.name) if isinstance(item, exp.Table) else None
        declared |= {c.name.lower() for c in table.columns} if table is not None else set()
    return any(c.table.lower() not in local if c.table else c.name.lower() not in declared
               for c in select.find_all(exp.Column))
