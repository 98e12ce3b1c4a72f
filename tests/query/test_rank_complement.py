"""The rank filter's counts and integer sums taken as those of every row less those of the rows above the filter
(on_store.complements_rank_filter) are exactly those of the rank filter `__row_rank <= k` they replace: the same
numbers, NULLs included, for every bound, key and unit-level WHERE, on data that breaks every declaration."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.query.auto import bounds as auto
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from tests.oracle import test_store_oracle as store_oracle
from tests.support import oracle_db

rr = importlib.import_module("proxy.query.rewrite.on_store")  # the module (proxy.query exports its function)

P = TableSchema("p", "uid", (
    ColumnSpec("uid", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
    ColumnSpec("x", "INTEGER", bounds=(-5, 9)), ColumnSpec("d", "DOUBLE", bounds=(0, 2.5)),
    ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True, public_domain=("n", "s")),
    ColumnSpec("age", "INTEGER", unit_level=True, groupable=True, bounds=(18, 90)),
), max_rows=3)

QUERIES = [
    "SELECT COUNT(*), SUM(x), SUM(d) FROM p",  # no key
    "SELECT COUNT(x), SUM(d) FROM p",  # a count of values without keys: NULL over no rows
    "SELECT r, COUNT(*), SUM(x), COUNT(d) FROM p GROUP BY r",  # unit-level key, public domain
    "SELECT r, SUM(d) FROM p WHERE age BETWEEN 20 AND 60 GROUP BY r",  # a unit-level WHERE and key
    "SELECT COUNT(*), SUM(x) FROM p WHERE age > 30",  # a WHERE that may keep no unit: NULL sums
]
COLUMNS = "uid BIGINT, g VARCHAR, x INTEGER, d DOUBLE, r VARCHAR, age INTEGER"

rows = st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["a", "b", None]),
                          st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
                          st.one_of(st.none(), st.floats(-1e9, 1e9), st.sampled_from([float("inf"), -0.0])),
                          st.sampled_from(["n", "s", "w", None]), st.one_of(st.none(), st.integers(0, 120))),
                max_size=40)


def _rank_filter(analysis: object) -> str:
    """The same query through the rank filter (complements_rank_filter switched off)."""
    original = rr.complements_rank_filter
    rr.complements_rank_filter = lambda *args, **kwargs: False  # type: ignore[assignment]
    try:
        return rr.rewrite_ranked(analysis)  # type: ignore[arg-type]
    finally:
        rr.complements_rank_filter = original  # type: ignore[assignment]


def _analysis(query: str, k: int) -> object:
    return plan(query, Catalog((dataclasses.replace(P, max_rows=k),)), epsilon=1.0, delta=1e-6, mechanism="laplace",
                bounding="store").analysis


def _answers(sqls: list[str], data: list[tuple[object, ...]], n_keys: int, key: str) -> list[object]:
    tables = {"p": (COLUMNS, data)}
    return [oracle_db.run(sql, tables, n_keys, store=(P,), key=key) for sql in sqls]


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, k=st.integers(1, 5), key=st.text("0123456789abcdef", min_size=1))
def test_the_complement_equals_the_rank_filter(query: str, data: list[tuple[object, ...]], k: int, key: str) -> None:
    analysis = _analysis(query, k)
    assert rr.complements_rank_filter(analysis)
    complement, ranked = rr.rewrite_ranked(analysis), _rank_filter(analysis)
    assert "__row_rank <=" not in complement and f"__row_rank <= {k}" in ranked
    got, want = _answers([complement, ranked], data, len(analysis.keys), key)  # type: ignore[attr-defined]
    assert got == want  # exactly: NULL is not 0


@settings(max_examples=8, deadline=None)
@given(data=rows, k=st.integers(1, 5), cap=st.sampled_from([1, 7, 1000, 2**40]))
def test_a_capped_sum_corrected_on_heavy_units_equals_the_rank_filter(data: list[tuple[object, ...]], k: int,
                                                                      cap: int) -> None:
    table = dataclasses.replace(P, max_rows=5, columns=tuple(dataclasses.replace(c, auto_bounds=True, total_cap=cap)
                                                 if c.name == "x" else c for c in P.columns))
    for query, n_keys in (("SELECT COUNT(*), SUM(x) FROM p", 0), ("SELECT r, SUM(x) FROM p GROUP BY r", 1)):
        analysis = plan(query, Catalog((table,)), epsilon=1.0, delta=1e-6, mechanism="laplace",
                        bounding="store").analysis
        bounded = auto.for_sql(auto.at_bound(analysis, k, None, (), (("x", cap),)), table)
        assert rr.corrects_heavy_units(bounded) and rr.complements_rank_filter(bounded)
        tables = {"p": (COLUMNS, data)}
        got, want = (oracle_db.run(sql, tables, n_keys, store=(table,), key="k")
                     for sql in (rr.rewrite_ranked(bounded), _rank_filter(bounded)))
        assert got == want


def test_the_comparison_catches_a_planted_off_by_one() -> None:
    # The planted wrong rewrite: the rest taken as rank >= k, so one kept row too few per heavy unit. The
    # comparison above must see it on a unit of k + 1 rows (else the test of the real form proves nothing).
    analysis = _analysis("SELECT COUNT(*), SUM(x) FROM p", 3)
    complement = rr.rewrite_ranked(analysis)
    wrong = complement.replace("__row_rank > 3", "__row_rank >= 3")
    assert wrong != complement
    data = [(1, "a", 2, 0.5, "n", 40)] * 4 + [(2, "b", 1, 0.5, "s", 50)]
    got, planted, want = _answers([complement, wrong, _rank_filter(analysis)], data, 0, "k")
    assert got == want != planted


def test_other_shapes_keep_the_rank_filter() -> None:
    for query in ("SELECT COUNT(*) FROM p",  # counts alone: the first-row form
                  "SELECT g, SUM(x) FROM p GROUP BY g",  # a row-level key: the filter has a group rank
                  "SELECT AVG(x) FROM p",  # a centred sum
                  "SELECT age, SUM(x) FROM p GROUP BY age",  # private partitions: `__units` reads the ranks
                  "SELECT SUM(x) FILTER (WHERE r = 'n') FROM p"):
        assert not rr.complements_rank_filter(_analysis(query, 3)), query


@settings(max_examples=8, deadline=None)
@given(ps=store_oracle.p_rows, qs=store_oracle.q_rows, k=st.integers(1, 3))
def test_a_join_to_one_row_per_unit_equals_the_rank_filter(ps: list[tuple[object, ...]],
                                                           qs: list[tuple[object, ...]], k: int) -> None:
    # a join's virtual table over the store: counts of rows and of a column (its sums clamp per query: not here)
    catalog = Catalog((dataclasses.replace(store_oracle.P, max_rows=k), store_oracle.Q))
    for query, n_keys in (("SELECT q.plan, COUNT(*), COUNT(p.x) FROM p JOIN q USING (uid) GROUP BY q.plan", 1),
                          ("SELECT COUNT(*), COUNT(y) FROM p JOIN q USING (uid) WHERE q.plan = 'pro'", 0)):
        analysis = plan(query, catalog, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store").analysis
        assert rr.complements_rank_filter(analysis), query
        tables = {"p": ("uid BIGINT, g VARCHAR, age INTEGER, d DATE, x DOUBLE", ps),
                  "q": ("uid BIGINT, plan VARCHAR, y INTEGER", qs)}
        got, want = (oracle_db.run(sql, tables, n_keys, store=catalog.tables, key="k")
                     for sql in (rr.rewrite_ranked(analysis), _rank_filter(analysis)))
        assert got == want, query
