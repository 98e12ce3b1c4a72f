"""A capped SUM on the store adds the kept rows up uncapped and corrects the rows of units above the cap
(on_store.corrects_heavy_units): exactly the sums of the per-row scaling it replaces, for caps below,
among and above the units' totals, with NULLs, keys and no keys, on data that breaks every declaration."""

from __future__ import annotations

import importlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.query.analyse.analysis import analyse
from proxy.query.auto import bounds as auto
from proxy.query.parse.statement import parse
from tests.query.test_auto_groups_clamp import AUTO, CATALOG, _on_store

rr = importlib.import_module("proxy.query.rewrite.on_store")  # the module (proxy.query exports its function)

QUERIES = [
    "SELECT g, SUM(x), AVG(n), COUNT(*) FROM t GROUP BY g",
    "SELECT SUM(x), SUM(n) FROM t",
    "SELECT r, p, SUM(n) FROM t WHERE r = 'N' GROUP BY r, p",
]

rows = st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["a", "b", "c", None]), st.sampled_from(["N", "S"]),
                          st.sampled_from(["a", "b", None]),
                          st.one_of(st.none(), st.floats(-1e9, 1e9), st.sampled_from([float("inf"), -0.0])),
                          st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1))), max_size=40)


def _per_row(bounded: object) -> str:
    """The same query with the per-row scaling (corrects_heavy_units switched off)."""
    original = rr.corrects_heavy_units
    rr.corrects_heavy_units = lambda analysis: False
    try:
        return rr.rewrite_ranked(bounded)  # type: ignore[no-any-return]
    finally:
        rr.corrects_heavy_units = original


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=8, deadline=None)
@given(data=rows, k=st.integers(1, 6), g=st.integers(1, 3), cap=st.sampled_from([1, 7, 1000, 2**20, 2**40, 2**62]))
# unit 0's total of n is exactly the cap (kept whole), unit 1's one above it (scaled)
@example(data=[(0, "a", "N", "a", None, 3), (0, "b", "N", "a", None, 4), (1, "a", "N", "b", None, 8)], k=6, g=3,
         cap=7)
def test_corrected_sums_equal_the_per_row_scaling(query: str, data: list[tuple[object, ...]], k: int, g: int,
                                                  cap: int) -> None:
    analysis = analyse(parse(query), CATALOG, canonical_units=True)
    caps = tuple((c, cap) for c in ("x", "n") if c in query)
    bounded = auto.for_sql(auto.at_bound(analysis, k, min(g, analysis.max_groups), (), caps), AUTO)
    assert rr.corrects_heavy_units(bounded)
    corrected, per_row = _on_store([rr.rewrite_ranked(bounded), _per_row(bounded)], data)
    assert "LEFT JOIN" in rr.rewrite_ranked(bounded) and "LEFT JOIN" not in _per_row(bounded)
    assert sorted(corrected, key=repr) == sorted(per_row, key=repr)
