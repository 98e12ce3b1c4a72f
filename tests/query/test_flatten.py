"""Subqueries and CTEs that BI tools wrap around a question (issue #14, first part): each flattened query plans
exactly as the same question written directly, and anything beyond filter-and-project is refused."""

from __future__ import annotations

import pytest

from proxy.query.catalog import Catalog
from proxy.query.errors import QueryError
from proxy.query.planner import plan, repeat_identity
from tests.support.catalogs import VISITS

CATALOG = Catalog((VISITS,))

SAME = [
    ("SELECT region, COUNT(*) AS n FROM visits WHERE age > 30 GROUP BY region",
     "SELECT region, COUNT(*) AS n FROM (SELECT * FROM visits WHERE age > 30) AS q GROUP BY region"),
    ("SELECT region, COUNT(*) AS n FROM visits WHERE age > 30 GROUP BY region",
     "WITH base AS (SELECT * FROM main.visits AS v WHERE v.age > 30) SELECT region, COUNT(*) AS n FROM base "
     "GROUP BY region"),
    ("SELECT region, SUM(amount) AS s FROM visits WHERE age > 30 AND amount > 5 GROUP BY region",
     'SELECT "q"."region", SUM(q.amount) AS s FROM (SELECT region, amount FROM visits WHERE age > 30) q '
     "WHERE q.amount > 5 GROUP BY q.region"),
    ("SELECT region AS r, COUNT(*) AS n FROM visits GROUP BY region ORDER BY n DESC LIMIT 2000",
     "SELECT r, COUNT(*) AS n FROM (SELECT region AS r FROM visits) AS t GROUP BY r ORDER BY n DESC LIMIT 2000"),
]


@pytest.mark.parametrize(("direct", "wrapped"), SAME)
def test_a_flattened_query_plans_as_the_direct_one(direct: str, wrapped: str) -> None:
    a = plan(direct, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=5)
    b = plan(wrapped, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=5)
    assert b.sql == a.sql and b.price == a.price and b.scope == a.scope
    assert [o.name for o in b.analysis.outputs] == [o.name for o in a.analysis.outputs]
    assert b.normalized_sql != a.normalized_sql  # the audit records what the analyst sent
    assert repeat_identity(b, CATALOG) == repeat_identity(a, CATALOG)  # one question: one repeat (pipeline.py)


@pytest.mark.parametrize(("sql", "construct"), [
    ("SELECT COUNT(*) FROM (SELECT region, COUNT(*) AS n FROM visits GROUP BY region) q", "GROUP BY"),
    ("SELECT COUNT(*) FROM (SELECT DISTINCT region FROM visits) q", "DISTINCT"),
    ("SELECT COUNT(*) FROM (SELECT * FROM visits LIMIT 10) q", "LIMIT"),
    ("SELECT COUNT(*) FROM (SELECT * FROM (SELECT * FROM visits) a) b", "SUBQUERY"),
    ("SELECT COUNT(*) FROM (SELECT random() AS x FROM visits) q WHERE x > 0.5", "RAND()"),
        ("SELECT COUNT(*) FROM (SELECT SUM(amount) AS x FROM visits) q", "SUBQUERY"),
    ("SELECT SUM(amount) FROM (SELECT region FROM visits) q", "COLUMN"),  # not selected by the subquery
    ("WITH a AS (SELECT * FROM visits), b AS (SELECT * FROM visits) SELECT COUNT(*) FROM a", "WITH"),
    ("WITH RECURSIVE a AS (SELECT * FROM visits) SELECT COUNT(*) FROM a", "WITH"),
    ("WITH a AS (SELECT * FROM visits) SELECT COUNT(*) FROM visits", "WITH"),
    ("SELECT COUNT(*) FROM (SELECT * FROM visits JOIN users USING (user_id)) q", "*"),
    ("SELECT COUNT(*) FROM (SELECT * FROM secret_table) q", "TABLE"),
    ("SELECT COUNT(*) FROM (SELECT user_id AS region FROM visits) q GROUP BY region", "GROUP BY"),
])
def test_anything_beyond_filter_and_project_is_refused(sql: str, construct: str) -> None:
    with pytest.raises(QueryError) as err:
        plan(sql, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")
    assert err.value.detail.get("construct") == construct, (err.value, err.value.detail)


def test_computed_projections_are_flattened_into_computed_keys_and_filters() -> None:
    """A BI virtual dataset (`SELECT *, <expr> AS name FROM t`) plans exactly as the direct query (issue #14)."""
    from proxy.query.planner import plan
    from tests.support.demo_catalog import DEMO

    wrapped = ("SELECT q.bucket, COUNT(*) AS n FROM (SELECT *, CAST(FLOOR(age / 10) * 10 AS INTEGER) AS bucket "
               "FROM visits WHERE amount > 1) q WHERE q.bucket >= 30 GROUP BY q.bucket")
    direct = ("SELECT CAST(FLOOR(age / 10) * 10 AS INTEGER) AS bucket, COUNT(*) AS n FROM visits "
              "WHERE amount > 1 AND CAST(FLOOR(age / 10) * 10 AS INTEGER) >= 30 "
              "GROUP BY CAST(FLOOR(age / 10) * 10 AS INTEGER)")
    a, b = (plan(q, DEMO, epsilon=0.5, delta=1e-6, mechanism="laplace", salt=3) for q in (wrapped, direct))
    assert a.sql == b.sql and a.price == b.price
    assert [o.name for o in a.analysis.outputs] == ["bucket", "n"]
