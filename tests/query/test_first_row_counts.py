"""Counts read from each kept cell's rank-1 row (on_store.counts_from_first_rows) are exactly the counts of
the rank filter `rank <= k AND group rank <= g` they replace: the same rows of the store, the same numbers, for
every bound, key and unit-level WHERE, on data that breaks every declaration the store build allows."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from tests.support import oracle_db

rr = importlib.import_module("proxy.query.rewrite.on_store")  # the module (proxy.query exports its function)

P = TableSchema("p", "uid", (
    ColumnSpec("uid", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
    ColumnSpec("age", "INTEGER", unit_level=True, groupable=True, bounds=(18, 90)),
    ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True, public_domain=("n", "s")),
), max_groups=2, max_rows=3)

QUERIES = [
    "SELECT r, COUNT(*) FROM p GROUP BY r",  # unit-level key, public domain
    "SELECT COUNT(*), COUNT(DISTINCT uid) FROM p",  # no key
    "SELECT g, COUNT(*), COUNT(DISTINCT uid) FROM p GROUP BY g",  # row-level key, private partitions
    "SELECT g, r, COUNT(*) FROM p GROUP BY g, r",
    "SELECT age // 20 AS a, COUNT(*) FROM p GROUP BY a",  # unit-level computed key
]

rows = st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["a", "b", "c", None]),
                          st.one_of(st.none(), st.integers(0, 120)), st.sampled_from(["n", "s", "w", None])),
                max_size=40)


def _rank_filter(analysis: object) -> str:
    """The same query through the rank filter (counts_from_first_rows switched off)."""
    original = rr.counts_from_first_rows
    rr.counts_from_first_rows = lambda *args, **kwargs: False  # type: ignore[assignment]
    try:
        return rr.rewrite_ranked(analysis)  # type: ignore[arg-type]
    finally:
        rr.counts_from_first_rows = original  # type: ignore[assignment]


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, k=st.integers(1, 4), g=st.integers(1, 3), key=st.text("0123456789abcdef", min_size=1))
def test_first_row_counts_equal_the_rank_filter(query: str, data: list[tuple[object, ...]], k: int, g: int,
                                                key: str) -> None:
    table = dataclasses.replace(P, max_rows=k, max_groups=g)
    analysis = plan(query, Catalog((table,)), epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store").analysis
    assert rr.counts_from_first_rows(analysis)
    first_rows = rr.rewrite_ranked(analysis)
    assert "row_rank = 1" in first_rows or "row_rank__g = 1" in first_rows
    assert "row_rank <=" not in first_rows and "row_rank__g <=" not in first_rows
    tables = {"p": ("uid BIGINT, g VARCHAR, age INTEGER, r VARCHAR", data)}
    n_keys = len(analysis.keys)
    got = oracle_db.run(first_rows, tables, n_keys, value=oracle_db.as_int, store=(table,), key=key)
    want = oracle_db.run(_rank_filter(analysis), tables, n_keys, value=oracle_db.as_int, store=(table,), key=key)
    assert got == want


def test_a_row_level_where_or_a_value_count_keeps_the_rank_filter() -> None:
    catalog = Catalog((P,))
    for query in ("SELECT COUNT(*) FROM p WHERE g = 'a'", "SELECT r, COUNT(g) FROM p GROUP BY r",
                  "SELECT COUNT(*) FROM p WHERE r = 'n'"):  # a unit-level WHERE: the rank filter is faster
        analysis = plan(query, catalog, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store").analysis
        assert not rr.counts_from_first_rows(analysis)
    analysis = plan("SELECT COUNT(*) FROM p WHERE g = 'a'", catalog, epsilon=1.0, delta=1e-6, mechanism="laplace",
                    bounding="store").analysis
    assert "__row_rank <= 3" in rr.rewrite_ranked(analysis, row_where="filter")
