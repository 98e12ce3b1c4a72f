"""Flatten the wrapper BI tools put around a question: one level of `FROM (SELECT …) AS q`, or one
non-recursive CTE read in FROM, that only filters and projects columns, becomes one SELECT over the table.

The inner query may select `*` and columns (renamed or not) of one table and filter with WHERE; the outer
query then reads the inner names, which are mapped back to the table's columns, and the two WHERE clauses
are joined with AND. Nothing else is flattened (aggregates, GROUP BY, DISTINCT, LIMIT, ORDER BY, joins,
a second CTE or level): those are refused with what to write instead. The result is an ordinary SELECT,
checked by the allow-list like any other, so flattening adds no way to reach data.
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.errors import UnsupportedQuery

_INNER_ARGS = frozenset({"expressions", "from_", "where"})
_HINT = ("a subquery or CTE may only select columns of one table and filter them with WHERE; "
         "aggregate in the outer query")


def flatten(select: exp.Select) -> exp.Select:
    """`select` with its one subquery or CTE merged into it (a copy; `select` is returned when there is none).

    Example:
        >>> from sqlglot import parse_one
        >>> sql = "SELECT q.r, COUNT(*) FROM (SELECT region AS r FROM visits v WHERE v.age > 30) AS q GROUP BY q.r"
        >>> flatten(parse_one(sql)).sql()
        'SELECT q.region AS r, COUNT(*) FROM visits AS q WHERE age > 30 GROUP BY q.region'
        >>> flatten(parse_one("WITH t AS (SELECT * FROM visits WHERE age > 1) SELECT COUNT(*) FROM t")).sql()
        'SELECT COUNT(*) FROM visits AS t WHERE age > 1'
    """
    with_ = select.args.get("with_")
    source = select.args.get("from_")
    if with_ is None and not (source is not None and isinstance(source.this, exp.Subquery)):
        return select
    outer = select.copy()
    if with_ is not None:
        inner, alias = _cte(outer)
    else:
        subquery = outer.args["from_"].this
        if not isinstance(subquery.this, exp.Select) or not subquery.alias:
            raise UnsupportedQuery(f"a subquery in FROM needs an alias and one SELECT; {_HINT}",
                                   construct="SUBQUERY")
        inner, alias = subquery.this, subquery.alias
    table, names, where = _inner(inner)
    outer.set("from_", exp.From(this=exp.Table(**{**table.args, "alias": exp.TableAlias(
        this=exp.to_identifier(alias))})))
    if names is not None:
        _check_reads(outer, names, alias)
    renames = {k: v for k, v in (names or {}).items() if k != v.lower()}
    if renames:
        # a renamed column selected as is keeps the name the analyst sees (`q.r` stays a column `r`)
        outer.set("expressions", [
            exp.alias_(e, e.name) if isinstance(e, exp.Column) and e.name.lower() in renames else e
            for e in outer.expressions
        ])
        outer = outer.transform(lambda node: _renamed(node, renames, alias))
    if where is not None:
        outer_where = outer.args.get("where")
        outer.set("where", exp.Where(this=exp.and_(where, outer_where.this) if outer_where else where))
    return outer


def _cte(outer: exp.Select) -> tuple[exp.Select, str]:
    with_ = outer.args["with_"]
    ctes = with_.expressions
    if with_.args.get("recursive") or len(ctes) != 1 or not isinstance(ctes[0].this, exp.Select):
        raise UnsupportedQuery(f"only one non-recursive CTE is supported; {_HINT}", construct="WITH")
    name = ctes[0].alias
    source = outer.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table) or source.this.name.lower() != name.lower() \
            or source.this.args.get("db") or outer.args.get("joins"):
        raise UnsupportedQuery(f"read the CTE {name!r} in FROM, and nothing else", construct="WITH")
    outer.set("with_", None)
    alias = source.this.alias or name
    return ctes[0].this, alias


def _inner(inner: exp.Select) -> tuple[exp.Table, dict[str, str] | None, exp.Expr | None]:
    """The inner query's table, its output names mapped to the table's columns (None when it selects `*`,
    which passes every column through), and its WHERE (unqualified)."""
    for name, value in inner.args.items():
        if name not in _INNER_ARGS and value:
            construct = {"joins": "JOIN", "group": "GROUP BY", "order": "ORDER BY", "with_": "WITH"}.get(
                name, name.upper())
            raise UnsupportedQuery(f"{construct} inside a subquery or CTE is not supported; {_HINT}",
                                   construct=construct)
    source = inner.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table) or not isinstance(source.this.this, exp.Identifier):
        raise UnsupportedQuery(f"a subquery or CTE reads one table by name; {_HINT}", construct="SUBQUERY")
    table = source.this.copy()
    table.set("alias", None)
    renames: dict[str, str] = {}
    star = False
    for projection in inner.expressions:
        if isinstance(projection, exp.Star):
            star = True
            continue
        node = projection.this if isinstance(projection, exp.Alias) else projection
        if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier):
            raise UnsupportedQuery(f"{node.sql()} inside a subquery or CTE is not supported; {_HINT}",
                                   construct="SUBQUERY", position="SELECT")
        renames[projection.alias_or_name.lower()] = node.name
    where = inner.args.get("where")
    condition = None
    if where is not None:
        condition = where.this.transform(_unqualified)  # one table: its alias or name qualifies nothing
    if star and renames:
        raise UnsupportedQuery(f"select `*` or named columns inside a subquery or CTE, not both; {_HINT}",
                               construct="SUBQUERY", position="SELECT")
    return table, None if star else renames, condition


def _check_reads(outer: exp.Select, names: dict[str, str], alias: str) -> None:
    """The outer query reads only what the inner one selects (as SQL would say), besides its own aliases."""
    own = {e.alias.lower() for e in outer.expressions if isinstance(e, exp.Alias)}
    for column in outer.find_all(exp.Column):
        name = column.name.lower()
        if column.table.lower() in ("", alias.lower()) and name not in names and name not in own:
            raise UnsupportedQuery(
                f"column {column.name!r} is not selected by the subquery or CTE {alias!r}; select it there",
                construct="COLUMN", column=column.name,
            )


def _unqualified(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Column) and node.table:
        return exp.column(node.this.copy())
    return node


def _renamed(node: exp.Expr, renames: dict[str, str], alias: str) -> exp.Expr:
    if isinstance(node, exp.Column) and node.name.lower() in renames and node.table.lower() in ("", alias.lower()):
        renamed = node.copy()
        renamed.set("this", exp.to_identifier(renames[node.name.lower()]))
        return renamed
    return node
