"""Which tables a query reads, and whether it is a query over public tables alone.

The relations of a query are the tables of its FROM tree: its FROM and JOIN items, through FROM subqueries and
the bodies of the CTEs it names. A query whose relations are all declared public tables is a query over public
tables (answered exactly, free); one whose relations include a protected (or undeclared) table is a DP query.
A subquery in an expression (WHERE, HAVING, SELECT, ON) is not a relation: a protected table there, inside a
query over public tables, is refused by the rebuild (protected.py), never answered exactly.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
    >>> c = Catalog((TableSchema("v", "u", (ColumnSpec("u", "BIGINT"),)),),
    ...     public=(PublicTable("d", (ColumnSpec("k", "VARCHAR"),), ("k",)),))
    >>> [reads_public(parse_one(q), c) for q in ("SELECT k FROM d", "SELECT COUNT(*) FROM v JOIN d ON v.u = d.k",
    ...     "WITH q AS (SELECT k FROM d) SELECT k FROM q", "SELECT k FROM d WHERE k IN (SELECT u FROM v)")]
    [True, False, True, True]
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.catalog import Catalog


def reads_public(select: exp.Select, catalog: Catalog) -> bool:
    """Whether every relation of `select` is a declared public table (and no protected table of that name)."""
    tables = relations(select, _ctes(select))
    return bool(tables) and all(
        isinstance(t, exp.Table) and isinstance(t.this, exp.Identifier) and catalog.table(t.name) is None
        and catalog.public_table(t.name) is not None for t in tables)


def relations(select: exp.Expr, ctes: dict[str, exp.Expr], depth: int = 0) -> list[exp.Expr]:
    """The tables of `select`'s FROM tree; a FROM item that is neither a table nor a SELECT subquery is returned
    as it is (not a public table: the query is then not a public query)."""
    if not isinstance(select, exp.Select) or depth > len(ctes) + 50:  # a CTE naming itself is no public query
        return [select]
    source = select.args.get("from_")
    items = [source.this] if source is not None else []
    items += [j.this for j in select.args.get("joins") or []]
    found: list[exp.Expr] = []
    for item in items:
        if isinstance(item, exp.Table) and not item.args.get("db") and item.name.lower() in ctes:
            found += relations(ctes[item.name.lower()], ctes, depth + 1)
        elif isinstance(item, exp.Subquery):
            found += relations(item.this, ctes, depth + 1)
        else:
            found.append(item)
    return found


def _ctes(select: exp.Select) -> dict[str, exp.Expr]:
    with_ = select.args.get("with_")
    return {c.alias.lower(): c.this for c in (with_.expressions if with_ is not None else [])}


def is_single_table(select: exp.Select) -> bool:
    """A query over one table with no join, subquery, CTE or HAVING: the single-table rules (single_table.py)."""
    source = select.args.get("from_")
    return (source is not None and isinstance(source.this, exp.Table) and not select.args.get("joins")
            and not select.args.get("with_") and not select.args.get("having")
            and next(select.find_all(exp.Subquery, exp.Exists), None) is None
            and all(s is select for s in select.find_all(exp.Select)))
