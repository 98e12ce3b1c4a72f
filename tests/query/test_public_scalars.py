"""Scalar subqueries over public tables inside a query over protected ones (issue #31, item 5; docs/privacy.md
§3.2): the value is computed by the public path before planning, folded in as a typed literal, and the answer before
noise equals DuckDB's answer to the query as written, with its subquery, on random data where the value ties with
the column's values (a DECIMAL column against an AVG, a DOUBLE, that equals a grid value only after rounding), where
the subquery has no row (NULL: no row passes) and on both bounding paths. More than one row, a correlated subquery,
or a comparison DuckDB makes in a rounding type are refused, free, naming why."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
from proxy.query.errors import QueryError
from proxy.query.planner import plan, public_scalars, repeat_identity
from proxy.query.public.scalars import folded, value_query
from tests.support import differential as diff

T = TableSchema("t", "uid", (
    ColumnSpec("uid", "BIGINT"),
    ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True, public_domain=("N", "S")),
    ColumnSpec("n", "INTEGER", bounds=(0, 20)),
    ColumnSpec("m", "DECIMAL(15,2)", bounds=(0, 10)),
    ColumnSpec("x", "DOUBLE", bounds=(-8.0, 8.0)),
    ColumnSpec("d", "DATE"),
    ColumnSpec("g", "VARCHAR"),
    ColumnSpec("b", "BIGINT", bounds=(0, 100)),
), max_rows=1000, max_groups=1000)
P = PublicTable("p", (ColumnSpec("k", "INTEGER"), ColumnSpec("price", "DECIMAL(15,2)"), ColumnSpec("w", "DOUBLE"),
                      ColumnSpec("day", "DATE"), ColumnSpec("name", "VARCHAR")), ("k",))
CATALOG = Catalog((T,), public=(P,))
T_COLUMNS = "uid BIGINT, r VARCHAR, n INTEGER, m DECIMAL(15,2), x DOUBLE, d DATE, g VARCHAR, b BIGINT"
P_COLUMNS = "k INTEGER, price DECIMAL(15,2), w DOUBLE, day DATE, name VARCHAR"

PRICES = ["0.10", "0.20", "0.30", "0.70", "1.10", "2.00", None]  # AVG(0.1, 0.2) = 0.15000000000000002, ...
QUERIES = [
    *(f"SELECT r, COUNT(*) AS k, SUM(n) AS s FROM t WHERE m {op} (SELECT AVG(price) FROM p) GROUP BY r"
      for op in ("=", "<>", ">", ">=", "<", "<=")),
    "SELECT r, COUNT(*) AS k FROM t WHERE n >= (SELECT AVG(k) FROM p) GROUP BY r",
    "SELECT COUNT(*) AS k FROM t WHERE x < (SELECT MAX(w) FROM p) AND m > (SELECT MIN(price) FROM p)",
    "SELECT COUNT(*) AS k FROM t WHERE x > (SELECT AVG(price) FROM p)",
    "SELECT r, COUNT(*) AS k FROM t WHERE m BETWEEN (SELECT MIN(price) FROM p) AND (SELECT MAX(price) FROM p) "
    "GROUP BY r",
    "SELECT COUNT(*) AS k FROM t WHERE m <= (SELECT SUM(price) FROM p WHERE k > 2)",  # DECIMAL(38, 2); NULL if none
    "SELECT COUNT(*) AS k FROM t WHERE d > (SELECT MAX(day) FROM p)",
    "SELECT COUNT(*) AS k FROM t WHERE g = (SELECT MIN(name) FROM p)",
    "SELECT COUNT(*) AS k FROM t WHERE n > (SELECT MAX(k) FROM p WHERE k > 100) OR g = 'a'",  # NULL OR …
    "SELECT COUNT(*) AS k FROM t WHERE NOT (n > (SELECT MAX(k) FROM p WHERE k > 100))",  # NOT NULL drops every row
    "SELECT COUNT(*) AS k FROM t WHERE m BETWEEN (SELECT MIN(price) FROM p WHERE k > 100) AND 5",
    "SELECT COUNT(*) AS k FROM t WHERE b < (SELECT COUNT(*) FROM p)",
    "SELECT r, COUNT(*) AS k FROM t WHERE uid IN (SELECT uid FROM t WHERE n > (SELECT AVG(k) FROM p)) GROUP BY r",
    "SELECT COUNT(*) AS k FROM t WHERE n * 2 > (SELECT AVG(price) FROM p)",  # a computed value: DuckDB's types kept
    "SELECT COUNT(*) AS k FROM t WHERE (SELECT MIN(name) FROM p WHERE k > 1) IS NULL OR n > 3",
    "SELECT r, COUNT(*) AS k FROM t GROUP BY r HAVING COUNT(*) > (SELECT COUNT(*) FROM p)",  # after noise: public
    "SELECT COUNT(*) - (SELECT COUNT(*) FROM p) AS k FROM t",
]

DAYS = ["2026-01-01", "2026-01-02", "2026-01-03", None]
t_rows = st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["N", "S"]), st.one_of(st.none(), st.integers(0, 5)),
                            st.sampled_from(PRICES), st.sampled_from([None, 0.15000000000000002, 0.1, 0.5, -1.0]),
                            st.sampled_from(DAYS), st.sampled_from(["a", "b", None]), st.integers(0, 5)),
                  max_size=20)
p_rows = st.lists(st.tuples(st.integers(0, 4), st.sampled_from(PRICES), st.sampled_from([None, 0.1, 0.5, 2.0]),
                            st.sampled_from(DAYS), st.sampled_from(["a", "b", "c", None])), max_size=4)


def _values(db: diff.Database, sql: str) -> tuple[exp.Expr, ...]:
    """What the pipeline folds (pipeline.public_values): each value query run on the database's source."""
    return tuple(folded(tuple(db.run(value_query(q).sql(dialect="duckdb"), "src")), q.tree.sql())
                 for q in public_scalars(sql, CATALOG))


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(t=t_rows, p=p_rows)
def test_the_answer_is_duckdbs_answer_to_the_query_with_its_subquery(
        t: list[tuple[object, ...]], p: list[tuple[object, ...]]) -> None:
    units = {row[0]: row[1] for row in t}  # r is constant per unit
    t = [(u, units[u], *rest) for u, _, *rest in t]
    db = diff.Database({"t": (T_COLUMNS, t), "p": (P_COLUMNS, p)}, CATALOG)
    try:
        for sql in QUERIES:
            values = _values(db, sql)
            for bounding in ("per_query", "store"):
                planned = plan(sql, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding=bounding,
                               scalars=values, salt=3)
                keys = diff.key_positions(planned)
                ours = diff.exact_release(db.run(planned.sql, "store" if bounding == "store" else "src"), planned)
                theirs = diff.reference_rows(db, sql, "duckdb")
                reached = {diff.normal_key(row, keys) for row in theirs}
                extra = [row for row in ours if diff.normal_key(row, keys) not in reached]
                assert all(diff.empty(row, keys) for row in extra), (bounding, sql, values, extra)
                kept = [row for row in ours if diff.normal_key(row, keys) in reached]
                assert diff.rows_match(diff.sort_rows(kept), diff.sort_rows(theirs), diff.sums(planned)), (
                    bounding, sql, [v.sql() for v in values], kept, theirs)
    finally:
        db.close()


