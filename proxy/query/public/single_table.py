"""A query over one public table alone, with no join, subquery, CTE or HAVING: the single-table rules.

Allowed: `SELECT [DISTINCT]` declared columns (or `*`, the declared columns), `COUNT(*)`, `COUNT([DISTINCT] col)`,
`MIN`/`MAX(col)`, `SUM`/`AVG(col)` of numeric columns, with `AS` aliases; `WHERE` as for protected tables
(analyse/where.py); `GROUP BY` columns, positions or aliases; `ORDER BY` outputs (names, aliases or positions),
`ASC`/`DESC`; `LIMIT n`. At most `max_rows` rows are released: the rebuilt query asks for one more, and an
answer with more rows is refused (the pipeline), so a huge public table is never dumped by accident.

Example:
    >>> from proxy.query.parse.statement import parse
    >>> from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
    >>> d = PublicTable("departments", (ColumnSpec("category", "VARCHAR"), ColumnSpec("department", "VARCHAR")),
    ...     ("category",))
    >>> c = Catalog((TableSchema("v", "u", (ColumnSpec("u", "BIGINT"),)),), public=(d,))
    >>> q = single_table_query(parse("SELECT DISTINCT department FROM departments ORDER BY 1"), c, max_rows=1000)
    >>> q.columns, q.tree.sql("duckdb")
    (('department',), 'SELECT DISTINCT "department" AS "department" FROM "departments" ORDER BY 1 ASC LIMIT 1001')
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.analyse.names import Names
from proxy.query.analyse.refusals import unsupported
from proxy.query.analyse.resolve import check_qualifiers
from proxy.query.analyse.where import predicate, quoted
from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
from proxy.query.errors import PolicyError, UnsupportedQuery
from proxy.query.public.result import PublicQuery

_ARGS = frozenset({"expressions", "from_", "joins", "where", "group", "order", "limit", "distinct"})
_HINT = ("over a public table alone: SELECT [DISTINCT] columns, COUNT(*), COUNT([DISTINCT] col), MIN/MAX(col), "
         "SUM/AVG(numeric col) FROM <public table> [WHERE] [GROUP BY] [ORDER BY] [LIMIT n]")
_AGGREGATES: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.Count: exp.Count, exp.Min: exp.Min, exp.Max: exp.Max, exp.Sum: exp.Sum, exp.Avg: exp.Avg}


def single_table_query(select: exp.Select, catalog: Catalog, *, max_rows: int) -> PublicQuery:
    """`select`, over one public table (sources.is_single_table, reads_public), checked and rebuilt."""
    for name, value in select.args.items():
        if name not in _ARGS and value:
            construct = {"having": "HAVING", "with_": "WITH", "offset": "OFFSET"}.get(name, name.upper())
            raise UnsupportedQuery(f"{construct} is not supported in a query over a public table; {_HINT}",
                                   construct=construct)
    distinct = select.args.get("distinct")
    if distinct is not None and distinct.args.get("on"):
        raise UnsupportedQuery(f"DISTINCT ON is not supported; {_HINT}", construct="DISTINCT ON")
    node = select.args["from_"].this
    check_qualifiers(node, catalog)
    alias = node.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        raise UnsupportedQuery("column aliases in FROM are not supported", construct="TABLE ALIAS")
    table = catalog.public_table(node.name)
    assert table is not None
    # Names and the WHERE rules read a table's `name`, `columns` and `column()`, which a public table has too
    names = Names(_as_table(table), alias.name if alias is not None else None, catalog, conditions=predicate)
    outputs: list[exp.Expr] = []
    columns: list[str] = []
    plain: list[str] = []  # declared names of the plain columns selected
    aggregated = False
    for item in select.expressions:
        if isinstance(item, exp.Star):
            for spec in table.columns:
                outputs.append(exp.alias_(quoted(spec), exp.to_identifier(spec.name, quoted=True)))
                columns.append(spec.name)
                plain.append(spec.name)
            continue
        inner = item.this if isinstance(item, exp.Alias) else item
        rebuilt, column = _output(inner, names)
        name = item.alias if isinstance(item, exp.Alias) else (column.name if column is not None else inner.sql())
        if column is not None:
            plain.append(column.name)
        else:
            aggregated = True
        outputs.append(exp.alias_(rebuilt, exp.to_identifier(name, quoted=True)))
        columns.append(name)
    if not outputs:
        raise UnsupportedQuery(f"select at least one column; {_HINT}", construct="SELECT")
    query = exp.select(*outputs).from_(exp.table_(table.name, quoted=True))
    if distinct is not None:
        query.set("distinct", exp.Distinct())
    where = select.args.get("where")
    if where is not None:
        query = query.where(predicate(where.this, names))
    group = select.args.get("group")
    if group is not None:
        keys = [_group_key(k, names, select.expressions) for k in group.expressions]
        if any(group.args.get(k) for k in group.args if k != "expressions"):
            raise UnsupportedQuery(f"GROUP BY ALL, ROLLUP, CUBE and GROUPING SETS are not supported; {_HINT}",
                                   construct="GROUP BY")
        missing = [c for c in plain if c not in keys]
        if missing:
            raise PolicyError(f"column {missing[0]!r} is neither grouped nor aggregated; add it to GROUP BY",
                              construct="COLUMN", column=missing[0])
        query = query.group_by(*(exp.column(k, quoted=True) for k in keys))
    elif aggregated and plain:
        raise PolicyError(f"column {plain[0]!r} is neither grouped nor aggregated; add it to GROUP BY",
                          construct="COLUMN", column=plain[0])
    order = select.args.get("order")
    if order is not None:
        query.set("order", exp.Order(expressions=[_ordered(o, select.expressions, columns) for o in order.expressions]))
    limit = max_rows + 1  # one more than may be released: the pipeline refuses an answer that has it
    given = select.args.get("limit")
    if given is not None:
        value = given.expression
        if not (isinstance(value, exp.Literal) and value.is_int and int(value.this) >= 0) or given.args.get("offset"):
            raise UnsupportedQuery(f"LIMIT takes a whole number; {_HINT}", construct="LIMIT")
        limit = min(limit, int(value.this))
    query = query.limit(limit)
    return PublicQuery((table,), tuple(columns), query, max_rows)


def _as_table(table: PublicTable) -> TableSchema:
    return table  # type: ignore[return-value]  # duck-typed: see single_table_query


def _column(node: exp.Expr, names: Names) -> ColumnSpec:
    if not isinstance(node, exp.Column):
        raise _refused(node, "an aggregate or key")
    return names.column(node)


def _refused(node: exp.Expr, position: str) -> UnsupportedQuery:
    error = unsupported(node, position)  # its construct and place; the hint is this rule's
    message = f"{error.message.split('; ')[0]} of a query over a public table; {_HINT}"
    return UnsupportedQuery(message, **{**error.detail, "hint": _HINT})


def _output(node: exp.Expr, names: Names) -> tuple[exp.Expr, ColumnSpec | None]:
    """One output rebuilt: a declared column (returned too), or an aggregate of one."""
    if isinstance(node, exp.Column):
        spec = names.column(node)
        return quoted(spec), spec
    cls = _AGGREGATES.get(type(node))
    if cls is None or any(v for k, v in node.args.items() if k not in ("this", "big_int")):
        raise _refused(node, "SELECT")
    arg = node.this
    if cls is exp.Count and isinstance(arg, exp.Star):
        return exp.Count(this=exp.Star()), None
    if cls is exp.Count and isinstance(arg, exp.Distinct) and len(arg.expressions) == 1:
        spec = _column(arg.expressions[0], names)
        return exp.Count(this=exp.Distinct(expressions=[quoted(spec)])), None
    spec = _column(arg, names)
    if cls in (exp.Sum, exp.Avg) and not spec.numeric:
        raise PolicyError(f"{node.key.upper()} of {spec.name} ({spec.type}) is not a number",
                          construct=node.key.upper(), column=spec.name)
    return cls(this=quoted(spec)), None


def _group_key(node: exp.Expr, names: Names, selected: list[exp.Expr]) -> str:
    """A GROUP BY item as the declared column it names: a column, an output position or an output alias."""
    if isinstance(node, exp.Literal) and node.is_int:
        position = int(node.this)
        if not 1 <= position <= len(selected):
            raise UnsupportedQuery(f"GROUP BY {position} is not an output position", construct="GROUP BY")
        node = selected[position - 1]
    if isinstance(node, exp.Column) and not node.table:
        target = next((e.this for e in selected if isinstance(e, exp.Alias) and e.alias.lower() == node.name.lower()),
                      None)
        if target is not None and names.table.column(node.name) is None:
            node = target
    node = node.this if isinstance(node, exp.Alias) else node
    return _column(node, names).name


def _ordered(node: exp.Ordered, selected: list[exp.Expr], columns: list[str]) -> exp.Ordered:
    """An ORDER BY item as an output position (1-based) of the rebuilt query: by position, name or alias."""
    key = node.this
    position = None
    if isinstance(key, exp.Literal) and key.is_int:
        position = int(key.this)
    elif isinstance(key, exp.Column):
        lowered = [c.lower() for c in columns]
        if key.name.lower() in lowered:
            position = lowered.index(key.name.lower()) + 1
    else:
        position = next((i + 1 for i, e in enumerate(selected) if e == key), None)
    if position is None or not 1 <= position <= len(columns):
        raise UnsupportedQuery(f"ORDER BY {key.sql()}: order by an output (its name, alias or position); {_HINT}",
                               construct="ORDER BY")
    return exp.Ordered(this=exp.Literal.number(position), desc=bool(node.args.get("desc")),
                       nulls_first=bool(node.args.get("nulls_first")))
