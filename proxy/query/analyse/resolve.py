"""Resolve the FROM clause: the one protected table a query reads, its alias, and the qualifiers it may carry.

BI tools qualify every name: `main.visits`, `"main"."visits"`, `demo.main.visits`, `public.visits`. A schema
qualifier must be one of the dataset's `schemas` (DuckDB's `main` by default, plus aliases such as `public`
from the policy) and a database qualifier one of its `databases`; anything else names a table the policy
does not declare, and is refused like one.
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.catalog import Catalog, TableSchema
from proxy.query.errors import PolicyError, UnsupportedQuery
from proxy.query.errors import construct_name as _construct


def resolve_table(select: exp.Select, catalog: Catalog) -> tuple[TableSchema, str | None]:
    """The protected table of `select` and its alias (None without one).

    Example:
        >>> from sqlglot import parse_one
        >>> from proxy.query.catalog import ColumnSpec
        >>> c = Catalog((TableSchema("visits", "uid", (ColumnSpec("uid", "BIGINT"),)),), schemas=("main", "public"))
        >>> t, alias = resolve_table(parse_one('SELECT COUNT(*) FROM "MAIN"."Visits" AS v'), c)
        >>> t.name, alias
        ('visits', 'v')
        >>> resolve_table(parse_one("SELECT COUNT(*) FROM staging.visits"), c)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        proxy.query.errors.PolicyError: unknown schema 'staging' in staging.visits; ... tables are in main, public
    """
    source = select.args.get("from_")
    if source is None:
        raise UnsupportedQuery("the query needs FROM <protected table>", construct="FROM")
    table = source.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        inner = table.this if isinstance(table, exp.Table) else table
        construct = _construct(inner)
        raise UnsupportedQuery(
            f"{construct} is not allowed in FROM; query one protected table by name",
            construct=construct, position="FROM",
        )
    for name, value in table.args.items():
        if name not in ("this", "alias", "db", "catalog") and value:
            construct = {"joins": "JOIN", "laterals": "LATERAL", "pivots": "PIVOT", "sample": "SAMPLE"}.get(
                name, name.upper())
            raise UnsupportedQuery(
                f"{construct} on the table is not supported; name one table", construct=construct, position="FROM",
            )
    check_qualifiers(table, catalog)
    alias = None
    if table.args.get("alias"):
        table_alias = table.args["alias"]
        if table_alias.args.get("columns"):
            raise UnsupportedQuery("column aliases in FROM are not supported", construct="TABLE ALIAS")
        alias = table_alias.name
    schema = catalog.table(table.name)
    if schema is None:
        raise PolicyError(
            f"unknown table {table.name!r}", construct="TABLE", table=table.name,
            hint="tables: " + ", ".join(t.name for t in catalog.tables),
        )
    return schema, alias


def check_qualifiers(node: exp.Table | exp.Column, catalog: Catalog) -> None:
    """Refuse a schema or database qualifier that is not this dataset's (on a table, or a column's table)."""
    for part, allowed, what in (("db", catalog.schemas, "schema"), ("catalog", catalog.databases, "database")):
        value = node.args.get(part)
        if not value:
            continue
        name = value.name if isinstance(value, exp.Identifier) else None
        if name is None or name.lower() not in {a.lower() for a in allowed}:
            shown = value.sql() if isinstance(value, exp.Expr) else str(value)
            where = ", ".join(allowed) if allowed else "no qualifier"
            raise PolicyError(
                f"unknown {what} {shown!r} in {node.sql()}; this dataset's tables are in {where}",
                construct=what.upper(), **{what: shown},
            )
