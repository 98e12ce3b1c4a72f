"""The refusals of subqueries in WHERE, each naming its construct and why it has no DP answer here
(docs/privacy.md §13.4): a correlation that does not pin the inner rows to the outer row's unit, `NOT IN` over a
protected table, an aggregate inside a subquery, a scalar subquery over protected rows (TPC-H Q17, Q20, Q22), and
a subquery where no semi-join may stand.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> from proxy.query.analyse.names import Names
    >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("x", "INTEGER")))
    >>> error = scalar_subquery(parse_one("x < (SELECT AVG(x) FROM t)"), Names(t, None, Catalog((t,))))
    >>> error.code, error.detail["construct"], error.message[:52]
    ('policy', 'SCALAR SUBQUERY', 'a scalar subquery over the protected table t in x < ')
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.analyse.names import Names
from proxy.query.analyse.refusals import located, where
from proxy.query.catalog import ColumnSpec, PublicTable, TableSchema
from proxy.query.errors import PolicyError, UnsupportedQuery

HINT = ("allowed in WHERE: [NOT] EXISTS (SELECT * FROM t WHERE …) and col [NOT] IN (SELECT c FROM t WHERE …), over "
         "a public table, or over a protected table correlated by an equality on the privacy unit or on a declared "
         "unit_via key of the outer row (l_orderkey = o_orderkey); no aggregate, GROUP BY, JOIN or nested subquery")
PINS = ("a subquery over other units' rows would be a release inside the WHERE: removing one unit could change "
         "other units' filters, and so the answer, by any amount")
_COMPARE = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def protected_tables(node: exp.Expr, names: Names) -> list[str]:
    """The protected tables a subquery reads."""
    found = [t.name for t in node.find_all(exp.Table) if names.catalog.table(t.name) is not None]
    return list(dict.fromkeys(found))


def shape(node: exp.Expr, allowed: str) -> UnsupportedQuery:
    return UnsupportedQuery(f"a subquery in WHERE must be {allowed}, not {short(node)}{where(node)}",
                            construct="SUBQUERY", hint=HINT, **located(node))


def null_in(node: exp.Expr, table: TableSchema, selected: ColumnSpec) -> PolicyError:
    """NOT IN over a protected table: `x NOT IN (SELECT c …)` is NULL (the row dropped) for every row once any row
    that passes the subquery's WHERE, of any unit, has c NULL, and for x NULL once any row passes: other units'
    rows would decide each row's filter. (A positive IN is exact: in WHERE, outside NOT, its NULL drops the row
    as FALSE does, so it keeps exactly the rows an EXISTS on `c = x` keeps, which reads the pinned rows only.)"""
    return PolicyError(
        f"NOT IN (SELECT {selected.name} FROM {table.name} …){where(node)} over a protected table is NULL for every "
        f"row as soon as any unit's row in it has a NULL {selected.name}: {PINS}", construct="NOT IN SUBQUERY",
        table=table.name, hint=f"write NOT EXISTS (SELECT * FROM {table.name} WHERE {selected.name} = <outer column> "
        "AND …), which reads only the rows of the outer row's unit", **located(node))


def aggregate(node: exp.Expr, table: TableSchema | PublicTable) -> PolicyError | UnsupportedQuery:
    if isinstance(table, TableSchema):
        return PolicyError(
            f"an aggregate inside a subquery over the protected table {table.name} ({short(node)}) is an exact "
            f"statistic of protected rows inside the WHERE, which has no DP answer here", construct="SUBQUERY",
            table=table.name, hint=HINT, **located(node))
    return shape(node, "a filter without aggregates")


def scalar_subquery(node: exp.Expr, names: Names) -> PolicyError | UnsupportedQuery:
    """The refusal of a comparison with a scalar subquery (`l_quantity < (SELECT 0.2 * AVG(l_quantity) …)`)."""
    protected = protected_tables(node, names)
    if not protected:
        return UnsupportedQuery(
            f"a scalar subquery in WHERE ({short(node)}) is not supported; compare with a literal",
            construct="SCALAR SUBQUERY", hint=HINT, **located(node))
    tables = ", ".join(protected)
    return PolicyError(
        f"a scalar subquery over the protected table {tables} in {short(node)} compares each row with an exact "
        f"statistic of every unit's rows: {PINS}; it has no DP answer here",
        construct="SCALAR SUBQUERY", table=protected[0],
        hint="release the statistic first (its own DP query) and compare with that value as a literal",
        **located(node))


def not_here(node: exp.Expr, names: Names) -> UnsupportedQuery | PolicyError:
    """The refusal of a subquery where only the top-level WHERE of a query over a protected table may hold one; a
    comparison with a scalar subquery over protected rows inside it is named as such (TPC-H Q20 over supplier)."""
    compared = node.find_all(*_COMPARE, exp.Between)
    scalar = next((c for c in compared if c.find(exp.Select) and protected_tables(c, names)), None)
    if scalar is not None:
        return scalar_subquery(scalar, names)
    protected = protected_tables(node, names)
    if protected:
        return UnsupportedQuery(
            f"a subquery over the protected table {', '.join(protected)} ({short(node)}) is allowed only in the WHERE "
            f"of a query over a protected table of the same privacy unit, as a filter of each row by its own unit's "
            f"rows; here it would read protected rows exactly", construct="SUBQUERY", table=protected[0],
            hint=HINT, **located(node))
    return UnsupportedQuery(f"a subquery ({short(node)}) is allowed only as a condition of the WHERE",
                            construct="SUBQUERY", hint=HINT, **located(node))


def short(node: exp.Expr) -> str:
    text = node.sql()
    return text if len(text) <= 120 else text[:117] + "…"
