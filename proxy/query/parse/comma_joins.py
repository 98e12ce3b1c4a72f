"""Comma joins become explicit joins: `FROM a, b WHERE a.k = b.k AND …` is `FROM a JOIN b ON a.k = b.k WHERE …`.

Decision-support texts (TPC-H, hand-written SQL) join with commas and put the join's equality in WHERE. For
an inner join the two forms are the same query: a row pair passes `a.k = b.k` in WHERE exactly when it passes
it in ON. So each comma-joined table takes, as its ON, the first top-level WHERE conjunct that compares a column of
it with a column of a table before it, both qualified by alias or table name (an unqualified column could be
either table's: the rule cannot tell, and leaves it where it is). A comma join that no such equality connects
is left as it is, a cross join, which the join rules refuse (analyse/joins.py). When every join is a comma join,
the tables are taken in the first order that connects each to one before it (TPC-H Q8's `FROM part, supplier,
lineitem …` joins lineitem, which part's key meets, before supplier): an inner join's rows do not depend on the
order (only `SELECT *`'s columns would, and with `*` the order is kept). The result is an ordinary
explicit join, checked by the join rules like any other, so this rule adds no way to reach data.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlglot import exp


def explicit_joins(select: exp.Select, protected: Collection[str] = ()) -> exp.Select:
    """`select` with each comma join that a WHERE equality connects written as `JOIN … ON` (a copy; `select`
    itself when it has no comma join). `protected` names the protected tables (lower case), which a reordering
    places before public ones where it can.

    Example:
        >>> from sqlglot import parse_one
        >>> sql = "SELECT COUNT(*) FROM visits v, users u WHERE v.user_id = u.user_id AND v.age > 30"
        >>> explicit_joins(parse_one(sql)).sql()
        'SELECT COUNT(*) FROM visits AS v JOIN users AS u ON v.user_id = u.user_id WHERE v.age > 30'
        >>> explicit_joins(parse_one("SELECT COUNT(*) FROM visits v, users u WHERE v.age > 30")).sql()
        'SELECT COUNT(*) FROM visits AS v, users AS u WHERE v.age > 30'
        >>> explicit_joins(parse_one("SELECT COUNT(*) FROM p, s, v WHERE s.k = v.k AND p.j = v.j")).sql()
        'SELECT COUNT(*) FROM p JOIN v ON p.j = v.j JOIN s ON s.k = v.k'
        >>> explicit_joins(parse_one("SELECT COUNT(*) FROM p, s, v WHERE p.k = s.k AND p.j = v.j"), {"v"}).sql()
        'SELECT COUNT(*) FROM p JOIN v ON p.j = v.j JOIN s ON p.k = s.k'
    """
    joins = select.args.get("joins") or []
    if not any(_is_comma(j) for j in joins) or select.args.get("where") is None:
        return select
    out = select.copy()
    source = out.args.get("from_")
    if source is None:
        return select
    seen = {_name(source.this)} - {None}
    conjuncts = _conjuncts(out.args["where"].this)
    nodes = list(out.args.get("joins") or [])
    reorder = all(_is_comma(j) for j in nodes) and not any(
        isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
        for e in out.expressions)
    placed: list[exp.Join] = []
    while nodes:
        node = nodes[0]
        if reorder and seen:
            # the first table in the text's order that an equality connects to the tables before it (a protected
            # one first while none is placed: the join rules join public tables to a protected one); for comma
            # (inner) joins the order is the query's own choice of nothing (`*` aside, which keeps its order)
            linked = [n for n in nodes if (name := _name(n.this)) is not None
                      and any(_connects(c, name, seen) for c in conjuncts)]
            if not any(_protected(n, protected) for n in [source, *placed]):
                linked.sort(key=lambda n: not _protected(n, protected))  # stable: text order otherwise
            node = linked[0] if linked else node
        nodes.remove(node)
        placed.append(node)
        name = _name(node.this)
        if _is_comma(node) and name is not None and seen:
            # the first connecting equality is the ON; any other stays in WHERE (TPC-H Q5's `c_nationkey =
            # s_nationkey` beside `l_suppkey = s_suppkey`): for an inner join the two places are the same filter
            on = next((c for c in conjuncts if _connects(c, name, seen)), None)
            if on is not None:
                conjuncts = [c for c in conjuncts if c is not on]
                node.set("on", on.copy())
        if name is not None:
            seen.add(name)
    out.set("joins", placed)
    out.set("where", exp.Where(this=exp.and_(*conjuncts)) if conjuncts else None)
    return out


def _protected(node: exp.Expr, protected: Collection[str]) -> bool:
    """Whether the FROM item `node` (or a join's table) is a protected table."""
    table = node.this if isinstance(node, exp.Join | exp.From) else node
    return isinstance(table, exp.Table) and table.name.lower() in protected


def _is_comma(node: exp.Join) -> bool:
    """A `, table` in FROM: sqlglot's Join with no kind, side, method, ON or USING."""
    return isinstance(node, exp.Join) and not any(node.args.get(k) for k in node.args if k != "this")


def _name(node: exp.Expr) -> str | None:
    """What a column qualifies the FROM item `node` with: its alias, else its table name (lower case)."""
    if not isinstance(node, exp.Table):
        return None
    return (node.alias or node.name).lower() or None


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The top-level AND terms of a condition, through parentheses (`(a AND b) AND c` is a, b, c)."""
    if isinstance(node, exp.Paren) and isinstance(node.this, exp.And):
        return _conjuncts(node.this)
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _connects(node: exp.Expr, table: str, before: set[str]) -> bool:
    """`node` is `x.col = y.col` with one side qualified by `table` and the other by a table before it."""
    if not isinstance(node, exp.EQ):
        return False
    ends = (node.this, node.expression)
    if not all(isinstance(e, exp.Column) and e.table and not e.args.get("db") for e in ends):
        return False
    qualifiers = {e.table.lower() for e in ends}  # type: ignore[union-attr]
    return table in qualifiers and len(qualifiers) == 2 and bool((qualifiers - {table}) & before)
