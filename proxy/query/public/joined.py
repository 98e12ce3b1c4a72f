"""A query over public tables with joins, subqueries or CTEs, rebuilt clause by clause (docs/privacy.md §3.1).

Allowed: `[WITH name AS (SELECT …), …] SELECT [DISTINCT] <expressions> FROM <public table | (SELECT …) | CTE>
[[INNER | LEFT | CROSS] JOIN … [ON …]] [, …] [WHERE] [GROUP BY] [HAVING] [ORDER BY] [LIMIT n]`, the expressions
of expressions.py, subqueries (correlated or not) in WHERE, HAVING, SELECT and ON. Relations get generated
aliases and columns their declared names (scope.py); output names are the analyst's aliases, quoted. A name
in GROUP BY, HAVING or ORDER BY that is an output's alias and no column in scope stands for that output (its
rebuilt expression, or its position in ORDER BY), never for an undeclared column the engine might bind it to.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, PublicTable
    >>> n = PublicTable("nation", (ColumnSpec("n_name", "VARCHAR"), ColumnSpec("n_regionkey", "BIGINT")),
    ...     ("n_name",))
    >>> r = PublicTable("region", (ColumnSpec("r_regionkey", "BIGINT"), ColumnSpec("r_name", "VARCHAR")),
    ...     ("r_regionkey",))
    >>> sql = "SELECT DISTINCT n_name FROM nation JOIN region ON n_regionkey = r_regionkey WHERE r_name = 'EUROPE'"
    >>> q = rebuilt(parse_one(sql), Catalog((), public=(n, r)), max_rows=100)
    >>> print(q.tree.sql("duckdb"))
    SELECT DISTINCT "t1"."n_name" AS "n_name" FROM "nation" AS "t1" JOIN "region" AS "t2" ON "t1"."n_regionkey" = \
"t2"."r_regionkey" WHERE "t2"."r_name" = 'EUROPE' LIMIT 101
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from proxy.query.analyse.resolve import check_qualifiers
from proxy.query.catalog import Catalog, PublicTable
from proxy.query.errors import PolicyError, UnsupportedQuery
from proxy.query.public.expressions import HINT, Rules, rebuild
from proxy.query.public.protected import refusal
from proxy.query.public.result import PublicQuery
from proxy.query.public.scope import Frame, Relation

_ARGS = frozenset({"expressions", "from_", "joins", "where", "group", "having", "order", "limit", "distinct"})
_MARK = "__output_"  # an output named in GROUP BY, HAVING or ORDER BY, while its clause is rebuilt (_Outputs)
_CONSTRUCTS = {"with_": "WITH", "offset": "OFFSET", "qualify": "QUALIFY", "windows": "WINDOW",
               "laterals": "LATERAL", "sample": "SAMPLE"}


@dataclass(slots=True)
class _Build:
    """The state of one rebuild: the catalog, the CTEs in scope (name → written name, columns), the public tables
    read, and the count behind the generated aliases."""

    catalog: Catalog
    ctes: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    tables: list[PublicTable] = field(default_factory=list)
    aliases: int = 0

    def alias(self, prefix: str = "t") -> str:
        self.aliases += 1
        return f"{prefix}{self.aliases}"


def rebuilt(select: exp.Select, catalog: Catalog, *, max_rows: int) -> PublicQuery:
    """`select` (whose relations are public tables: sources.reads_public) checked and rebuilt; at most
    `max_rows + 1` rows asked for, so that the caller can refuse an answer with more than `max_rows`."""
    build = _Build(catalog)
    with_ = select.args.get("with_")
    ctes = []
    for cte in with_.expressions if with_ is not None else []:
        if with_.args.get("recursive") or cte.args.get("materialized") is not None or not cte.alias \
                or (cte.args["alias"].args.get("columns")):
            raise UnsupportedQuery(f"WITH {cte.alias}: write WITH name AS (SELECT …)", construct="WITH")
        name = cte.alias.lower()
        if name in build.ctes or catalog.table(name) or catalog.public_table(name):
            raise UnsupportedQuery(f"WITH {cte.alias}: the name is taken", construct="WITH", table=cte.alias)
        body, names = _select(cte.this, build, None, "WITH", top=False)
        written = build.alias("q")
        ctes.append(exp.CTE(this=body, alias=exp.TableAlias(this=exp.to_identifier(written, quoted=True))))
        build.ctes[name] = (written, {n.lower(): n for n in names})
    tree, columns = _select(select.copy(), build, None, "SELECT", top=True)
    given = tree.args.get("limit")
    limit = max_rows + 1  # one more than may be released: the caller refuses an answer that has it
    if given is not None:
        limit = min(limit, int(given.expression.this))
    tree = tree.limit(limit)
    if ctes:
        tree.set("with_", exp.With(expressions=ctes))
    return PublicQuery(tuple(dict.fromkeys(build.tables)), tuple(columns), tree, max_rows)


def _select(select: exp.Expr, build: _Build, outer: Frame | None, clause: str, *, top: bool
            ) -> tuple[exp.Select, list[str]]:
    """One SELECT rebuilt in a frame around `outer` (its enclosing query's, for correlation), with its output names."""
    if not isinstance(select, exp.Select):
        raise UnsupportedQuery(f"{select.key.upper()} is not supported in a query over public tables; {HINT}",
                               construct=select.key.upper())
    for name, value in select.args.items():
        if value and name not in _ARGS and not (top and name == "with_"):
            construct = _CONSTRUCTS.get(name, name.upper())
            raise UnsupportedQuery(f"{construct} is not supported in a query over public tables; {HINT}",
                                   construct=construct)
    distinct = select.args.get("distinct")
    if distinct is not None and distinct.args.get("on"):
        raise UnsupportedQuery(f"DISTINCT ON is not supported; {HINT}", construct="DISTINCT ON")
    source = select.args.get("from_")
    if source is None:
        raise UnsupportedQuery("a subquery needs FROM <public table>", construct="FROM")

    def subquery(node: exp.Select, frame: Frame, where: str) -> exp.Select:
        return _select(node, build, frame, where, top=False)[0]

    relations: list[Relation] = []
    frame = Frame((), outer)
    first, relation = _relation(source.this, build, select, clause)
    relations.append(relation)
    query = exp.Select().from_(first, copy=False)
    for join in select.args.get("joins") or []:
        item, relation = _relation(join.this, build, select, clause)
        relations.append(relation)
        frame = Frame(tuple(relations), outer)
        query.append("joins", _join(join, item, frame, Rules("ON", False, subquery)))
    frame = Frame(tuple(relations), outer)
    outputs, names = _outputs(select, frame, Rules("SELECT", True, subquery))
    query.set("expressions", [exp.alias_(o, exp.to_identifier(n, quoted=True))
                              for o, n in zip(outputs, names, strict=True)])
    if distinct is not None:
        query.set("distinct", exp.Distinct())
    where = select.args.get("where")
    if where is not None:
        query.set("where", exp.Where(this=rebuild(where.this, frame, Rules("WHERE", False, subquery))))
    selected = _Outputs(select.expressions, outputs, names, frame)
    group = select.args.get("group")
    if group is not None:
        if any(v for k, v in group.args.items() if k != "expressions"):
            raise UnsupportedQuery(f"GROUP BY ALL, ROLLUP, CUBE and GROUPING SETS are not supported; {HINT}",
                                   construct="GROUP BY")
        rules = Rules("GROUP BY", False, subquery)
        query.set("group", exp.Group(expressions=[selected.key(k, rules) for k in group.expressions]))
    having = select.args.get("having")
    if having is not None:
        query.set("having", exp.Having(this=selected.condition(having.this, Rules("HAVING", True, subquery))))
    order = select.args.get("order")
    if order is not None:
        rules = Rules("ORDER BY", True, subquery)
        query.set("order", exp.Order(expressions=[selected.ordered(o, rules) for o in order.expressions]))
    limit = select.args.get("limit")
    if limit is not None:
        value = limit.expression
        if not (isinstance(limit, exp.Limit) and isinstance(value, exp.Literal) and value.is_int
                and int(value.this) >= 0) or limit.args.get("offset"):
            raise UnsupportedQuery(f"LIMIT takes a whole number; {HINT}", construct="LIMIT")
        query.set("limit", exp.Limit(expression=exp.Literal.number(int(value.this))))
    return query, names


def _relation(node: exp.Expr, build: _Build, select: exp.Select, clause: str) -> tuple[exp.Expr, Relation]:
    """A FROM or JOIN item: a declared public table, a CTE, or a subquery; a protected table here is refused
    (protected.py: the outer FROM tree of a public query has none, sources.reads_public)."""
    alias = node.args.get("alias")
    if alias is not None and (alias.args.get("columns") or not isinstance(alias, exp.TableAlias)):
        raise UnsupportedQuery("column aliases in FROM are not supported", construct="TABLE ALIAS")
    written = build.alias()
    as_ = exp.TableAlias(this=exp.to_identifier(written, quoted=True))
    if isinstance(node, exp.Subquery) and not any(v for k, v in node.args.items() if k not in ("this", "alias")):
        body, names = _select(node.this, build, None, "FROM", top=False)
        qualifiers = (alias.name.lower(),) if alias is not None else ()
        return exp.Subquery(this=body, alias=as_), Relation(written, qualifiers, {n.lower(): n for n in names})
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier) or any(
            v for k, v in node.args.items() if k not in ("this", "alias", "db", "catalog")):
        raise UnsupportedQuery(f"{node.sql()[:60]} is not allowed in FROM of a query over public tables; name a "
                               "public table, a CTE or a subquery", construct="FROM")
    check_qualifiers(node, build.catalog)
    name = node.name.lower()
    qualifiers = (alias.name.lower(),) if alias is not None else (name,)
    if not node.args.get("db") and name in build.ctes:
        cte, columns = build.ctes[name]
        return exp.Table(this=exp.to_identifier(cte, quoted=True), alias=as_), Relation(written, qualifiers, columns)
    if build.catalog.table(node.name) is not None:
        raise refusal(select, build.catalog.table(node.name).name, clause, build.catalog)  # type: ignore[union-attr]
    table = build.catalog.public_table(node.name)
    if table is None:
        raise PolicyError(f"unknown table {node.name!r}", construct="TABLE", table=node.name)
    build.tables.append(table)
    return (exp.Table(this=exp.to_identifier(table.name, quoted=True), alias=as_),
            Relation(written, qualifiers, {c.name.lower(): c.name for c in table.columns}))


