"""Scalar subqueries over public tables inside a query over protected ones (issue #31, docs/privacy.md §3.2):
`amount > (SELECT AVG(price) FROM products)`. The subquery's value is a function of public data alone, so the
condition is a row-level filter like a comparison with a literal; to keep every step after admission total
(§11.1), the value is computed before the query is planned, exactly, by the public path (the subquery checked and
rebuilt as a query over public tables, read-only), and folded into the query as a typed literal of the subquery's
own type (`CAST('12.5' AS DOUBLE)`, NULL when it has no row); a subquery that returns more than one row is refused,
free, as DuckDB would fail on it. The analysis then reads the literal as DuckDB compares it (analyse/literals.py).

`scalar_subqueries` finds them (uncorrelated, public tables alone; a correlated one is refused), `value_query` is
what runs for each (its type and its value as text, at most two rows), and `folded` / `fold` turn the rows into
the literal and put it in place. The module is pure: the edge (proxy/pipeline.py) runs `value_query`.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
    >>> p = PublicTable("products", (ColumnSpec("sku", "VARCHAR"), ColumnSpec("price", "DECIMAL(15,2)")), ("sku",))
    >>> c = Catalog((TableSchema("v", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("x", "DOUBLE"))),), public=(p,))
    >>> q = parse_one("SELECT COUNT(*) FROM v WHERE x > (SELECT AVG(price) FROM products)")
    >>> [s.sql() for s in scalar_subqueries(q, c)]
    ['(SELECT AVG(price) FROM products)']
    >>> print(value_query(public_value(scalar_subqueries(q, c)[0], c)).sql("duckdb"))
    SELECT TYPEOF("q"."v"), CAST("q"."v" AS TEXT) FROM (SELECT 1) AS "one" LEFT JOIN (SELECT AVG("t1"."price") AS \
"AVG(price)" FROM "products" AS "t1" LIMIT 2) AS "q"("v") ON TRUE
    >>> fold(q, c, (folded((("DOUBLE", "12.5"),)),)).sql()
    "SELECT COUNT(*) FROM v WHERE x > CAST('12.5' AS DOUBLE)"
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query import types
from proxy.query.catalog import Catalog
from proxy.query.errors import PolicyError, UnsupportedQuery
from proxy.query.public.joined import rebuilt
from proxy.query.public.result import PublicQuery
from proxy.query.public.sources import reads_public

_TYPES = {"int": "INTEGER", "bigint": "BIGINT", "smallint": "SMALLINT", "tinyint": "TINYINT", "string": "VARCHAR",
          "double": "DOUBLE", "float": "FLOAT", "date": "DATE", "timestamp": "TIMESTAMP", "boolean": "BOOLEAN"}
Folded = exp.Expr  # a subquery's value as a typed literal (what `folded` gives and `fold` takes)


def scalar_subqueries(select: exp.Select, catalog: Catalog) -> tuple[exp.Subquery, ...]:
    """The outermost scalar subqueries of `select` (a value in an expression, not a relation, IN or EXISTS) whose
    relations are public tables alone, in the order met; a correlated one is refused."""
    found: list[exp.Subquery] = []
    for node in select.find_all(exp.Subquery):
        if isinstance(node.parent, exp.From | exp.Join | exp.Exists) or node.arg_key == "query" or _inside(node, found):
            continue
        inner = node.this
        if not isinstance(inner, exp.Select) or not reads_public(inner, catalog):
            continue  # over a protected table: analysed, and refused where it would read protected rows exactly
        outer = _outer_column(inner, catalog)
        if outer is not None:
            raise UnsupportedQuery(
                f"the scalar subquery {_short(node)} over public tables reads {outer.sql()} of the outer query "
                "(correlated): its value would differ per row", construct="SCALAR SUBQUERY",
                hint="make it uncorrelated (its value one constant), or join the public table on its key instead")
        found.append(node)
    return tuple(found)


def public_value(subquery: exp.Subquery, catalog: Catalog) -> PublicQuery:
    """The subquery checked and rebuilt by the public rules, asking for at most 2 rows (more than 1 is refused)."""
    query = rebuilt(subquery.this.copy(), catalog, max_rows=1)
    if len(query.columns) != 1:
        raise UnsupportedQuery(f"the scalar subquery {_short(subquery)} selects {len(query.columns)} columns; a "
                               "value compared in a condition is one column", construct="SCALAR SUBQUERY")
    return query


def value_query(query: PublicQuery) -> exp.Select:
    """What runs for a subquery's value: its DuckDB type and its value as text, one row when it has none or one
    (a LEFT JOIN of one row: no row gives the type's NULL), two when it has more."""
    q = exp.to_identifier("q", quoted=True)
    column = exp.column("v", table="q", quoted=True)
    joined = exp.Subquery(this=query.tree.copy(), alias=exp.TableAlias(
        this=q, columns=[exp.to_identifier("v", quoted=True)]))
    one = exp.Subquery(this=exp.select("1"), alias=exp.TableAlias(this=exp.to_identifier("one", quoted=True)))
    return exp.select(exp.Anonymous(this="TYPEOF", expressions=[column]),
                      exp.cast(column.copy(), exp.DataType.Type.TEXT)).from_(one).join(
        joined, on=exp.true(), join_type="LEFT")


def folded(rows: tuple[tuple[object, ...], ...], shown: str = "") -> exp.Expr:
    """The typed literal standing for the value `value_query` returned (its rows), or a refusal (free: before any
    charge) when the subquery returned more than one row or a value of a type no comparison here takes.

    Example:
        >>> [folded(r).sql("duckdb") for r in ((("DECIMAL(15,2)", "3.50"),), (("DATE", None),), (("VARCHAR", "x"),))]
        ["CAST('3.50' AS DECIMAL(15, 2))", 'CAST(NULL AS DATE)', "CAST('x' AS TEXT)"]
    """
    if len(rows) > 1:
        raise PolicyError(
            f"the scalar subquery {shown} over public tables returns more than one row, so it has no value to "
            "compare with (DuckDB would fail on it)", construct="SCALAR SUBQUERY",
            hint="make it return one row: an aggregate (MIN, MAX, AVG, ...) or a filter on a key")
    type_text, value = (str(rows[0][0]), rows[0][1]) if rows else ("NULL", None)
    name = _TYPES.get(type_text, type_text)
    try:
        kind = types.kind(name)
    except ValueError:
        kind = None
    if (kind is None and name.upper() != "TIMESTAMP") or name.upper() == "NULL":
        raise UnsupportedQuery(f"the scalar subquery {shown} over public tables has type {type_text}; compare with "
                               "a number, a date, text or a boolean", construct="SCALAR SUBQUERY")
    if kind == "boolean" and value is not None:
        return exp.Boolean(this=str(value).lower() == "true")
    to = exp.DataType.build("TEXT" if kind == "string" else types.normalize(name) if kind else name)
    return exp.cast(exp.Null() if value is None else exp.Literal.string(str(value)), to)


def fold(select: exp.Select, catalog: Catalog, values: tuple[Folded, ...]) -> exp.Select:
    """`select` (a copy) with its scalar subqueries over public tables replaced by `values`, in order."""
    tree = select.copy()
    found = scalar_subqueries(tree, catalog)
    if len(found) != len(values):
        raise UnsupportedQuery(
            "a scalar subquery over public tables is evaluated by the server before the query is planned; this "
            "path (a plan without the engine, e.g. `dpproxy explain`) cannot", construct="SCALAR SUBQUERY",
            hint="preview it through the server (POST /v1/query/preview), or compare with the value as a literal")
    for node, value in zip(found, values, strict=True):
        node.replace(value.copy())
    return tree


def _outer_column(inner: exp.Select, catalog: Catalog) -> exp.Column | None:
    """A column of `inner` that none of its own relations has: a qualifier it does not define, or a name no public
    table it reads declares (nor an output alias)."""
    aliases = {t.alias_or_name.lower() for t in inner.find_all(exp.Table)}
    aliases |= {s.alias.lower() for s in inner.find_all(exp.Subquery) if s.alias}
    declared = {c.name.lower() for t in inner.find_all(exp.Table) if (p := catalog.public_table(t.name)) is not None
                for c in p.columns}
    own = {a.alias.lower() for a in inner.find_all(exp.Alias)}
    for column in inner.find_all(exp.Column):
        if column.table:
            if column.table.lower() not in aliases:
                return column
        elif column.name.lower() not in declared | own:
            return column
    return None


def _inside(node: exp.Expr, found: list[exp.Subquery]) -> bool:
    parent = node.parent
    while parent is not None:
        if any(parent is f for f in found):
            return True
        parent = parent.parent
    return False


def _short(node: exp.Expr) -> str:
    text = node.sql()
    return text if len(text) <= 120 else text[:117] + "…"
