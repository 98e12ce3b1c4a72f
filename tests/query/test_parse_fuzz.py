"""The lexical gate, parser and planner on hostile input: every outcome is a QueryError or a plan."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.query.errors import QueryError
from proxy.query.planner import plan
from tests.support.catalogs import CATALOG

TOKENS = [
    "SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "ORDER", "LIMIT", "COUNT", "SUM", "AVG", "DISTINCT",
    "(", ")", "*", ",", ";", "=", "<", ">", "AND", "OR", "NOT", "IN", "BETWEEN", "IS", "NULL", "visits", "users",
    "region", "amount", "user_id", "page", "day", "age", "'N'", "1", "-2.5", "1e400", "AS", "x", "JOIN", "UNION",
    "WITH", "OVER", "QUALIFY", "--", "/*", "*/", "'", '"', "::", "CAST", "DATE", "'2026-01-01'", "+", "/", "\n",
]


def _plan(text: str) -> None:
    try:
        plan(text, CATALOG, epsilon=0.5, delta=1e-7, mechanism="laplace")
    except QueryError as err:
        assert err.code in {"sql_syntax", "unsupported", "policy", "invalid_parameter"}
        assert str(err)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_random_text(text: str) -> None:
    _plan(text)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_token_soup(tokens: list[str]) -> None:
    _plan(" ".join(tokens))


keys = st.sampled_from(["region", "age", "page", "day", "category"])
aggs = st.sampled_from(["COUNT(*)", "COUNT(amount)", "COUNT(DISTINCT user_id)", "SUM(amount)", "AVG(duration_s)",
                        "SUM(age)", "AVG(amount) * 2", "SUM(amount) / COUNT(*)"])
conds = st.sampled_from(["", " WHERE age > 30", " WHERE region IN ('N', 'S') AND NOT flag",
                         " WHERE day BETWEEN '2026-01-01' AND '2026-02-01'", " WHERE amount IS NOT NULL OR age < 20"])


@settings(max_examples=300, deadline=None)
@given(st.lists(keys, max_size=2, unique=True), st.lists(aggs, min_size=1, max_size=3), conds,
       st.sampled_from(["", " HAVING COUNT(*) > 3", " ORDER BY 1 DESC LIMIT 3"]))
def test_valid_shaped_queries_plan(group: list[str], aggregates: list[str], where: str, tail: str) -> None:
    select = ", ".join(group + aggregates)
    group_by = f" GROUP BY {', '.join(group)}" if group else ""
    p = plan(f"SELECT {select} FROM visits{where}{group_by}{tail}", CATALOG,
             epsilon=0.5, delta=1e-7, mechanism="laplace")
    assert p.price.epsilon <= 0.5 and p.price.delta <= 1e-7
    assert "__cells" in p.sql