def _join(join: exp.Join, item: exp.Expr, frame: Frame, rules: Rules) -> exp.Join:
    """`[INNER | LEFT] JOIN … ON`, `CROSS JOIN …` or `, …`; USING, NATURAL and the rest are refused."""
    side, kind = join.args.get("side"), join.args.get("kind")
    on = join.args.get("on")
    plain = not any(v for k, v in join.args.items() if k not in ("this", "on", "side", "kind"))
    if not plain or (side or "").upper() not in ("", "LEFT") or (kind or "").upper() not in ("", "INNER", "CROSS") \
            or ((kind or "").upper() == "CROSS" and on is not None) or (side and on is None):
        raise UnsupportedQuery(f"this JOIN is not supported in a query over public tables: write [INNER | LEFT] "
                               f"JOIN … ON, CROSS JOIN or a comma join; {HINT}", construct="JOIN")
    rebuilt = exp.Join(this=item, side=side.upper() if side else None, kind=kind.upper() if kind else None)
    if on is not None:
        rebuilt.set("on", rebuild(on, frame, rules))
    return rebuilt


def _outputs(select: exp.Select, frame: Frame, rules: Rules) -> tuple[list[exp.Expr], list[str]]:
    outputs: list[exp.Expr] = []
    names: list[str] = []
    for item in select.expressions:
        if isinstance(item, exp.Star):
            for relation in frame.relations:
                for column in relation.columns.values():
                    outputs.append(exp.column(column, table=relation.alias, quoted=True))
                    names.append(column)
            continue
        inner = item.this if isinstance(item, exp.Alias) else item
        outputs.append(rebuild(inner, frame, rules))
        names.append(item.alias if isinstance(item, exp.Alias) else inner.name if isinstance(inner, exp.Column)
                     else inner.sql())
    if not outputs:
        raise UnsupportedQuery(f"select at least one column; {HINT}", construct="SELECT")
    return outputs, names


