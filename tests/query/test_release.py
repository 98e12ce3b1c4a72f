"""Release: partition selection, noise on integers, post-processing on noisy values only."""

from __future__ import annotations

from mechanisms.sampling import FixedSampler
from proxy.query.planner import plan
from proxy.query.release.publish import release
from tests.support.catalogs import CATALOG


def _plan(sql: str, **kw: object):  # type: ignore[no-untyped-def]
    params = {"epsilon": 1.0, "delta": 1e-6, "mechanism": "laplace"} | kw
    return plan(sql, CATALOG, **params)  # type: ignore[arg-type]


def test_public_domain_releases_every_cell_including_empty_ones() -> None:
    p = _plan("SELECT region, COUNT(*) AS n FROM visits GROUP BY region")
    out = release([("S", 3, 12)], p.analysis, p.price, FixedSampler((0,)))
    assert out.columns == ("region", "n")
    assert out.rows == (("N", 0), ("S", 12), ("E", 0), ("W", 0))


def test_private_partitions_release_only_groups_over_threshold() -> None:
    p = _plan("SELECT page, COUNT(*) AS n FROM visits GROUP BY page")
    t = p.price.selection.threshold  # type: ignore[union-attr]
    rows = [("big", t, 50), ("small", t - 1, 40)]
    out = release(rows, p.analysis, p.price, FixedSampler((0,)))
    assert out.rows == (("big", 50),)


def test_sum_and_avg_are_post_processed_from_grid_integers() -> None:
    p = _plan("SELECT SUM(amount) AS s, AVG(amount) AS a, COUNT(amount) AS c FROM visits")
    grid = p.analysis.measures[0].grid
    centre = p.analysis.measures[1].centre
    # measures: sum, centred_sum, values → exact values then zero noise
    rows = [(10, 250 * grid, 250 * grid - 2 * centre, 2)]
    out = release(rows, p.analysis, p.price, FixedSampler((0,)))
    assert out.rows == ((250.0, 125.0, 2),)


def test_avg_is_null_when_noisy_count_is_not_positive() -> None:
    p = _plan("SELECT AVG(amount) AS a FROM visits")
    out = release([(0, 0, 0)], p.analysis, p.price, FixedSampler((-1,)))
    assert out.rows == ((None,),)


def test_having_order_limit_apply_to_noisy_values() -> None:
    p = _plan("SELECT region, COUNT(*) AS n FROM visits GROUP BY region HAVING n > 5 ORDER BY n DESC LIMIT 2")
    rows = [("N", 1, 6), ("S", 1, 9), ("E", 1, 4), ("W", 1, 20)]
    # noise +2 on every cell: E becomes 6 (> 5) — HAVING sees noisy values, never exact ones
    out = release(rows, p.analysis, p.price, FixedSampler((2,)))
    assert out.rows == (("W", 22), ("S", 11))
    out_all = release(rows, p.analysis, p.price, FixedSampler((-5,)))
    assert out_all.rows == (("W", 15),)


def test_counts_are_never_negative_and_stay_integers() -> None:
    p = _plan("SELECT COUNT(*) AS n, SUM(duration_s) AS d FROM visits")
    out = release([(1, 0, 0)], p.analysis, p.price, FixedSampler((-3,)))
    assert out.rows == ((0, -3),)
    assert isinstance(out.rows[0][0], int) and isinstance(out.rows[0][1], int)


def test_arithmetic_and_division_by_zero() -> None:
    p = _plan("SELECT SUM(duration_s) / COUNT(*) AS per_visit, -COUNT(*) + 1 AS x FROM visits")
    # measures: sum(duration_s), rows → sum 100 over 0 rows
    out = release([(1, 100, 0)], p.analysis, p.price, FixedSampler((0,)))
    assert out.rows == ((None, 1),)
