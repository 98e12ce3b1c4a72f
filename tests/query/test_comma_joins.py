"""Comma joins (proxy/query/parse/comma_joins.py) against their explicit-join form, on the demo data in DuckDB:
the same analysis, the same bounded SQL and the same pre-noise values; the same rows as the analyst's own text
run plainly; and a comma join that no equality connects is refused as a cross join, free."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from proxy.cli.demo import build_demo
from proxy.query.errors import QueryError
from proxy.query.parse.comma_joins import explicit_joins
from proxy.query.parse.statement import parse
from proxy.query.planner import QueryPlan, plan
from tests.support.demo_catalog import DEMO

PAIRS = [
    ("SELECT COUNT(*), SUM(v.amount) FROM visits v, users u WHERE v.user_id = u.user_id",
     "SELECT COUNT(*), SUM(v.amount) FROM visits v JOIN users u ON v.user_id = u.user_id"),
    ("SELECT u.plan, COUNT(*) FROM visits v, users u WHERE u.user_id = v.user_id AND v.age > 30 GROUP BY u.plan",
     "SELECT u.plan, COUNT(*) FROM visits v JOIN users u ON u.user_id = v.user_id WHERE v.age > 30 GROUP BY u.plan"),
    ("SELECT d.department, COUNT(*) FROM visits v, departments d WHERE (v.amount > 10 AND v.category = d.category) "
     "GROUP BY d.department",
     "SELECT d.department, COUNT(*) FROM visits v JOIN departments d ON v.category = d.category WHERE v.amount > 10 "
     "GROUP BY d.department"),
    ("SELECT departments.department, AVG(visits.amount) FROM departments, visits WHERE departments.category = "
     "visits.category AND visits.region IN ('north', 'south') GROUP BY departments.department",
     "SELECT departments.department, AVG(visits.amount) FROM departments JOIN visits ON departments.category = "
     "visits.category WHERE visits.region IN ('north', 'south') GROUP BY departments.department"),
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[duckdb.DuckDBPyConnection]:
    files = build_demo(tmp_path_factory.mktemp("comma"), users=80, rows=800)
    con = duckdb.connect(str(files.database))
    con.execute("CREATE TABLE departments AS SELECT * FROM (VALUES ('groceries', 'food'), ('dining', 'food'), "
                "('travel', 'leisure'), ('books', 'leisure')) t(category, department)")
    yield con
    con.close()


def _plan(sql: str) -> QueryPlan:
    return plan(sql, DEMO, epsilon=1.0, delta=1e-8, mechanism="laplace", salt=11)


@pytest.mark.parametrize(("comma", "explicit"), PAIRS)
def test_a_comma_join_answers_as_its_explicit_join(comma: str, explicit: str, demo: duckdb.DuckDBPyConnection) -> None:
    a, b = _plan(comma), _plan(explicit)
    assert a.analysis == b.analysis and a.price == b.price and a.sql == b.sql
    assert sorted(demo.execute(a.sql).fetchall()) == sorted(demo.execute(b.sql).fetchall())
    # the normalisation itself keeps the query's meaning: the two texts answer alike when run plainly
    rewritten = explicit_joins(parse(comma)).sql("duckdb")
    assert sorted(demo.execute(rewritten).fetchall()) == sorted(demo.execute(comma).fetchall())
    assert a.normalized_sql != b.normalized_sql  # the audit records the text as the analyst wrote it


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM visits v, users u",
    "SELECT COUNT(*) FROM visits v, users u WHERE v.age > 30",
    "SELECT COUNT(*) FROM visits v, users u WHERE v.user_id = u.user_id OR v.age > 30",
    "SELECT COUNT(*) FROM visits v, users u WHERE user_id = age",  # unqualified: either table's
])
def test_a_comma_join_no_equality_connects_is_refused_as_a_cross_join(sql: str) -> None:
    with pytest.raises(QueryError) as err:
        _plan(sql)
    assert (err.value.code, err.value.detail["construct"]) == ("unsupported", "CROSS JOIN")
    assert "cross join" in err.value.message


def test_comma_joins_then_meet_the_join_rules() -> None:
    """Normalised, a comma join is checked like any JOIN: on the unit between protected tables, a
    public table on its key."""
    with pytest.raises(QueryError) as err:
        _plan("SELECT COUNT(*) FROM visits v, users u WHERE v.age = u.age")
    assert (err.value.code, err.value.detail["construct"]) == ("policy", "JOIN ON")
    with pytest.raises(QueryError) as err:  # a public table joined on a column that is not its key
        _plan("SELECT COUNT(*) FROM visits v, users u, departments d WHERE v.user_id = u.user_id "
              "AND u.plan = d.department")
    assert (err.value.code, err.value.detail["construct"]) == ("policy", "JOIN ON")
