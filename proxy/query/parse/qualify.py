"""Unqualified columns of a comma join qualified by the one FROM table that declares them.

`FROM orders, lineitem WHERE o_orderkey = l_orderkey` (every TPC-H text) names no table in its equality, so the
comma-join rule (comma_joins.py), which reads syntax only, cannot tell which tables it connects. SQL resolves
an unqualified column to the one table in FROM that has it; this rule does the same against the policy's
declarations: a column of the WHERE that exactly one FROM table declares gets that table's alias (or name); the
unit column a `unit_via` table has only in the store is not one of its columns here.
A column no FROM table declares, or that several declare, is left as written, and the analyser then resolves or
refuses it as before. The query is the same query: the product reads declared columns only, and a name that
one table alone declares is the column SQL would resolve it to.
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.catalog import Catalog


def qualify(select: exp.Select, catalog: Catalog) -> exp.Select:
    """`select` with the WHERE's unqualified columns qualified, when it has a comma join (a copy; else itself).

    Example:
        >>> from sqlglot import parse_one
        >>> from proxy.query.catalog import ColumnSpec, TableSchema
        >>> o = TableSchema("orders", "ck", (ColumnSpec("ck", "BIGINT"), ColumnSpec("ok", "BIGINT")))
        >>> li = TableSchema("lineitem", "lk", (ColumnSpec("lk", "BIGINT"), ColumnSpec("ck", "BIGINT")))
        >>> sql = "SELECT COUNT(*) FROM orders, lineitem l WHERE ok = lk AND ck > 3"
        >>> qualify(parse_one(sql), Catalog((o, li))).sql()
        'SELECT COUNT(*) FROM orders, lineitem AS l WHERE orders.ok = l.lk AND ck > 3'
    """
    joins = select.args.get("joins") or []
    source = select.args.get("from_")
    where = select.args.get("where")
    if source is None or where is None or not any(not j.args.get("on") and not j.args.get("using") for j in joins):
        return select
    owners: dict[str, list[str]] = {}
    for node in [source.this, *(j.this for j in joins)]:
        if not isinstance(node, exp.Table):
            continue
        table = catalog.table(node.name) or catalog.public_table(node.name)
        if table is None:
            continue
        for column in table.columns:
            if getattr(table, "unit_via", ()) and column.name == table.privacy_unit:
                continue  # materialised by the store, not a column of the table as written (SQL would not see it)
            owners.setdefault(column.name.lower(), []).append(node.alias_or_name)
    out = select.copy()
    changed = False
    for column in out.args["where"].find_all(exp.Column):
        if column.table or column.find_ancestor(exp.Select) is not out:
            continue  # qualified already, or inside a subquery (its own FROM resolves it)
        found = owners.get(column.name.lower(), [])
        if len(found) == 1:
            column.set("table", exp.to_identifier(found[0]))
            changed = True
    return out if changed else select
