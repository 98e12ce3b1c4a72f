"""Errors of the SQL layer. Each carries a stable machine `code`, a message naming the construct and the
fix, and structured `detail`. Raised only before admission, so none of them costs budget and messages
may quote the query and the policy, which the analyst already knows."""

from __future__ import annotations

from typing import ClassVar


class QueryError(Exception):
    code: ClassVar[str] = "invalid_query"

    def __init__(self, message: str, **detail: object) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


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
