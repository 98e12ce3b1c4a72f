"""L0 = min(g, d): a release over a public domain of d < max_groups cells is noised for d groups per unit
(docs/privacy.md §1, "L0 of the release"; price/charge.py `release_l0`).

The oracle runs the rewritten SQL on D and D minus one unit whose rows spread over many more groups than the
domain has, inside and outside it (and NULL keys), per query and on the bounding store, and checks that at most
min(g, d) released cells move, each within its per-group sensitivity. Then the noise scale itself, exactly.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mechanisms import laplace
from mechanisms.gaussian import zcdp
from mechanisms.rounding import sqrt_up
from proxy.query.analyse.analysis import analyse, public_cells
from proxy.query.auto.bounds import price_at
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.parse.statement import parse
from proxy.query.price.charge import price, release_l0
from proxy.query.rewrite.on_store import rewrite_ranked
from proxy.query.rewrite.per_query import rewrite
from tests.support import oracle_db

TABLE = TableSchema(
    name="t",
    privacy_unit="uid",
    columns=(
        ColumnSpec("uid", "BIGINT"),
        ColumnSpec("g", "VARCHAR", groupable=True),  # no public domain: private partitions keep L0 = max_groups
        ColumnSpec("p", "VARCHAR", groupable=True, public_domain=("a", "b")),
        ColumnSpec("w", "VARCHAR", groupable=True, public_domain=("x", "y")),
        ColumnSpec("n", "INTEGER", bounds=(0, 10)),
    ),
    max_groups=6,
    max_rows=3,
)
CATALOG = Catalog((TABLE,))
COLUMNS = "uid BIGINT, g VARCHAR, p VARCHAR, w VARCHAR, n INTEGER"

QUERIES = [
    "SELECT p, COUNT(*), SUM(n), COUNT(DISTINCT uid) FROM t GROUP BY p",  # d = 2 < g = 6
    "SELECT p, w, COUNT(*), AVG(n) FROM t GROUP BY p, w",  # d = 4 < g = 6
    "SELECT p, COUNT(n), SUM(n) FROM t WHERE n > 2 GROUP BY p",
]

rows = st.lists(
    st.tuples(
        st.integers(0, 4),
        st.sampled_from(["a", "b", "c", "d", "e", "f", "g"]),
        st.sampled_from(["a", "b", "z", "q", None]),  # values outside the public domain, and NULL
        st.sampled_from(["x", "y", "v", None]),
        st.one_of(st.none(), st.integers(-5, 20)),
    ),
    max_size=40,
)
# one heavy unit in every group, inside and outside both domains
HEAVY = [(0, g, p, w, 10) for g in "abcdefg" for p in ("a", "b", "z", "q", None) for w in ("x", "y", "v")
         for _ in range(4)] + [(1, "a", "a", "x", 3)]


def _check(analysis_query: str, big: dict, small: dict) -> None:  # type: ignore[type-arg]
    analysis = analyse(parse(analysis_query), CATALOG)
    l0 = release_l0(analysis)
    assert l0 == min(TABLE.max_groups, len(public_cells(analysis))) < TABLE.max_groups
    domain = set(public_cells(analysis))
    assert set(big) | set(small) <= domain  # the engine computes domain cells only; the release reads only those
    sensitivities = [1] + [m.sensitivity(TABLE.max_rows) for m in analysis.measures]
    oracle_db.assert_moves_within(big, small, sensitivities, l0, analysis_query)


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=oracle_db.examples(25), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, removed=st.integers(0, 4), salt=st.integers(0, 2**62))
@example(data=HEAVY, removed=0, salt=1)
def test_a_unit_moves_at_most_min_g_d_released_cells(query: str, data: list[tuple[object, ...]], removed: int,
                                                      salt: int) -> None:
    analysis = analyse(parse(query), CATALOG)
    sql = rewrite(analysis, salt)
    run = lambda d: oracle_db.run(sql, {"t": (COLUMNS, d)}, len(analysis.keys), value=oracle_db.as_int)  # noqa: E731
    _check(query, run(data), run([r for r in data if r[0] != removed]))


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=oracle_db.examples(15), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, removed=st.integers(0, 4), salt=st.integers(0, 2**62), key=st.text("0123456789abcdef", min_size=1))
@example(data=HEAVY, removed=0, salt=1, key="k")
def test_on_the_store_a_unit_moves_at_most_min_g_d_released_cells(
    query: str, data: list[tuple[object, ...]], removed: int, salt: int, key: str
) -> None:
    """On the store a unit's groups outside the domain still take some of its g ranks: fewer cells, never more."""
    analysis = analyse(parse(query), CATALOG, canonical_units=True)
    sql = rewrite_ranked(analysis, salt)

    def run(d: list[tuple[object, ...]]) -> dict:  # type: ignore[type-arg]
        return oracle_db.run(sql, {"t": (COLUMNS, d)}, len(analysis.keys), value=oracle_db.as_int, store=(TABLE,),
                             key=key)

    _check(query, run(data), run([r for r in data if r[0] != removed]))