def test_the_folded_value_is_the_query_identity_and_the_audited_text() -> None:
    sql = "SELECT COUNT(*) FROM t WHERE m > (SELECT AVG(price) FROM p)"
    at = {v: plan(sql, CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace", scalars=(folded((("DOUBLE", v),)),))
          for v in ("0.15000000000000002", "0.151", "0.5")}
    identities = {v: repeat_identity(p, CATALOG) for v, p in at.items()}
    # 0.15000000000000002 and 0.151 leave the same DECIMAL(15,2) values above them (m >= 0.16): one question
    assert identities["0.15000000000000002"] == identities["0.151"] != identities["0.5"]
    assert at["0.5"].normalized_sql == (f"{sql} /* public values: CAST('0.5' AS DOUBLE) */")


@pytest.mark.parametrize(("sql", "rows", "construct", "words"), [
    ("SELECT COUNT(*) FROM t WHERE n = (SELECT k FROM p)", (("INTEGER", "1"), ("INTEGER", "2")),
     "SCALAR SUBQUERY", "more than one row"),
    ("SELECT COUNT(*) FROM t WHERE b > (SELECT AVG(k) FROM p)", (("DOUBLE", "2.5"),), "LITERAL",
     "cast the value to DECIMAL"),
    ("SELECT COUNT(*) FROM t WHERE g > (SELECT MAX(k) FROM p)", (("INTEGER", "4"),), "LITERAL", "string literal"),
    ("SELECT COUNT(*) FROM t WHERE d > (SELECT MAX(name) FROM p)", (("VARCHAR", "x"),), "LITERAL", "date literal"),
    ("SELECT COUNT(*) FROM t WHERE n > (SELECT MAX(name) FROM p WHERE k > 9)", (("VARCHAR", None),), "WHERE",
     "cannot compare"),
])
def test_values_no_comparison_can_take_exactly_are_refused(sql: str, rows: tuple[tuple[object, ...], ...],
                                                          construct: str, words: str) -> None:
    with pytest.raises(QueryError) as err:
        plan(sql, CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace", scalars=(folded(rows, "(…)"),))
    assert err.value.detail.get("construct") == construct and words in str(err.value), err.value


def test_a_correlated_subquery_or_one_without_its_value_is_refused() -> None:
    with pytest.raises(QueryError, match="correlated") as err:
        public_scalars("SELECT COUNT(*) FROM t WHERE n > (SELECT MAX(k) FROM p WHERE p.k < t.n)", CATALOG)
    assert err.value.detail["construct"] == "SCALAR SUBQUERY"
    with pytest.raises(QueryError, match="evaluated by the server before the query is planned"):
        plan("SELECT COUNT(*) FROM t WHERE n > (SELECT MAX(k) FROM p)", CATALOG, epsilon=1.0, delta=0.0,
             mechanism="laplace")
    # over the protected table: still a release inside the WHERE
    with pytest.raises(QueryError, match="exact statistic"):
        plan("SELECT COUNT(*) FROM t WHERE n > (SELECT AVG(n) FROM t)", CATALOG, epsilon=1.0, delta=0.0,
             mechanism="laplace")


def test_a_decimal_value_compares_exactly_and_a_double_as_duckdb_rounds_it() -> None:
    def where(sql: str, rows: tuple[tuple[object, ...], ...]) -> str:
        p = plan(sql, CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace", scalars=(folded(rows),))
        assert p.analysis.where is not None
        return p.analysis.where.sql("duckdb")
    sql = "SELECT COUNT(*) FROM t WHERE m >= (SELECT AVG(price) FROM p)"
    assert where(sql, (("DOUBLE", "0.1"),)) == '"m" >= CAST(\'0.10\' AS DECIMAL(15, 2))'  # CAST(0.10 AS DOUBLE) = 0.1
    assert where(sql, (("DECIMAL(38,3)", "0.101"),)) == '"m" >= CAST(\'0.11\' AS DECIMAL(15, 2))'
    assert Decimal("0.1") != Decimal(float("0.1"))  # the double 0.1 is not 0.10: exactly, they differ
