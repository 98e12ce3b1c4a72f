"""AVG/VAR/STDDEV error bars from the released noisy parts (proxy/query/release/error_bars.py, issue #29 item 8).

- Coverage: over seeded discrete Laplace draws, each row's interval covers the pre-noise value (the release at
  zero noise, i.e. of the bounded rows) at least as often as the confidence asks, less a binomial margin
  computed exactly (the test fails with probability < 1e-6 when the coverage is exactly the confidence).
- The closed forms: the interval's ends against a brute force over every whole-number point of the box of
  parts (it must contain the brute force's range, and equal it where no other constraint binds).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import pytest

from mechanisms.sampling import FixedSampler
from proxy.http.views.answer import noise, with_row_bars
from proxy.query.analyse.measures import Measure
from proxy.query.analyse.spread import variance
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from proxy.query.release.error_bars import mean_interval, variance_interval
from proxy.query.release.publish import release

TABLE = TableSchema("o", "cid", (ColumnSpec("cid", "BIGINT"),
                                 ColumnSpec("r", "VARCHAR", groupable=True, unit_level=True,
                                            public_domain=("a", "b", "c")),
                                 ColumnSpec("x", "INTEGER", bounds=(0, 10))))
SQL = "SELECT r, AVG(x) AS m, VAR_POP(x) AS v, STDDEV_SAMP(x) AS s FROM o GROUP BY r"


@dataclass
class SeededLaplace:
    """Discrete Laplace noise from a seeded generator (the difference of two geometric counts), for a
    reproducible coverage count; the production sampler draws the same distribution from the OS CSPRNG."""

    seed: int
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def laplace(self, values: Sequence[int], scale: float) -> tuple[int, ...]:
        p = -math.expm1(-1 / scale)  # P[stop] of each geometric count: q = e^(−1/b)
        size = len(values)
        noise_ = self.rng.geometric(p, size) - self.rng.geometric(p, size)
        return tuple(int(v) + int(z) for v, z in zip(values, noise_, strict=True))

    def gaussian(self, values: Sequence[int], sigma: float) -> tuple[int, ...]:
        raise NotImplementedError

    def salt(self) -> int:
        return 0

    def exponential_index(self, numerators: Sequence[int], denominator: int) -> int:
        raise NotImplementedError


def _exact_rows(p) -> list[tuple[object, ...]]:  # type: ignore[no-untyped-def]
    """Three groups of 12, 60 and 600 rows of values 0..10, as the engine returns them (key, units, measures)."""
    rows = []
    for key, n in (("a", 12), ("b", 60), ("c", 600)):
        values = [(3 * i * i + i) % 11 for i in range(n)]
        by_kind = {}
        for m in p.analysis.measures:
            c = m.centre if m.kind in ("centred_sum", "centred_squares") else 0
            if m.kind == "values":
                by_kind[m] = n
            elif m.kind == "centred_sum":
                by_kind[m] = sum(v * m.grid - c for v in values)
            else:
                assert m.kind == "centred_squares"
                by_kind[m] = sum((v * m.grid - c) ** 2 for v in values)
        rows.append((key, n, *(by_kind[m] for m in p.analysis.measures)))
    return rows


def _lowest_passing(trials: int, level: float, alpha: float = 1e-6) -> int:
    """The largest c with P[Binomial(trials, level) < c] <= alpha, summed exactly (fractions of integers)."""
    p, bound = Fraction(str(level)), Fraction(str(alpha))
    total, c = Fraction(0), 0
    while True:
        term = math.comb(trials, c) * p**c * (1 - p) ** (trials - c)
        if total + term > bound:
            return c
        total += term
        c += 1


@pytest.mark.parametrize("confidence", [0.95, 0.5])
def test_intervals_cover_the_pre_noise_value_at_the_confidence(confidence: float) -> None:
    p = plan(SQL, Catalog((TABLE,)), epsilon=1.0, delta=0.0, mechanism="laplace")
    exact = _exact_rows(p)
    truth = release(exact, p.analysis, p.price, FixedSampler((0,))).rows
    trials, sampler = 800, SeededLaplace(29)
    covered = {name: 0 for name in ("m", "v", "s")}
    widths: dict[str, list[float]] = {name: [] for name in covered}
    for _ in range(trials):
        out = release(exact, p.analysis, p.price, sampler)
        bars = with_row_bars(p.analysis, p.price, out.rows, out.parts, noise(p.analysis, p.price, confidence))
        for j, bar in enumerate(bars, start=1):
            for i, interval in enumerate(bar.interval_rows or []):
                if interval is None:  # a NULL release (noisy count too small) has no interval: a miss
                    continue
                lo, hi = interval
                covered[bar.column] += lo - 1e-12 <= truth[i][j] <= hi + 1e-12  # type: ignore[operator]
                widths[bar.column].append(hi - lo)
    need = _lowest_passing(3 * trials, confidence)
    assert need > 3 * trials * confidence - 6 * math.sqrt(3 * trials * confidence * (1 - confidence))
    for name, count in covered.items():
        assert count >= need, (name, count, need)
    # and they are not the whole clamp range: the 600-row group's average is known to within ±1
    assert np.median(widths["m"][2::3]) < 2


def _brute(box: Sequence[range], value) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    values = [v for point in itertools.product(*box) if (v := value(*point)) is not None]
    return min(values), max(values)


MEAN = Measure("centred_sum", "x", 1, 0, 10)


@pytest.mark.parametrize(("s", "n", "h_s", "h_n"), [(40, 20, 6, 3), (-30, 12, 9, 4), (0, 9, 5, 2), (8, 4, 3, 2)])
def test_the_mean_interval_is_the_range_over_the_box(s: int, n: int, h_s: int, h_n: int) -> None:
    def mean(total: int, count: int) -> float | None:
        if count < 1 or abs(total) > 5 * count:  # a true (S, N) has |S/N| <= R
            return None
        return min(max(MEAN.centre + total / count, 0), 10)

    lo, hi = mean_interval(s, n, h_s, h_n, MEAN)  # type: ignore[misc]
    box = (range(s - h_s, s + h_s + 1), range(max(n - h_n, 1), n + h_n + 1))
    assert (lo, hi) == pytest.approx(_brute(box, mean), abs=1e-12)


def test_the_mean_interval_exact_values() -> None:
    # (40 ± 6)/(20 ± 3): 5 + 34/23, 5 + 46/17, inside the any-data bar 5 + 2 ± (6 + 5·3)/20
    assert mean_interval(40, 20, 6, 3, MEAN) == (5 + 34 / 23, 5 + 46 / 17)
    assert mean_interval(40, 20, 6, 18, MEAN) == (5 + 34 / 38, 10.0)  # N could be 2: 46/2 is past the clamp
    # a capped (uncentred) sum: no centre, R = max(|lo|, |hi|)
    assert mean_interval(570, 10, 30, 1, Measure("sum", "x", 1, 0, 100, cap=50)) == (540 / 11, 600 / 9)


@pytest.mark.parametrize("kind", ["var_pop", "var_samp", "stddev_pop", "stddev_samp"])
@pytest.mark.parametrize(("parts", "widths"), [((10, 4, 60), (2, 3, 9)), ((7, -9, 90), (2, 2, 12)),
                                               ((30, 12, 200), (4, 5, 30))])
def test_the_variance_interval_contains_the_range_over_the_box(parts: tuple[int, int, int],
                                                               widths: tuple[int, int, int], kind: str) -> None:
    def value(count: int, total: int, squares: int) -> float | None:
        if total * total > squares * count:  # no real data has Σ(x − c)² < (Σ(x − c))²/N
            return None
        out = variance(np.array([count]), np.array([total]), np.array([squares]), MEAN, kind)  # type: ignore[arg-type]
        return out[0]  # type: ignore[return-value]

    lo, hi = variance_interval(parts, widths, MEAN, kind)  # type: ignore[misc]
    box = tuple(range(p - w, p + w + 1) for p, w in zip(parts, widths, strict=True))
    low, high = _brute(box, value)
    assert lo <= low + 1e-12 and high <= hi + 1e-12
    if kind == "var_pop" and parts[1] - widths[1] <= 0 <= parts[1] + widths[1]:
        assert (lo, hi) == pytest.approx((low, high), abs=1e-12)  # no vertex off the whole numbers: exact


def test_the_variance_interval_exact_values() -> None:
    # N 10 ± 2, S 4 ± 3 (nearest 0: 1, farthest: 7), Q 60 ± 9: max (69/8 − 1/64) at u = 1/8 (the vertex
    # 69/2 is beyond), min 51/12 − 49/144
    assert variance_interval((10, 4, 60), (2, 3, 9), MEAN, "var_pop") == (51 / 12 - 49 / 144, 69 / 8 - 1 / 64)
    low, high = variance_interval((10, 4, 60), (2, 3, 9), MEAN, "var_samp")  # type: ignore[misc]
    assert (low, high) == (pytest.approx((51 / 12 - 49 / 144) * 12 / 11), pytest.approx((69 / 8 - 1 / 64) * 8 / 7))
    assert variance_interval((1, 0, 0), (0, 0, 0), MEAN, "var_samp") is None
