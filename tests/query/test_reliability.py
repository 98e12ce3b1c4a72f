"""The reliability flag's inputs and rule, exactly (proxy/http/views/answer.py `unreliable`, `with_row_bars`;
proxy/query/release/publish.py `Release.counts`, `Release.parts`; issue #29 item 8: AVG/VAR/STDDEV bars from
the released noisy parts)."""

from __future__ import annotations

import pytest

from mechanisms import laplace
from mechanisms.sampling import FixedSampler
from proxy.http.views.answer import noise, unreliable, with_row_bars
from proxy.query.analyse.measures import fixed_point, measures_of
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from proxy.query.release.error_bars import mean_interval, part_halfwidths, variance_interval
from proxy.query.release.publish import release
from proxy.schemas import NoiseOut

TABLE = TableSchema("o", "cid", (ColumnSpec("cid", "BIGINT"),
                                 ColumnSpec("r", "VARCHAR", groupable=True, unit_level=True, public_domain=("N", "S")),
                                 ColumnSpec("x", "INTEGER", bounds=(0, 10))))
SQL = "SELECT r, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a, VAR_POP(x) AS v, STDDEV_POP(x) AS d FROM o GROUP BY r"


def _plan():  # type: ignore[no-untyped-def]
    return plan(SQL, Catalog((TABLE,)), epsilon=1.0, delta=0.0, mechanism="laplace")


def test_parts_are_the_noisy_measures_and_row_bars_are_their_intervals() -> None:
    p = _plan()
    measures = p.analysis.measures
    # the engine's row: key, distinct units, then every measure in order; here every measure is 3 (and N = 3)
    engine = [("N", 2, *([3] * len(measures)))]
    out = release(engine, p.analysis, p.price, FixedSampler((1,)))  # every noise draw is +1
    assert [row[0] for row in out.rows] == ["N", "S"]
    # AVG, VAR, STDDEV divide by the noisy count of x: 3 + 1 on N, 0 + 1 on the empty S; COUNT, SUM: none
    assert out.counts == ((None, None, None, 4.0, 4.0, 4.0), (None, None, None, 1.0, 1.0, 1.0))
    assert out.parts == ((None, None, None, (4, 4), (4, 4, 4), (4, 4, 4)),
                         (None, None, None, (1, 1), (1, 1, 1), (1, 1, 1)))
    bars = with_row_bars(p.analysis, p.price, out.rows, out.parts, noise(p.analysis, p.price, 0.9))
    by_name = {b.column: b for b in bars}
    assert by_name["n"].ci_rows is None and by_name["s"].ci_rows is None and by_name["n"].method == "noise"
    avg = measures_of(p.analysis.aggregates[2], TABLE)[0]
    h_s, h_n = part_halfwidths(p.analysis, p.price, 2, 0.9)
    for i, row in enumerate(out.rows):
        s, n = out.parts[i][3]  # type: ignore[misc]
        assert by_name["a"].interval_rows[i] == list(mean_interval(s, n, h_s, h_n, avg))  # type: ignore[index, arg-type]
        lo, hi = by_name["a"].interval_rows[i]  # type: ignore[index, misc]
        assert lo <= row[3] <= hi and by_name["a"].ci_rows[i] == max(row[3] - lo, hi - row[3])  # type: ignore[index, operator]
    assert by_name["a"].method == by_name["v"].method == by_name["d"].method == "parts"
    assert by_name["v"].parts_rows == [[4, 4, 4], [1, 1, 1]]
    widths = part_halfwidths(p.analysis, p.price, 3, 0.9)
    centred = measures_of(p.analysis.aggregates[3], TABLE)[1]
    assert by_name["v"].interval_rows[0] == list(variance_interval((4, 4, 4), widths, centred, "var_pop"))  # type: ignore[index, arg-type]


