"""CTEs read more than once (issue #31, item 3): a row-level CTE (filter, project, per-row values over one table) is
inlined at each read by parse/inline_ctes.py, and the query is then analysed as if written so. The answer before
noise equals DuckDB's answer to the query as written, with the CTE, on random databases, per query and on the
bounding store (bounds that cannot bind); each shape plans exactly as its hand-inlined text; what is not row-level,
or cannot be inlined exactly, is refused naming why."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from proxy.query.errors import QueryError
from proxy.query.planner import plan, repeat_identity
from tests.oracle import test_differential as base
from tests.support import differential as diff

CATALOG = base.CATALOG

# (the query with CTEs, the same query written without them)
SAME = [
    # a semi-join on the unit over the CTE's own rows (FROM and IN)
    ("WITH v AS (SELECT * FROM t WHERE n > 3) SELECT r, COUNT(*) AS k FROM v WHERE uid IN (SELECT uid FROM v "
     "WHERE g = 'p') GROUP BY r",
     "SELECT r, COUNT(*) AS k FROM t WHERE n > 3 AND uid IN (SELECT uid FROM t WHERE n > 3 AND g = 'p') GROUP BY r"),
    # EXISTS correlated on the unit, a computed column read in both places
    ("WITH v AS (SELECT uid, r, n * 2 AS m FROM t WHERE x > 0) SELECT r, COUNT(*) AS k, SUM(m) AS s FROM v "
     "WHERE EXISTS (SELECT * FROM v AS v2 WHERE v2.uid = v.uid AND v2.m > 10) GROUP BY r",
     "SELECT r, COUNT(*) AS k, SUM((n * 2)) AS s FROM t AS v WHERE x > 0 AND EXISTS (SELECT * FROM t AS v2 "
     "WHERE v2.x > 0 AND v2.uid = v.uid AND (v2.n * 2) > 10) GROUP BY r"),
    # read in a JOIN with a public table, and in an IN over the public table
    ("WITH v AS (SELECT uid, c, n FROM t WHERE n > 3) SELECT dept, COUNT(*) AS k FROM v JOIN z ON v.c = z.cat "
     "WHERE v.c IN (SELECT cat FROM z WHERE dept = 'food') GROUP BY dept",
     "SELECT dept, COUNT(*) AS k FROM t AS v JOIN z ON v.c = z.cat WHERE v.n > 3 AND v.c IN (SELECT cat FROM z "
     "WHERE dept = 'food') GROUP BY dept"),
    # a CTE of the second protected table joined on the unit (read once, beside another table)
    ("WITH p AS (SELECT uid, y FROM w WHERE y > 2) SELECT r, COUNT(*) AS k, SUM(y) AS s FROM t JOIN p "
     "ON t.uid = p.uid GROUP BY r",
     "SELECT r, COUNT(*) AS k, SUM(y) AS s FROM t JOIN w AS p ON t.uid = p.uid WHERE p.y > 2 GROUP BY r"),
    # several CTEs, the second reading the first, one read in FROM and in IN
    ("WITH a AS (SELECT * FROM t WHERE n > 1), b AS (SELECT uid, r AS reg, n + 1 AS m FROM a WHERE x < 4) "
     "SELECT reg, COUNT(*) AS k, SUM(m) AS s FROM b WHERE uid IN (SELECT uid FROM a WHERE f) GROUP BY reg",
     "SELECT r AS reg, COUNT(*) AS k, SUM((n + 1)) AS s FROM t AS b WHERE n > 1 AND x < 4 AND uid IN "
     "(SELECT uid FROM t WHERE n > 1 AND f) GROUP BY r"),
    ("WITH a AS (SELECT uid, r, age, d FROM t WHERE d >= DATE '2026-01-10'), b AS (SELECT * FROM a WHERE age > 30) "
     "SELECT r, COUNT(*) AS k FROM b WHERE NOT EXISTS (SELECT * FROM a WHERE a.uid = b.uid AND a.r = 'N') "
     "GROUP BY r",
     "SELECT r, COUNT(*) AS k FROM t AS b WHERE d >= DATE '2026-01-10' AND age > 30 AND NOT EXISTS (SELECT * FROM "
     "t AS a WHERE a.d >= DATE '2026-01-10' AND a.uid = b.uid AND a.r = 'N') GROUP BY r"),
]


@pytest.mark.parametrize(("cte", "direct"), SAME)
def test_an_inlined_cte_plans_as_the_query_written_without_it(cte: str, direct: str) -> None:
    a = plan(direct, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=5)
    b = plan(cte, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=5)
    assert b.price == a.price and b.scope == a.scope
    assert [o.name for o in b.analysis.outputs] == [o.name for o in a.analysis.outputs]
    assert b.normalized_sql != a.normalized_sql  # the audit records what the analyst sent
    # the same rows: the SQL differs only in the aliases the inlined reads keep
    assert b.analysis.measures == a.analysis.measures and b.analysis.keys == a.analysis.keys


@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(tables=base.databases())
def test_a_query_with_ctes_read_several_times_answers_duckdbs_answer(
        tables: dict[str, tuple[str, list[tuple[object, ...]]]]) -> None:
    db = diff.Database(tables, CATALOG)
    try:
        for sql, _ in SAME:
            for bounding in ("per_query", "store"):
                planned = diff.planned(sql, "duckdb", bounding, CATALOG)  # type: ignore[arg-type]
                keys = diff.key_positions(planned)
                ours = diff.exact_release(db.run(planned.sql, "store" if bounding == "store" else "src"), planned)
                theirs = diff.reference_rows(db, sql, "duckdb")
                reached = {diff.normal_key(row, keys) for row in theirs}
                extra = [row for row in ours if diff.normal_key(row, keys) not in reached]
                assert all(diff.empty(row, keys) for row in extra), (bounding, sql, extra)
                kept = [row for row in ours if diff.normal_key(row, keys) in reached]
                assert diff.rows_match(diff.sort_rows(kept), diff.sort_rows(theirs), diff.sums(planned)), (
                    bounding, sql, kept, theirs)
    finally:
        db.close()


def test_a_repeat_is_one_question_whichever_way_it_is_written() -> None:
    """The CTE's two spellings of one question resolve to one analysis (the aliases of the reads aside)."""
    sql = "WITH v AS (SELECT * FROM t WHERE n > 3) SELECT COUNT(*) FROM v WHERE uid IN (SELECT uid FROM v)"
    same = "WITH q AS (SELECT * FROM t WHERE n > 3) SELECT COUNT(*) FROM q AS v WHERE uid IN (SELECT uid FROM q AS v)"
    a, b = (plan(s, CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace") for s in (sql, same))
    assert repeat_identity(a, CATALOG) == repeat_identity(b, CATALOG)


@pytest.mark.parametrize(("sql", "construct", "words"), [
    # TPC-H Q15's shape: an aggregate CTE read twice (a release per read, compared with its own maximum)
    ("WITH rev AS (SELECT c, SUM(x) AS total FROM t GROUP BY c) SELECT z.dept, rev.total FROM z, rev "
     "WHERE z.cat = rev.c AND total = (SELECT MAX(total) FROM rev)", "WITH",
     "each read of protected rows is a release"),
    ("WITH v AS (SELECT DISTINCT uid, r FROM t) SELECT COUNT(*) FROM v WHERE uid IN (SELECT uid FROM v)", "DISTINCT",
     "DISTINCT inside a subquery or CTE"),
    ("WITH p AS (SELECT uid, y FROM w WHERE y > 2) SELECT COUNT(*) FROM t LEFT JOIN p ON t.uid = p.uid", "WITH",
     "LEFT JOIN"),
    ("WITH v AS (SELECT uid, r AS reg FROM t) SELECT COUNT(*) FROM v JOIN w ON v.uid = w.uid WHERE reg = 'N'",
     "COLUMN", "qualify"),
    ("WITH v AS (SELECT uid, r FROM t) SELECT COUNT(*) FROM v WHERE n > 3 AND uid IN (SELECT uid FROM v)", "COLUMN",
     "not selected"),
    ("WITH v AS (SELECT uid, n AS m FROM t) SELECT COUNT(*) FROM v WHERE EXISTS (SELECT * FROM w "
     "WHERE w.uid = v.uid AND y > m) AND uid IN (SELECT uid FROM v)", "COLUMN", "qualify"),
    ("WITH v AS (SELECT * FROM t) SELECT COUNT(*) FROM v JOIN v AS v2 ON v.uid = v2.uid", "JOIN", "itself"),
    # a scalar subquery over the CTE's protected rows stays a release inside the WHERE
    ("WITH v AS (SELECT * FROM t) SELECT COUNT(*) FROM v WHERE n > (SELECT AVG(n) FROM v)", "SCALAR SUBQUERY",
     "exact statistic"),
])
def test_what_cannot_be_inlined_exactly_is_refused_saying_why(sql: str, construct: str, words: str) -> None:
    with pytest.raises(QueryError) as err:
        plan(sql, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")
    assert err.value.detail.get("construct") == construct, (err.value, err.value.detail)
    assert words in str(err.value), err.value


def test_outputs_keep_the_names_the_analyst_sees() -> None:
    sql = ("WITH v AS (SELECT uid, r AS reg, n * 2 AS m FROM t) SELECT reg, SUM(m), COUNT(*) AS k FROM v "
           "WHERE uid IN (SELECT uid FROM v WHERE m > 2) GROUP BY reg")
    planned = plan(sql, CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace")
    assert [o.name for o in planned.analysis.outputs] == ["reg", "SUM(m)", "k"]


@pytest.mark.parametrize("sql", [
    # `*` and a computed value of one name; a WITH inside a subquery (it may shadow the name)
    "WITH v AS (SELECT *, n * 2 AS n FROM t) SELECT COUNT(*) FROM v WHERE uid IN (SELECT uid FROM v)",
    "WITH v AS (SELECT * FROM t) SELECT COUNT(*) FROM v WHERE uid IN (WITH v AS (SELECT * FROM w) SELECT uid FROM v)",
])
def test_what_would_be_ambiguous_is_not_inlined(sql: str) -> None:
    with pytest.raises(QueryError):
        plan(sql, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")
