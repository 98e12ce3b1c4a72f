"""Δ2 = √L0 · s was rounded twice (nextafter(fl(√L0)·s)) and fell below the truth for 410 (L0, s) pairs
with L0 <= 1000, s <= 100 (e.g. L0 = 73, s = 3): ρ was charged ~1e-16 too low. Must round up once."""

from __future__ import annotations

import math
from fractions import Fraction

from accountant.events import GaussianEvent
from mechanisms.rounding import sqrt_up
from proxy.query.analyse.analysis import analyse
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.parse.statement import parse
from proxy.query.price.charge import price


def _old(l0: int, s: int) -> float:
    return math.nextafter(math.sqrt(l0) * s, math.inf)


def test_the_old_formula_rounds_below_the_truth() -> None:
    bad = [(l0, s) for l0 in range(1, 1001) for s in range(1, 101) if Fraction(_old(l0, s)) ** 2 < l0 * s * s]
    assert len(bad) == 410 and (73, 3) in bad


def test_sqrt_up_is_the_smallest_float_at_or_above_the_exact_root() -> None:
    for l0 in range(1, 1001):
        for s in range(1, 101):
            x = sqrt_up(l0 * s * s)
            assert Fraction(x) ** 2 >= l0 * s * s
            assert Fraction(math.nextafter(x, 0.0)) ** 2 < l0 * s * s


def test_price_charges_the_exact_l2_sensitivity() -> None:
    t = TableSchema(
        "visits", "uid",
        (ColumnSpec("uid", "BIGINT"), ColumnSpec("page", "VARCHAR", groupable=True,
                                                 public_domain=tuple(f"p{i}" for i in range(80)))),
        max_groups=73, max_rows=3,  # 80 cells >= 73: L0 = max_groups
    )
    a = analyse(parse("SELECT page, COUNT(*) FROM visits GROUP BY page"), Catalog((t,)))
    event = price(a, epsilon=1.0, delta=1e-6, mechanism="gaussian").event
    gaussians = [e for e in getattr(event, "events", ()) if isinstance(e, GaussianEvent)]
    assert gaussians and all(Fraction(e.sensitivity) ** 2 >= 73 * 9 for e in gaussians)
    assert gaussians[0].sensitivity == sqrt_up(73 * 9)
