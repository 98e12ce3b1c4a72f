"""Flatten the wrapper BI tools put around a question: one level of `FROM (SELECT …) AS q`, or one
non-recursive CTE read in FROM, that only filters, projects columns and computes per-row values, becomes one
SELECT over the table.

The inner query may select `*` or columns (renamed or not) of one table, computed per-row values with an
alias (`amount * 2 AS double_amount`, beside `*` too), and filter with WHERE; the outer query then reads the
inner names, which are mapped back to the table's columns or replaced by the expressions they name (checked
by the allow-list where they are used, as if written there), and the two WHERE clauses are joined with AND.
A computed value the outer query never reads is dropped, never run. An inner query that joins tables is
flattened by parse/flatten_joins.py. Nothing else is flattened (aggregates, GROUP BY, DISTINCT, LIMIT, ORDER BY,
a second CTE or level): those are refused with what to write instead. The result is an ordinary SELECT,
checked by the allow-list like any other, so flattening adds no way to reach data.
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.errors import UnsupportedQuery
from proxy.query.parse.flatten_joins import flatten_joined

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
    if inner.args.get("joins"):
        return flatten_joined(outer, inner, alias)  # joins inside: parse/flatten_joins.py
    table, star, names, where = inner_parts(inner)
    outer.set("from_", exp.From(this=exp.Table(**{**table.args, "alias": exp.TableAlias(
        this=exp.to_identifier(alias))})))
    if not star:
        _check_reads(outer, names, alias)
    renames = {k: v for k, v in names.items() if not (isinstance(v, exp.Column) and k == v.name.lower())}
    if renames:
        # a renamed or computed column selected as is keeps the name the analyst sees (`q.r` stays `r`)
        outer.set("expressions", [
            exp.alias_(e, e.name) if isinstance(e, exp.Column) and e.name.lower() in renames else e
            for e in outer.expressions
        ])
        # collected first, replaced after: a computed column's own columns are never substituted again
        for column in list(outer.find_all(exp.Column)):
            replacement = _renamed(column, renames, alias)
            if replacement is not column:
                column.replace(replacement)
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
        raise UnsupportedQuery(  # TPC-H Q15: the CTE joined to a table and read again in a subquery of its maximum
            f"the CTE {name!r} is read beside another table or more than once: each read of protected rows is a "
            "release of its own, and a query that combines them (rows equal to a maximum of the CTE's) compares rows "
            "with an exact statistic of every unit's rows, which has no DP answer here",
            construct="WITH", hint=f"read {name!r} once, alone in FROM; {_HINT}")
    outer.set("with_", None)
    alias = source.this.alias or name
    return ctes[0].this, alias


def inner_parts(inner: exp.Select) -> tuple[exp.Table, bool, dict[str, exp.Expr], exp.Expr | None]:
    """The inner query's table; whether it selects `*` (every column passes through); its other output names
    mapped to what they compute from the table's columns (a column, or a per-row expression that the
    allow-list checks where the outer query uses it); and its WHERE (unqualified)."""
    for name, value in inner.args.items():
        if name not in _INNER_ARGS and value:
            construct = {"group": "GROUP BY", "order": "ORDER BY", "with_": "WITH"}.get(
                name, name.upper())
            raise UnsupportedQuery(f"{construct} inside a subquery or CTE is not supported; {_HINT}",
                                   construct=construct)
    source = inner.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table) or not isinstance(source.this.this, exp.Identifier):
        raise UnsupportedQuery(f"a subquery or CTE reads one table by name; {_HINT}", construct="SUBQUERY")
    table = source.this.copy()
    table.set("alias", None)
    names: dict[str, exp.Expr] = {}
    star = False
    for projection in inner.expressions:
        if isinstance(projection, exp.Star):
            star = True
            continue
        node = projection.this if isinstance(projection, exp.Alias) else projection
        if isinstance(node, exp.Column) and isinstance(node.this, exp.Identifier):
            names[projection.alias_or_name.lower()] = exp.column(node.name)
        elif isinstance(projection, exp.Alias) and not node.find(exp.AggFunc, exp.Window, exp.Select, exp.Star):
            names[projection.alias.lower()] = node.transform(_unqualified)  # checked where it is used
        else:
            raise UnsupportedQuery(f"{node.sql()} inside a subquery or CTE is not supported; {_HINT}",
                                   construct="SUBQUERY", position="SELECT")
    where = inner.args.get("where")
    condition = None
    if where is not None:
        condition = where.this.transform(_unqualified)  # one table: its alias or name qualifies nothing
    if star and any(isinstance(v, exp.Column) for v in names.values()):
        raise UnsupportedQuery(f"select `*` or named columns inside a subquery or CTE, not both; {_HINT}",
                               construct="SUBQUERY", position="SELECT")
    return table, star, names, condition


def _check_reads(outer: exp.Select, names: dict[str, exp.Expr], alias: str) -> None:
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


def _renamed(node: exp.Column, renames: dict[str, exp.Expr], alias: str) -> exp.Expr:
    if node.name.lower() in renames and node.table.lower() in ("", alias.lower()):
        target = renames[node.name.lower()]
        if isinstance(target, exp.Column):
            renamed = node.copy()
            renamed.set("this", exp.to_identifier(target.name))
            return renamed
        return exp.Paren(this=target.copy())
    return node
