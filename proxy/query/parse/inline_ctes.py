"""Inline row-level CTEs at every place they are read (issue #31): a non-recursive CTE that only filters one table,
projects its columns and computes per-row values (no aggregate, GROUP BY, DISTINCT, LIMIT, window or subquery) is
the same rows as its table under its WHERE, so each read of it (in FROM, in a JOIN, in an IN or EXISTS subquery)
becomes a read of that table under the read's alias, with the CTE's WHERE joined to the reading query's WHERE (or to
the ON of a LEFT JOIN whose right side it is) and its output names replaced by what they compute. The result is the
same query, with no WITH; the analysis then decides whether it has a DP answer (a semi-join on the unit, a join on
the unit, ...), as if the analyst had written it so.

A later CTE may read an earlier one (`WITH a AS (…), b AS (SELECT … FROM a …)`): the earlier is inlined into it
first. A CTE read once, alone in FROM, is left to parse/flatten.py (which also flattens one with joins inside); so is
any WITH this rule cannot inline whole (a CTE with an aggregate read twice, TPC-H Q15), which flatten.py refuses
saying why. A name that cannot be resolved without the catalog (an unqualified name of a renamed or computed CTE
column beside another table, or in a nested subquery) is refused: qualify it.

Example:
    >>> from sqlglot import parse_one
    >>> sql = ("WITH v AS (SELECT user_id, amount * 2 AS a FROM visits WHERE age > 30) "
    ...        "SELECT COUNT(*) FROM v WHERE a > 10 AND user_id IN (SELECT user_id FROM v WHERE a < 100)")
    >>> inline_ctes(parse_one(sql)).sql()
    'SELECT COUNT(*) FROM visits AS v WHERE v.age > 30 AND ((amount * 2) > 10 AND user_id IN (SELECT user_id FROM \
visits AS v WHERE v.age > 30 AND (amount * 2) < 100))'
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from proxy.query.errors import UnsupportedQuery
from proxy.query.parse.flatten import inner_parts


class _NotInlined(Exception):
    """This WITH is not inlined whole: it is left as written (flatten.py flattens or refuses it)."""


def inline_ctes(select: exp.Select, columns: Mapping[str, frozenset[str]] | None = None) -> exp.Select:
    """`select` with its row-level CTEs inlined at every read (a copy), or `select` itself when there is nothing to
    inline or the WITH is not all row-level (see the module's docstring). `columns` are the declared columns of each
    table by name (lower case): a CTE's table column it does not select must not be read unqualified."""
    columns = columns or {}
    with_ = select.args.get("with_")
    if with_ is None or with_.args.get("recursive"):
        return select
    ctes = with_.expressions
    if any(not isinstance(c.this, exp.Select) or c.args.get("materialized") is not None
           or c.args["alias"].args.get("columns") for c in ctes):
        return select
    names = [c.alias.lower() for c in ctes]
    if len(set(names)) != len(names):
        return select
    if any(s.args.get("with_") for s in select.find_all(exp.Select) if s is not select):
        return select  # a WITH inside may shadow a name
    outer = select.copy()
    outer.set("with_", None)
    if len(ctes) == 1 and _read_once_in_from(outer, names[0]):
        return select  # flatten.py's case (with joins inside too)
    try:
        bodies: dict[str, exp.Select] = {}
        for name, cte in zip(names, ctes, strict=True):
            body = cte.this.copy()
            for earlier, parts in bodies.items():
                body = _inline(body, earlier, parts, columns)
            if any(isinstance(t, exp.Table) for t in body.find_all(exp.Table) if t.name.lower() == name and not t.db):
                raise _NotInlined  # reads itself: recursive in all but name
            bodies[name] = body
        for i, name in enumerate(names):
            if not _reads(outer, name) and not any(_reads(c.this, name) for c in ctes[i + 1:]):
                raise _NotInlined  # a CTE never read: flatten.py refuses it
        for name in names:
            outer = _inline(outer, name, bodies[name], columns)
    except _NotInlined:
        return select
    return outer


def _read_once_in_from(outer: exp.Select, name: str) -> bool:
    source = outer.args.get("from_")
    reads = _reads(outer, name)
    return (len(reads) == 1 and source is not None and source.this is reads[0] and not outer.args.get("joins"))


def _reads(tree: exp.Expr, name: str) -> list[exp.Table]:
    return [t for t in tree.find_all(exp.Table) if t.name.lower() == name and not t.args.get("db")
            and not t.args.get("catalog")]


def _inline(tree: exp.Select, name: str, body: exp.Select, columns: Mapping[str, frozenset[str]]) -> exp.Select:
    """Every read of CTE `name` (whose query is `body`) in `tree` replaced by its table (a copy of `tree`)."""
    try:
        table, star, outputs, where = inner_parts(body)
    except UnsupportedQuery:
        raise _NotInlined from None  # not row-level over one table
    if where is not None and where.find(exp.Select):
        raise _NotInlined
    if star and any(k in columns.get(table.name.lower(), frozenset()) for k in outputs):
        raise _NotInlined  # `*` and a computed value of one name: which one a read means is DuckDB's to say
    tree = tree.copy()
    reads = _reads(tree, name)
    reads.sort(key=_depth, reverse=True)  # innermost first: an outer read's columns skip scopes already inlined
    for read in reads:
        _inline_read(tree, read, table, star, outputs, where, columns)
    return tree


def _depth(node: exp.Expr) -> int:
    depth = 0
    while node.parent is not None:
        node, depth = node.parent, depth + 1
    return depth


def _scope(node: exp.Expr) -> exp.Select | None:
    parent = node.parent
    while parent is not None and not isinstance(parent, exp.Select):
        parent = parent.parent
    return parent


def _relations(select: exp.Select) -> list[exp.Expr]:
    source = select.args.get("from_")
    return ([source.this] if source is not None else []) + [j.this for j in select.args.get("joins") or []]


def _inline_read(tree: exp.Select, read: exp.Table, table: exp.Table, star: bool, outputs: dict[str, exp.Expr],
                 where: exp.Expr | None, columns: Mapping[str, frozenset[str]]) -> None:
    scope, holder = _scope(read), read.parent
    if scope is None or not isinstance(holder, exp.From | exp.Join) or (read.args.get("alias") is not None and \
            read.args["alias"].args.get("columns")):
        raise _NotInlined
    alias = read.alias_or_name
    joins = scope.args.get("joins") or []
    if any(j.side in ("RIGHT", "FULL") for j in joins):
        raise _NotInlined
    left_side = isinstance(holder, exp.Join) and holder.side == "LEFT"
    if left_side and where is not None:
        raise UnsupportedQuery(
            f"the CTE {alias!r} filters its rows with WHERE and is the right side of a LEFT JOIN: its condition would "
            "have to stand in the join's ON, which takes one equality here", construct="WITH", table=alias,
            hint="join the table itself and filter in WHERE (an inner join), or drop the CTE's WHERE")
    if isinstance(holder, exp.Join) and (holder.side not in ("", "LEFT") or any(
            _renamed(outputs, u.name) for u in holder.args.get("using") or [])):
        raise _NotInlined  # USING names the CTE's column: its table's column of that name is another one
    several = len(_relations(scope)) > 1
    if not star and _stars(scope, alias) and not isinstance(scope.parent, exp.Exists):
        if several or len(scope.expressions) != 1:
            raise _NotInlined  # `*` over the CTE would become every column of its table
        scope.set("expressions", [exp.column(exp.to_identifier(n)) for n in outputs])  # the CTE's columns, in order
    # the table's columns the CTE does not select: an unqualified one named here meant another relation's (or an
    # outer query's) column in SQL, and would bind to the table once inlined
    hidden = frozenset() if star else columns.get(table.name.lower(), frozenset()) - outputs.keys()
    own = {e.alias.lower() for e in scope.expressions if isinstance(e, exp.Alias)} if scope is tree else set()
    if scope is tree:  # an output computed from a renamed or computed column keeps the name the analyst sees
        scope.set("expressions", [exp.alias_(e, e.sql()) if not isinstance(e, exp.Alias | exp.Column) and any(
            c.table.lower() in ("", alias.lower()) and _renamed(outputs, c.name) for c in e.find_all(exp.Column))
            else e for e in scope.expressions])
    for column in list(scope.find_all(exp.Column)):
        qualifier, key, owner = column.table.lower(), column.name.lower(), _scope(column)
        if (qualifier and qualifier != alias.lower()) or (owner is not scope and _shadowed(column, scope, alias)):
            continue
        if qualifier:
            if key not in outputs:
                if star:
                    continue
                raise UnsupportedQuery(f"column {column.name!r} is not selected by the CTE {alias!r}; select it "
                                       "there", construct="COLUMN", column=column.name)
            _replace(column, outputs[key], alias, top=scope is tree)
        elif key in outputs:
            if not _renamed(outputs, key):
                continue  # the table's column of that name, wherever SQL binds it
            if owner is not scope or several:
                raise UnsupportedQuery(
                    f"column {column.name!r} of the CTE {alias!r} is renamed or computed there; qualify it as "
                    f"{alias}.{column.name}", construct="COLUMN", column=column.name)
            _replace(column, outputs[key], None, top=scope is tree)
        elif key in hidden and not (owner is scope and key in own) and not _owned(column, scope, columns):
            raise UnsupportedQuery(
                f"column {column.name!r} is not selected by the CTE {alias!r}: select it there, or qualify the "
                "column of another table with its alias", construct="COLUMN", column=column.name)
    replacement = table.copy()
    replacement.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    read.replace(replacement)
    if where is None:
        return
    condition = _qualified(where, alias)
    if left_side:
        holder.set("on", exp.and_(holder.args["on"], condition) if holder.args.get("on") else condition)
        return
    held = scope.args.get("where")
    scope.set("where", exp.Where(this=exp.and_(condition, held.this) if held is not None else condition))


def _owned(column: exp.Column, scope: exp.Select, columns: Mapping[str, frozenset[str]]) -> bool:
    """A query nested between `column` and `scope` reads a table that has a column of that name (or one whose
    columns are not declared): SQL binds the name there first."""
    node = _scope(column)
    while node is not None and node is not scope:
        for relation in _relations(node):
            declared = columns.get(relation.name.lower()) if isinstance(relation, exp.Table) else None
            if declared is None or column.name.lower() in declared:
                return True
        node = _scope(node)
    return False


def _renamed(outputs: dict[str, exp.Expr], key: str) -> bool:
    target = outputs.get(key.lower())
    return target is not None and not (isinstance(target, exp.Column) and target.name.lower() == key.lower())


def _stars(scope: exp.Select, alias: str) -> bool:
    for projection in scope.expressions:
        if isinstance(projection, exp.Star):
            return True
        if isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star) and \
                projection.table.lower() in ("", alias.lower()):
            return True
    return False


def _shadowed(column: exp.Column, scope: exp.Select, alias: str) -> bool:
    """A nested query between `column` and `scope` reads a relation under `alias` itself: the name is its."""
    node = _scope(column)
    while node is not None and node is not scope:
        if any(r.alias_or_name.lower() == alias.lower() for r in _relations(node)):
            return True
        node = _scope(node)
    return False


def _replace(column: exp.Column, target: exp.Expr, qualifier: str | None, *, top: bool) -> None:
    if isinstance(target, exp.Column):
        replacement: exp.Expr = exp.column(target.this.copy(), table=qualifier)
    else:
        replacement = exp.Paren(this=_qualified(target, qualifier) if qualifier else target.copy())
    if top and isinstance(column.parent, exp.Select) and column.arg_key == "expressions" and \
            column.name.lower() != getattr(replacement, "name", "").lower():
        replacement = exp.alias_(replacement, column.name)  # the output keeps the name the analyst sees
    column.replace(replacement)


def _qualified(node: exp.Expr, alias: str) -> exp.Expr:
    return node.transform(lambda n: exp.column(n.this.copy(), table=alias) if isinstance(n, exp.Column) else n)
