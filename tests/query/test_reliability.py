"""The reliability flag's inputs and rule, exactly (proxy/http/views/answer.py `unreliable`, `with_row_bars`;
proxy/query/release/publish.py `Release.counts`)."""

from __future__ import annotations

import pytest

from mechanisms.sampling import FixedSampler
from proxy.http.views.answer import noise, unreliable, with_row_bars
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from proxy.query.release.publish import release
from proxy.schemas import NoiseOut

TABLE = TableSchema("o", "cid", (ColumnSpec("cid", "BIGINT"),
                                 ColumnSpec("r", "VARCHAR", groupable=True, unit_level=True, public_domain=("N", "S")),
                                 ColumnSpec("x", "INTEGER", bounds=(0, 10))))
SQL = "SELECT r, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a, VAR_POP(x) AS v, STDDEV_POP(x) AS d FROM o GROUP BY r"


def _plan():  # type: ignore[no-untyped-def]
    return plan(SQL, Catalog((TABLE,)), epsilon=1.0, delta=0.0, mechanism="laplace")


def test_counts_are_the_noisy_denominators_and_row_bars_divide_by_them() -> None:
    p = _plan()
    measures = p.analysis.measures
    # the engine's row: key, distinct units, then every measure in order; here every measure is 3 (and N = 3)
    engine = [("N", 2, *([3] * len(measures)))]
    out = release(engine, p.analysis, p.price, FixedSampler((1,)))  # every noise draw is +1
    assert [row[0] for row in out.rows] == ["N", "S"]
    # AVG, VAR, STDDEV divide by the noisy count of x: 3 + 1 on N, 0 + 1 on the empty S; COUNT, SUM: none
    assert out.counts == ((None, None, None, 4.0, 4.0, 4.0), (None, None, None, 1.0, 1.0, 1.0))
    bars = with_row_bars(p.analysis, out.counts, noise(p.analysis, p.price, 0.9))
    by_name = {b.column: b for b in bars}
    assert by_name["n"].ci_rows is None and by_name["s"].ci_rows is None
    for name in "avd":
        ctc = by_name[name].ci_times_count
        assert ctc is not None and by_name[name].ci_rows == [ctc / 4.0, ctc / 1.0]


def _bar(column: str, ci: float | None = None, rows: list[float | None] | None = None) -> NoiseOut:
    return NoiseOut(column=column, mechanism="laplace", scale=None, ci95=None, ci=ci, ci_rows=rows)


@pytest.mark.parametrize(("rows", "flagged"), [
    # r, n, s, a, v, d
    ([["N", 10, -50.0, 5.0, 4.0, 2.0]], []),  # every bar (3, 40, 1, 2, 3 in variance units) below its value
    ([["N", 3, 40.0, 1.0, 2.0, 1.75]], []),  # equal to the value is not wider; STDDEV 1.75² = 3.0625 > 3
    ([["N", 2, -39.0, 0.5, 1.0, 1.0]], [[0, 1], [0, 2], [0, 3], [0, 4], [0, 5]]),
    ([["S", 0, 0.0, None, 0.0, 0.0]], [[0, 1], [0, 2], [0, 4], [0, 5]]),  # zeros under noise; NULL not judged
])
def test_the_rule(rows: list[list[object]], flagged: list[list[int]]) -> None:
    p = _plan()
    bars = [_bar("n", ci=3.0), _bar("s", ci=40.0), _bar("a", rows=[1.0]), _bar("v", rows=[2.0]),
            _bar("d", rows=[3.0])]
    assert unreliable(p.analysis, rows, bars) == flagged


def test_no_bar_no_flag() -> None:
    p = _plan()
    bars = [_bar("n", ci=3.0), _bar("s", ci=40.0), _bar("a", rows=[None]), _bar("v"), _bar("d", rows=[None])]
    assert unreliable(p.analysis, [["S", 5, 100.0, 1e-9, 0.0, 0.0]], bars) == []