def test_each_part_takes_the_kth_root_of_the_confidence() -> None:
    """k independent parts, each at confidence^(1/k): together exactly at the confidence."""
    p = _plan()
    scales = {n.measure: n.scale for n in p.price.noise}
    index = {m: j for j, m in enumerate(p.analysis.measures)}
    for k, level in ((2, 0.95), (3, 0.95), (2, 0.5)):
        aggregate_index = 2 if k == 2 else 3
        parts = measures_of(p.analysis.aggregates[aggregate_index], p.analysis.table)
        expected = tuple(laplace.ci_halfwidth(scales[index[m]], level ** (1 / k)) for m in parts)
        assert part_halfwidths(p.analysis, p.price, aggregate_index, level) == expected


def _bar(column: str, ci: float | None = None, rows: list[float | None] | None = None) -> NoiseOut:
    return NoiseOut(column=column, mechanism="laplace", scale=None, ci95=None, ci=ci, ci_rows=rows)


@pytest.mark.parametrize(("rows", "flagged"), [
    # r, n, s, a, v, d
    ([["N", 10, -50.0, 5.0, 4.0, 2.0]], []),  # every bar (3, 40, 1, 2, 1.5) below its value
    ([["N", 3, 40.0, 1.0, 2.0, 1.5]], []),  # equal to the value is not wider
    ([["N", 2, -39.0, 0.5, 1.0, 1.0]], [[0, 1], [0, 2], [0, 3], [0, 4], [0, 5]]),
    ([["S", 0, 0.0, None, 0.0, 0.0]], [[0, 1], [0, 2], [0, 4], [0, 5]]),  # zeros under noise; NULL not judged
])
def test_the_rule(rows: list[list[object]], flagged: list[list[int]]) -> None:
    p = _plan()
    bars = [_bar("n", ci=3.0), _bar("s", ci=40.0), _bar("a", rows=[1.0]), _bar("v", rows=[2.0]),
            _bar("d", rows=[1.5])]
    assert unreliable(p.analysis, rows, bars) == flagged


def test_no_bar_no_flag() -> None:
    p = _plan()
    bars = [_bar("n", ci=3.0), _bar("s", ci=40.0), _bar("a", rows=[None]), _bar("v"), _bar("d", rows=[None])]
    assert unreliable(p.analysis, [["S", 5, 100.0, 1e-9, 0.0, 0.0]], bars) == []


# the demo's shape: amount declared in [0, 100 000], each user's total capped (auto/total.py) at C = 2 000, at
# most 20 visits per user; 1 000 users × 20 visits averaging 57
_X = ColumnSpec("x", "DOUBLE", bounds=(0, 100_000), auto_bounds=True)
_GRID = fixed_point(_X)[0]
CAPPED = TableSchema("o", "cid", (ColumnSpec("cid", "BIGINT"),
                                  ColumnSpec("x", "DOUBLE", bounds=(0, 100_000), auto_bounds=True,
                                             total_cap=2_000 * _GRID)), max_rows=20)


@pytest.mark.parametrize("offset", [0, 1, -1])  # no noise, and every part off by its own 95 % half-width
def test_an_average_near_57_over_thousands_of_rows_is_not_flagged_at_epsilon_0_1(offset: int) -> None:
    p = plan("SELECT COUNT(*) AS n, AVG(x) AS a FROM o", Catalog((CAPPED,)), epsilon=0.1, delta=0.0,
             mechanism="laplace")
    rows, count = 20_000, 20_000
    exact = (1_000, rows, 57 * rows * _GRID, count)  # units, COUNT(*), the capped sum, COUNT(x)
    offsets = tuple(offset * n.ci95 for n in sorted(p.price.noise, key=lambda n: n.measure))
    out = release([exact], p.analysis, p.price, FixedSampler(offsets))
    bars = with_row_bars(p.analysis, p.price, out.rows, out.parts, noise(p.analysis, p.price, 0.95))
    mean = bars[1]
    assert mean.ci_rows is not None and mean.interval_rows is not None
    # the any-data bar assumes averages up to 100 000: ±(h_S + 100 000·h_N)/N̂, thousands, flagged before
    assert mean.ci_times_count / out.counts[0][1] > 1_000  # type: ignore[operator]
    assert unreliable(p.analysis, out.rows, bars) == []
    lo, hi = mean.interval_rows[0]  # type: ignore[misc]
    assert lo < 57 < hi and mean.ci_rows[0] < 40  # type: ignore[operator]
