"""Refusals: the error for a construct the allow-list does not admit, with its name and a hint.

Example:
    >>> from sqlglot import parse_one
    >>> error = unsupported(parse_one("SELECT ROW_NUMBER() OVER ()").expressions[0], "SELECT")
    >>> error.message
    'WINDOW is not allowed in SELECT (line 1, column 8); window functions are not supported; use GROUP BY with ...'
    >>> error.detail["at"]
    {'line': 1, 'column': 8, 'offset': 7}
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.errors import UnsupportedQuery
from proxy.query.errors import construct_name as _construct

HINTS: dict[type[exp.Expr], str] = {
    exp.Join: "JOIN is not supported; query one table",
    exp.Subquery: "subqueries are not supported; query the protected table directly",
    exp.Select: "subqueries are not supported; query the protected table directly",
    exp.Exists: "subqueries are not supported; query the protected table directly",
    exp.Window: "window functions are not supported; use GROUP BY with aggregates",
    exp.Star: "raw rows are never released; select group keys and aggregates",
    exp.Distinct: "DISTINCT is supported only as COUNT(DISTINCT <privacy unit>)",
}


AGGREGATE_HINT = ("the DP aggregates are COUNT(*), COUNT(col), COUNT(DISTINCT <privacy unit>), SUM(col), AVG(col), "
                  "MEDIAN(col), QUANTILE_CONT(col, q), PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY col), MIN(col), "
                  "MAX(col), VAR_POP(col), VAR_SAMP(col), STDDEV_POP(col), STDDEV(col)")


def arg_construct(name: str) -> str:
    return {"from_": "FROM", "joins": "JOIN", "with_": "WITH", "qualify": "QUALIFY", "sample": "SAMPLE",
            "distinct": "DISTINCT", "windows": "WINDOW", "offset": "OFFSET", "laterals": "LATERAL",
            "pivots": "PIVOT", "rollup": "ROLLUP", "cube": "CUBE", "grouping_sets": "GROUPING SETS",
            "db": "schema-qualified table", "catalog": "catalog-qualified table"}.get(name, name.upper())


def unsupported_clause(name: str, value: object) -> UnsupportedQuery:
    construct = arg_construct(name)
    if name == "joins":
        return UnsupportedQuery(HINTS[exp.Join], construct=construct)
    hint = HINTS.get(type(value), "supported: SELECT keys, aggregates FROM table [WHERE] [GROUP BY] "
                                   "[HAVING] [ORDER BY] [LIMIT]")
    return UnsupportedQuery(f"{construct} is not supported; {hint}", construct=construct)


def unsupported(node: exp.Expr, position: str) -> UnsupportedQuery:
    construct = _construct(node)
    hint = next((h for cls, h in HINTS.items() if isinstance(node, cls)), None)
    if isinstance(node, exp.AggFunc):
        hint = AGGREGATE_HINT
    message = f"{construct} is not allowed in {position}{where(node)}"
    return UnsupportedQuery(f"{message}; {hint}" if hint else message, construct=construct, position=position,
                            **located(node))


def located(node: exp.Expr) -> dict[str, object]:
    """`{"at": {"line", "column", "offset"}}` of the node's first token in the query text, when the parser
    recorded it (an error detail: where the offending construct starts); else {}.

    Example:
        >>> from sqlglot import parse_one
        >>> located(parse_one("SELECT COUNT(*)\\nFROM t WHERE random() < 1").find(exp.Rand))
        {'at': {'line': 2, 'column': 14, 'offset': 29}}
    """
    metas = [n.meta for n in node.walk() if n.meta and "line" in n.meta and "start" in n.meta]
    if not metas:
        return {}
    meta = min(metas, key=lambda m: int(m["start"]))  # the construct's first token
    # sqlglot's col is where the token ends; the column of its first character is reported
    width = int(meta.get("end", meta["start"])) - int(meta["start"])
    return {"at": {"line": meta["line"], "column": int(meta["col"]) - width, "offset": meta["start"]}}


def where(node: exp.Expr) -> str:
    """` (line L, column C)` for a message, or ''."""
    at = located(node).get("at")
    return f" (line {at['line']}, column {at['column']})" if isinstance(at, dict) else ""