@dataclass(frozen=True, slots=True)
class _Outputs:
    """A SELECT's outputs, for the clauses that may name them: by alias (no column in scope of that name) or
    position."""

    given: list[exp.Expr]
    rebuilt: list[exp.Expr]
    names: list[str]
    frame: Frame

    def position(self, node: exp.Expr) -> int | None:
        """The 1-based output `node` names as an alias, or None (it is a column, or names no output)."""
        if isinstance(node, exp.Column) and not node.table and not self.frame.has(node.name):
            lowered = [n.lower() for n in self.names]
            if node.name.lower() in lowered:
                return lowered.index(node.name.lower()) + 1
        return None

    def condition(self, node: exp.Expr, rules: Rules) -> exp.Expr:
        """`node` rebuilt, each output alias in it replaced by that output's rebuilt expression."""
        # an output named here is marked, rebuilt as a column of a relation with no alias, then replaced by the
        # output's rebuilt expression: the clause's columns resolve in scope as anywhere else; a subquery's own
        # columns are its own (left as they are)
        marked = node.copy()
        for column in list(marked.find_all(exp.Column)):
            if column.name.lower().startswith(_MARK):
                raise UnsupportedQuery(f"{column.name!r}: no column is declared with that name", construct="COLUMN")
            at = self.position(column) if column.find_ancestor(exp.Select) is None else None
            if at is not None:
                marker = exp.Column(this=exp.to_identifier(f"{_MARK}{at}"))
                if column is marked:
                    marked = marker
                else:
                    column.replace(marker)
        frame = Frame((Relation("", (), {f"{_MARK}{i + 1}": str(i + 1) for i in range(len(self.names))}),
                       *self.frame.relations), self.frame.outer)
        rebuilt = rebuild(marked, frame, rules)
        return rebuilt.transform(lambda n: self.rebuilt[int(n.name) - 1].copy()
                                 if isinstance(n, exp.Column) and n.table == "" and n.name.isdigit() else n)

    def key(self, node: exp.Expr, rules: Rules) -> exp.Expr:
        if isinstance(node, exp.Literal) and node.is_int:
            if not 1 <= int(node.this) <= len(self.names):
                raise UnsupportedQuery(f"{rules.clause} {node.this} is not an output position",
                                       construct=rules.clause)
            return exp.Literal.number(int(node.this))
        return self.condition(node, rules)

    def ordered(self, node: exp.Expr, rules: Rules) -> exp.Ordered:
        if not isinstance(node, exp.Ordered):
            raise UnsupportedQuery(f"ORDER BY {node.sql()} is not supported", construct="ORDER BY")
        at = self.position(node.this)
        key = exp.Literal.number(at) if at is not None else self.key(node.this, rules)
        return exp.Ordered(this=key, desc=bool(node.args.get("desc")), nulls_first=bool(node.args.get("nulls_first")))
