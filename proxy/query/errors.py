"""Errors of the SQL layer. Each carries a stable machine `code`, a message naming the construct and the
fix, and structured `detail`. Raised only before admission, so none of them costs budget and messages
may quote the query and the policy, which the analyst already knows."""

from __future__ import annotations

from sqlglot import exp

from accountant.errors import ProxyError


class QueryError(ProxyError):
    """Base of the SQL layer's errors: every one a 400, raised before admission."""

    code = "invalid_query"
    status = 400

    def __init__(self, message: str, **detail: object) -> None:
        super().__init__(message, **detail)


class SqlSyntaxError(QueryError):
    code = "sql_syntax"


class UnsupportedQuery(QueryError):
    code = "unsupported"


class PolicyError(QueryError):
    code = "policy"


class InvalidParameter(QueryError):
    code = "invalid_parameter"


class EmptyScope(QueryError):
    """The WHERE clause holds for no privacy unit under the policy (e.g. `region = 'N' AND region = 'S'`): the
    answer would be noise alone, so it is refused before any charge."""

    code = "empty_scope"


class NoReachableGroup(PolicyError):
    """A GROUP BY key with a public domain of which the WHERE can reach no value (`WHERE region IS NULL GROUP BY
    region`): rows outside the domain are dropped, so every released group would be noise alone. Unlike
    `EmptyScope`, rows may pass the WHERE (with undeclared key values): it is the grouping that reaches nothing."""

    code = "no_reachable_group"


class LiteralOutsideDomain(PolicyError):
    """A WHERE compares a column with a value its declared public domain does not hold (`region = 'North'`
    where the domain has `north`): it can match nothing the policy declares, so it is refused before any charge,
    with the nearest declared values as a hint."""

    code = "literal_outside_domain"


def construct_name(node: exp.Expr) -> str:
    """How an error names a node: a function as `NAME()`, anything else by its node kind.

    Example:
        >>> from sqlglot import parse_one
        >>> construct_name(parse_one("SELECT * FROM duckdb_tables()").args["from_"].this.this)
        'DUCKDB_TABLES()'
    """
    if isinstance(node, exp.Anonymous):
        return f"{node.name.upper()}()"
    if isinstance(node, exp.Func):
        return f"{node.sql_name()}()"
    return node.key.upper()
