"""Flatten a subquery or CTE that joins tables: `SELECT … FROM (SELECT <named values> FROM a, b, … WHERE …) AS q`
becomes one SELECT over the inner query's FROM, its joins and aliases as written (TPC-H Q7, Q8, Q9).

The inner query is a relation: its joined rows, filtered by its WHERE, each mapped to the values it names. The
outer query reads only those names, so every column it reads is replaced by the expression the name stands for
(a column as written, `n1.n_name`, or a per-row value in parentheses, `(l_extendedprice * (1 - l_discount))`),
and the outer WHERE joins the inner one with AND. The rows the outer query sees, and every value it computes
from them, are then the same: a per-row value is the same function of the same joined row wherever it is
written, and two filters of one relation are one filter of their conjunction. That holds for an inner LEFT
JOIN too: both WHERE clauses filter the joined rows after the join, before and after.

What would change the meaning is refused: `*` (two tables may share a name), two outputs of one name, an output
read under a name it does not have, an aggregate, window, DISTINCT, GROUP BY, LIMIT or ORDER BY inside, a JOIN
of the outer query beside the subquery, and an outer alias read outside ORDER BY (after flattening it could be
resolved to a column of an inner table instead; ORDER BY resolves an output name first, in both). The result
is an ordinary SELECT with joins, which the join rules (proxy/query/analyse/joins.py) check like any other,
so flattening adds no way to reach data.
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.errors import UnsupportedQuery

_INNER_ARGS = frozenset({"expressions", "from_", "where", "joins"})
_HINT = ("a subquery or CTE with joins may select named columns and per-row values of its tables (each under "
         "its own name) and filter them with WHERE; aggregate in the outer query")


def flatten_joined(outer: exp.Select, inner: exp.Select, alias: str) -> exp.Select:
    """`outer`, which reads `inner` (a SELECT with joins) under `alias`, as one SELECT over `inner`'s tables.
    `outer` is modified (the caller passes a copy) and returned.

    Example:
        >>> from sqlglot import parse_one
        >>> sql = ("SELECT q.n, SUM(x) AS s FROM (SELECT u.name AS n, v.amount * 2 AS x FROM visits v, users u "
        ...        "WHERE v.uid = u.uid) AS q WHERE n <> 'a' GROUP BY q.n ORDER BY s")
        >>> outer = parse_one(sql)
        >>> print(flatten_joined(outer, outer.args["from_"].this.this, "q").sql())
        SELECT u.name AS n, SUM((v.amount * 2)) AS s FROM visits AS v, users AS u WHERE v.uid = u.uid AND \
u.name <> 'a' GROUP BY u.name ORDER BY s
    """
    names = _outputs(inner)
    outer.set("from_", None)  # the subquery's own columns are not the outer query's reads
    if outer.args.get("joins"):
        raise UnsupportedQuery(f"a JOIN beside a subquery or CTE that joins tables is not supported; {_HINT}",
                               construct="JOIN")
    reads = _reads(outer, names, alias)
    outer.set("expressions", [
        exp.alias_(e, e.name, copy=False) if isinstance(e, exp.Column) and e.name.lower() in names else e
        for e in outer.expressions
    ])
    # collected first, replaced after: an inner value's own columns are never substituted again
    for column in reads:
        target = names[column.name.lower()]
        column.replace(target.copy() if isinstance(target, exp.Column) else exp.Paren(this=target.copy()))
    outer.set("from_", inner.args["from_"].copy())
    outer.set("joins", [j.copy() for j in inner.args.get("joins") or []])
    where, outer_where = inner.args.get("where"), outer.args.get("where")
    if where is not None:
        condition = where.this.copy()
        outer.set("where", exp.Where(this=exp.and_(condition, outer_where.this) if outer_where else condition))
    return outer


def _outputs(inner: exp.Select) -> dict[str, exp.Expr]:
    """The inner query's output names (lower case), each mapped to the column or per-row value it selects."""
    for name, value in inner.args.items():
        if name not in _INNER_ARGS and value:
            construct = {"group": "GROUP BY", "order": "ORDER BY", "with_": "WITH"}.get(name, name.upper())
            raise UnsupportedQuery(f"{construct} inside a subquery or CTE is not supported; {_HINT}",
                                   construct=construct)
    items = [inner.args["from_"].this, *(j.this for j in inner.args.get("joins") or [])]
    for item in items:
        if not isinstance(item, exp.Table) or not isinstance(item.this, exp.Identifier):
            raise UnsupportedQuery(f"a subquery or CTE joins tables by name, not {item.sql()}; {_HINT}",
                                   construct="SUBQUERY")
    names: dict[str, exp.Expr] = {}
    for projection in inner.expressions:
        node = projection.this if isinstance(projection, exp.Alias) else projection
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star)):
            raise UnsupportedQuery(f"`{projection.sql()}` inside a subquery or CTE that joins tables is not "
                                   f"supported (two tables may share a column name): name the columns; {_HINT}",
                                   construct="*", position="SELECT")
        plain = isinstance(node, exp.Column) and isinstance(node.this, exp.Identifier)
        if not plain and not (isinstance(projection, exp.Alias)
                              and not node.find(exp.AggFunc, exp.Window, exp.Select, exp.Star)):
            raise UnsupportedQuery(f"{node.sql()} inside a subquery or CTE is not supported; {_HINT}",
                                   construct="SUBQUERY", position="SELECT")
        name = projection.alias_or_name.lower()
        if name in names:
            raise UnsupportedQuery(f"the subquery or CTE selects two values named {name!r}: name each once",
                                   construct="SUBQUERY", position="SELECT", column=name)
        names[name] = node
    return names


def _reads(outer: exp.Select, names: dict[str, exp.Expr], alias: str) -> list[exp.Column]:
    """The outer query's columns that read the inner query's names; a refusal for any other column, except an
    output name read in ORDER BY (which SQL resolves to the output, before flattening and after)."""
    renamed = {e.alias.lower() for e in outer.expressions if isinstance(e, exp.Alias) and not (
        isinstance(e.this, exp.Column) and e.this.name.lower() == e.alias.lower()
        and e.this.table.lower() in ("", alias.lower()))}  # outputs that are not an inner name read as is
    own = renamed | {e.name.lower() for e in outer.expressions if isinstance(e, exp.Column)}
    order = outer.args.get("order")
    found = []
    for column in outer.find_all(exp.Column):
        name, qualifier = column.name.lower(), column.table.lower()
        ordering = order is not None and column.find_ancestor(exp.Order) is order
        if ordering and not qualifier and name in renamed:
            if name in names:  # the output, not the inner value: substituting would change which one
                raise UnsupportedQuery(
                    f"ORDER BY {column.name} names both an output and a value of the subquery or CTE {alias!r}; "
                    "rename one", construct="ORDER BY", column=column.name)
            continue
        if qualifier in ("", alias.lower()) and name in names:
            found.append(column)
        elif not qualifier and name in own:
            raise UnsupportedQuery(
                f"the alias {column.name!r} is read outside ORDER BY; over a subquery or CTE that joins tables, "
                "name what it stands for instead", construct="COLUMN", column=column.name)
        else:
            raise UnsupportedQuery(
                f"column {column.sql()!r} is not selected by the subquery or CTE {alias!r}; select it there",
                construct="COLUMN", column=column.name)
    return found