def test_private_partitions_keep_max_groups() -> None:
    assert release_l0(analyse(parse("SELECT g, COUNT(*) FROM t GROUP BY g"), CATALOG)) == TABLE.max_groups
    assert release_l0(analyse(parse("SELECT COUNT(*) FROM t"), CATALOG)) == 1
    nine = ColumnSpec("p", "VARCHAR", groupable=True, public_domain=tuple(map(str, range(9))))
    big = TableSchema("t", "uid", (*TABLE.columns[:2], nine), max_groups=6, max_rows=3)
    assert release_l0(analyse(parse("SELECT p, COUNT(*) FROM t GROUP BY p"), Catalog((big,)))) == 6  # d = 9 > g


def _two_valued(max_groups: int, **auto: bool) -> TableSchema:
    return TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"),
                                    ColumnSpec("p", "VARCHAR", groupable=True, public_domain=("a", "b"))),
                       max_groups=max_groups, max_rows=5, **auto)


def test_count_scale_at_d_2_g_8_is_two_eighths() -> None:
    """COUNT(*) grouped by a two-valued key with max_groups = 8: Δ1 = 2·k, the Laplace scale 2/8 of g·k's, exactly."""
    query = "SELECT p, COUNT(*) FROM t GROUP BY p"
    analysis = analyse(parse(query), Catalog((_two_valued(8),)))
    (noise,) = price(analysis, epsilon=0.1, delta=0.0, mechanism="laplace").noise
    before = laplace.scale_for(8 * 5, 0.1)  # what L0 = g charged
    assert noise.sensitivity == 2 * 5 and noise.scale == laplace.scale_for(2 * 5, 0.1)
    assert Fraction(noise.scale) == Fraction(2, 8) * Fraction(before)
    # Gaussian: Δ2 = √2·k instead of √8·k, σ half
    (gauss,) = price(analysis, epsilon=0.5, delta=1e-6, mechanism="gaussian").noise
    assert gauss.sensitivity == sqrt_up(2 * 25)
    rho = zcdp.rho(gauss.sensitivity, gauss.scale)
    assert zcdp.sigma_for(sqrt_up(8 * 25), rho) == pytest.approx(2 * gauss.scale, rel=1e-12)


def test_chosen_bounds_price_at_min_g_d() -> None:
    """On an auto table the query at the chosen bound k is noised for min(g, d) groups too."""
    table = _two_valued(8, auto_max_rows=True)
    analysis = analyse(parse("SELECT p, COUNT(*) FROM t GROUP BY p"), Catalog((table,)))
    at_limit = price(analysis, epsilon=0.5, delta=0.0, mechanism="laplace")
    (noise,) = price_at(at_limit, analysis, 3).noise
    assert noise.sensitivity == 2 * 3
    assert laplace.epsilon(noise.sensitivity, noise.scale) <= laplace.epsilon(at_limit.noise[0].sensitivity,
                                                                              at_limit.noise[0].scale)


@pytest.mark.parametrize("query", ["SELECT p, MEDIAN(n) FROM t GROUP BY p",
                                   "SELECT p, w, MEDIAN(n) FROM t GROUP BY p, w"])
def test_quantiles_split_over_min_g_d_groups(query: str) -> None:
    """Each quantile's per-group ε is its share over min(g, d) groups, and the event records L0 = min(g, d)."""
    analysis = analyse(parse(query), CATALOG)
    priced = price(analysis, epsilon=1.0, delta=0.0, mechanism="laplace")
    (spec,) = priced.quantiles
    l0 = len(list(itertools.product(*analysis.domains)))
    assert spec.event.sensitivity / spec.event.scale <= 1.0  # the whole share: min(g, d) groups at ε/L0 each
    assert spec.event.sensitivity == pytest.approx(l0 * 2 * Fraction(1, 2) * TABLE.max_rows, abs=1e-9)


@pytest.mark.parametrize("query", QUERIES[:2])
def test_the_bound_is_reached(query: str) -> None:
    """The heavy unit moves every one of the d cells: min(g, d) cannot be lowered, and L0 = g was d's g/d times."""
    analysis = analyse(parse(query), CATALOG)
    sql = rewrite(analysis, 1)
    big, small = (oracle_db.run(sql, {"t": (COLUMNS, d)}, len(analysis.keys), value=oracle_db.as_int)
                  for d in (HEAVY, [r for r in HEAVY if r[0] != 0]))
    zero = (0,) * (1 + len(analysis.measures))
    moved = {c for c in set(big) | set(small) if big.get(c, zero)[1] != small.get(c, zero)[1]}
    assert len(moved) == release_l0(analysis) == len(public_cells(analysis))
