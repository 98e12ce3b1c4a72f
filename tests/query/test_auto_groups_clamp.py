"""max_groups = "auto" and a column's bounds = "auto" (issue #12 part 2): policy, the extended event, the charge
bounding every part at every chosen bound, the neighbouring-dataset oracle over every selection histogram
and the query at the chosen bounds, with data that violates every declaration, and the choice on real data."""

from __future__ import annotations

import bisect
import itertools
import math
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from accountant import loss, report
from accountant.events import AutoBoundsEvent, ComposedEvent, ExponentialEvent, LaplaceEvent, from_json, to_json
from mechanisms import count_target, laplace
from mechanisms.sampling import FixedSampler, SecureSampler
from proxy.policy.load import load_policy, policy_problems
from proxy.query import auto_release
from proxy.query.analyse.analysis import Analysis, analyse
from proxy.query.analyse.measures import Measure, fixed_point
from proxy.query.auto import bounds as auto
from proxy.query.auto import clamp, histograms, total
from proxy.query.auto import groups as auto_groups
from proxy.query.auto import rows as rows_module
from proxy.query.auto.histograms import selection, slots, standalone
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.parse.statement import parse
from proxy.query.planner import plan
from proxy.query.rewrite import store_layout
from proxy.query.rewrite.on_store import rewrite_ranked
from proxy.query.rewrite.per_query import rewrite
from proxy.query.rewrite.render import DUCKDB
from tests.oracle.test_sensitivity import TABLE, rows
from tests.policy.test_policy import VALID, write
from tests.query.test_auto_bounds import _laplace
from tests.support import scratch_db

COLUMNS = tuple(ColumnSpec(c.name, c.type, c.bounds, c.unit_level, c.public_domain, c.groupable,
                           auto_bounds=c.name in ("x", "n")) for c in TABLE.columns)
AUTO = TableSchema("t", "uid", COLUMNS, max_groups=3, max_rows=6, auto_max_rows=True, auto_max_groups=True)
CATALOG = Catalog((AUTO,))

# --- policy -------------------------------------------------------------------------------------------------


def test_auto_groups_and_clamp_load_with_their_limits(tmp_path: Path) -> None:
    text = VALID.replace("max_groups = 4", 'max_groups = "auto"\nmax_groups_limit = 12').replace(
        'amount = { type = "DOUBLE", bounds = [0.0, 500.0] }',
        'amount = { type = "DOUBLE", bounds = "auto", bounds_limit = [0, 100000] }')
    dataset = load_policy(write(tmp_path, text)).dataset("demo")
    assert dataset is not None
    (table,) = dataset.catalog.tables
    assert (table.auto_max_groups, table.max_groups, table.auto_max_rows) == (True, 12, False)
    amount = table.column("amount")
    assert amount is not None and (amount.auto_bounds, amount.bounds) == (True, (0.0, 100000.0))
    default = load_policy(write(tmp_path, VALID.replace("max_groups = 4", 'max_groups = "auto"'))).dataset("demo")
    assert default is not None and default.catalog.tables[0].max_groups == auto.DEFAULT_GROUPS_LIMIT


@pytest.mark.parametrize(("old", "new", "location", "words"), [
    ('amount = { type = "DOUBLE", bounds = [0.0, 500.0] }', 'amount = { type = "DOUBLE", bounds = "auto" }',
     "columns.amount.bounds_limit", "needs its outer limits"),
    ('bounds = [0.0, 500.0]', 'bounds = [0.0, 500.0], bounds_limit = [0, 9]', "columns.amount.bounds_limit",
     'only with bounds = "auto"'),
    ('amount = { type = "DOUBLE", bounds = [0.0, 500.0] }',
     'amount = { type = "DOUBLE", bounds = "auto", bounds_limit = [5, 1] }', "columns.amount.bounds_limit",
     "lo <= hi"),
    ("max_groups = 4", "max_groups = 4\nmax_groups_limit = 9", "visits.max_groups_limit",
     'only with max_groups = "auto"'),
    ("max_groups = 4", 'max_groups = "auto"\nmax_groups_limit = 0', "visits.max_groups_limit", "[1, 10000]"),
])
def test_bad_auto_groups_and_clamp_settings_are_refused(tmp_path: Path, old: str, new: str, location: str,
                                                        words: str) -> None:
    assert old in VALID
    problems = policy_problems(write(tmp_path, VALID.replace(old, new, 1)))
    assert any(location in p and words in p for p in problems), problems


# --- the event and the charge ---------------------------------------------------------------------------------

EVENT = AutoBoundsEvent(ExponentialEvent(2.0, 64.0), ComposedEvent((LaplaceEvent(12, 48.0), LaplaceEvent(6, 12.0))),
                        (ExponentialEvent(1.0, 32.0), ExponentialEvent(8.0, 256.0)))


def test_several_selections_account_as_their_composition_under_every_rule() -> None:
    assert from_json(to_json(EVENT)) == EVENT
    composed = ComposedEvent((EVENT.selection, *EVENT.more, EVENT.query))
    assert loss.epsilon_delta(EVENT, 0.0) == loss.epsilon_delta(composed, 0.0) == (0.84375, 0.0)
    assert loss.rho(EVENT) == loss.rho(composed)
    assert loss.approximate_rho(EVENT) == loss.approximate_rho(composed)
    assert loss.approximate_mu(EVENT) == loss.approximate_mu(composed)
    entries = [report.Entry(EVENT, 0.84375, 0.0)] * 4
    assert report.pld_report(entries, 1e-6) == report.pld_report([report.Entry(composed, 0.84375, 0.0)] * 4, 1e-6)
    old = {"kind": "auto_bounds", "selection": to_json(EVENT.selection), "query": to_json(EVENT.query)}
    assert to_json(from_json(old)) == old  # events stored before `more` existed read and write back unchanged
    with pytest.raises(ValueError, match="exponential"):
        from_json({**old, "more": [to_json(LaplaceEvent(1.0, 1.0))]})


QUERIES = [
    "SELECT g, COUNT(*), SUM(x), AVG(n) FROM t GROUP BY g",
    "SELECT g, r, SUM(n), AVG(x) FROM t WHERE n > 2 GROUP BY g, r",
    "SELECT r, COUNT(*), SUM(x) FROM t WHERE r = 'N' GROUP BY r",
]


@pytest.mark.parametrize("query", QUERIES)
def test_the_charge_bounds_every_part_at_every_chosen_bound(query: str) -> None:
    """The admitted charge is the selections plus the query at the limits; at every combination of chosen
    bounds (max_rows, max_groups, each clamp end on its grid) no noise part costs more than its recorded part."""
    planned = plan(query, CATALOG, epsilon=0.7, delta=1e-7, mechanism="laplace", bounding="store", auto_share=0.1)
    assert planned.auto is not None and isinstance(planned.price.event, AutoBoundsEvent)
    parts = planned.auto.parts
    assert (planned.price.event.selection, planned.price.event.more) == (parts[0].selection,
                                                                           tuple(p.selection for p in parts[1:]))
    charged = [laplace.epsilon(p.selection.sensitivity, p.selection.scale) for p in parts]
    assert sum(map(Fraction, charged)) <= Fraction(0.07) and all(p.epsilon <= Fraction(c) for p, c in
                                                                  zip(parts, charged, strict=True))
    assert Fraction(planned.price.epsilon) <= Fraction(0.7)
    recorded = [laplace.epsilon(e.sensitivity, e.scale) for e in _laplace(planned.price.event.query)]
    columns = sorted({p.column for p in parts if p.column and p.bound in ("lower", "upper")})  # capped: never clamped
    pairs = {}
    for c in columns:
        spec = AUTO.column(c)
        assert spec is not None and spec.bounds is not None
        grid = clamp.clamp_grid(spec.bounds, spec.type)
        pairs[c] = [(grid[i], grid[j]) for i, j in ((0, -1), (0, 0), (-1, -1), (len(grid) // 2, -1), (1, 2))]
    clamp_choices = [tuple((c, lo, hi) for c, (lo, hi) in zip(columns, combo, strict=True))
                     for combo in zip(*(pairs[c] for c in columns), strict=True)] or [()]
    groups = auto.bound_grid(3) if planned.analysis.max_groups > 1 else (1,)
    checked = 0
    for k, g, clamps in itertools.product(auto.bound_grid(6), groups, clamp_choices):
        at = auto.at_bound(planned.analysis, k, g, clamps)
        priced = auto.price_at(planned.price, at, k)
        assert priced.event == planned.price.event and priced.epsilon == planned.price.epsilon
        for spec, part in zip(priced.noise, recorded, strict=True):
            measure = at.measures[spec.measure]
            assert spec.sensitivity == g * measure.sensitivity(k) and spec.grid == measure.grid
            assert laplace.epsilon(spec.sensitivity, spec.scale) <= part if spec.sensitivity else True
        checked += 1
    assert checked >= 5


def test_groups_and_clamps_are_chosen_under_gaussian_noise_too() -> None:
    planned = plan("SELECT g, SUM(x) FROM t GROUP BY g", Catalog((TableSchema("t", "uid", COLUMNS, max_groups=3),)),
                   epsilon=0.5, delta=1e-7, mechanism="gaussian", bounding="store")
    assert [(p.bound, p.column) for p in planned.auto.parts] == [("total", "x")]  # type: ignore[union-attr]
    counted = plan("SELECT r, COUNT(*) FROM t GROUP BY r", CATALOG, epsilon=0.5, delta=1e-7, mechanism="laplace")
    assert [p.bound for p in counted.auto.parts] == ["max_rows"]  # type: ignore[union-attr]


# --- the oracle over every selection and the query at the chosen bounds ---------------------------------------

ORACLE = [*QUERIES, "SELECT g, SUM(x) FROM t WHERE uid > 1 GROUP BY g", "SELECT p, g, COUNT(*) FROM t GROUP BY p, g",
          "SELECT p, SUM(x), AVG(n) FROM t GROUP BY p"]  # a public domain: groups outside it dropped after capping


@pytest.mark.parametrize("query", ORACLE)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, removed=st.integers(0, 5), salt=st.integers(0, 2**62), k=st.integers(1, 6), g=st.integers(1, 3),
       cap=st.integers(0, 100))
@example(data=[(0, g, r, "a", 1e300, 2**31 - 1) for g in "abcd" for r in "NSE" for _ in range(5)], removed=0, salt=1,
         k=6, g=3, cap=60)
@example(data=[(0, g, r, "a", -7.25, -9) for g in "abcd" for r in "NSE" for _ in range(5)], removed=0, salt=1,
         k=6, g=3, cap=3)
def test_every_step_moves_within_its_stated_sensitivity(
    query: str, data: list[tuple[object, ...]], removed: int, salt: int, k: int, g: int, cap: int,
) -> None:
    """On D and D minus one unit, with data breaking every declaration (r varies within a unit, values far
    beyond the limits, a unit with 60 rows in 12 cells): each histogram moves by at most its sensitivity in L1
    (rows: L0 cells; groups: 1 unit; unit totals: 1), whether read from the stored ranks or per query, and the
    query at any chosen (k, g, C), on the store and per query, moves each measure by at most its sensitivity at
    those bounds: per group, and over all groups its Δ1 (L0 · per group, or min(C, ·) for a capped sum)."""
    analysis = analyse(parse(query), CATALOG, canonical_units=True)
    chooser = auto.auto_bounds(analysis, 0.1, 0.9)
    smaller = [row for row in data if row[0] != removed]
    # every summed auto column is capped (auto/total.py), never clamped: at a candidate C of its grid (index `cap`)
    caps = []
    for part in chooser.parts:
        if part.bound == "total":
            spec = AUTO.column(part.column or "")
            assert spec is not None
            grid = total.cap_grid(total.total_limit(analysis, spec))
            caps.append((spec.name, grid[min(cap, len(grid) - 1)]))
    at = auto.at_bound(analysis, k, min(g, analysis.max_groups), (), tuple(caps))
    assert [m.cap for m in at.measures if m.kind == "sum"] == [c for _, c in caps] or not caps
    firsts = _first_parts(chooser)
    selections = [f"SELECT __a, __b, __n FROM ({sql})" for store in (True, False)
                  for sql in standalone(analysis, chooser, store, DUCKDB)]
    sql = rewrite_ranked(auto.for_sql(at, AUTO), salt)  # as auto_release.plan_at renders it
    per_query = rewrite(auto.for_sql(at, AUTO), salt)  # the per-query path, over the store's table
    (*big, before, before_q), (*small, after, after_q) = (_on_store([*selections, sql, per_query], d)
                                                          for d in (data, smaller))
    for i, (b, s) in enumerate(zip(big, small, strict=True)):
        part, slot = firsts[i % len(firsts)]
        for distance, sensitivity in _distances(part, b, s):
            assert distance <= sensitivity, (query, part.bound, i, slot)
        assert_choice_within(part, b, s, query)
    n_keys = len(analysis.keys)
    for one, other in ((before, after), (before_q, after_q)):
        assert_release_within(_keyed(one, n_keys), _keyed(other, n_keys), at, k, query)


def assert_release_within(before: dict[tuple[object, ...], tuple[int, ...]],
                          after: dict[tuple[object, ...], tuple[int, ...]], at: Analysis, k: int, label: str) -> None:
    """Each measure moves by at most its per-group sensitivity in any group and by at most its release L1
    (L0 · per group, or the unit's L1 cap) over all groups: the sensitivities the noise is calibrated to."""
    zero = (0,) * (1 + len(at.measures))
    for column, measure in enumerate(at.measures, start=1):
        per_group = measure.sensitivity(k)
        moves = [abs(before.get(c, zero)[column] - after.get(c, zero)[column]) for c in set(before) | set(after)]
        assert all(m <= per_group for m in moves), (label, measure)
        assert sum(moves) <= measure.release_l1(at.max_groups, k), (label, measure, sum(moves))


def _on_store(sqls: list[str], data: list[tuple[object, ...]]) -> list[list[tuple[object, ...]]]:
    """Build the store of `data` once (store_layout.build_sql, as proxy/store/duckdb_store.py runs it), run `sqls`."""
    con = scratch_db.connect()
    con.execute("ATTACH ':memory:' AS src")
    con.execute("CREATE TABLE src.t (uid BIGINT, g VARCHAR, r VARCHAR, p VARCHAR, x DOUBLE, n INTEGER)")
    if data:
        con.executemany("INSERT INTO src.t VALUES (?, ?, ?, ?, ?, ?)", data)
    con.execute(store_layout.build_sql(AUTO, "key"))
    try:
        return [con.execute(sql).fetchall() for sql in sqls]
    finally:
        con.close()


def _keyed(result: list[tuple[object, ...]], n_keys: int) -> dict[tuple[object, ...], tuple[int, ...]]:
    return {tuple(row[:n_keys]): tuple(int(v or 0) for v in row[n_keys:]) for row in result}  # type: ignore[call-overload]


def _first_parts(chooser: auto.AutoBounds) -> list[tuple[auto.AutoPart, int]]:
    seen: dict[int, auto.AutoPart] = {}
    for part, slot in zip(chooser.parts, slots(chooser), strict=True):
        seen.setdefault(slot, part)
    return [(part, slot) for slot, part in seen.items()]


def _distances(part: auto.AutoPart, big: list[tuple[object, ...]], small: list[tuple[object, ...]]
               ) -> list[tuple[int, int]]:
    """(L1 distance, sensitivity) of each histogram a mechanism may read from the (a, b, n) rows: max_rows for
    every g <= L0 when max_groups is drawn first (cells of rank <= g, sensitivity g), max_groups (1), a clamp's
    upper and lower histograms (m)."""
    big_rows = [(int(a), int(b), int(n)) for a, b, n in big]  # type: ignore[call-overload]
    small_rows = [(int(a), int(b), int(n)) for a, b, n in small]  # type: ignore[call-overload]

    def summed(rows: list[tuple[int, int, int]], g: int) -> dict[int, int]:
        out: dict[int, int] = {}
        for a, r, n in rows:
            if r <= g:
                out[a] = out.get(a, 0) + n
        return out

    if part.bound == "max_rows":
        return [(_l1(summed(big_rows, g), summed(small_rows, g)), g if g < part.sensitivity else part.sensitivity)
                for g in range(1, part.sensitivity + 1)]
    if part.bound == "total":  # each unit in one bin of its total
        return [(_l1({a: n for a, _, n in big_rows}, {a: n for a, _, n in small_rows}), 1)]
    if part.bound == "max_groups":
        limit = int(part.limit)
        return [(_l1(dict(enumerate(auto_groups.histogram(big_rows, limit))),
                     dict(enumerate(auto_groups.histogram(small_rows, limit)))), 1)]
    spec = AUTO.column(part.column or "")
    assert spec is not None and spec.bounds is not None
    _, up_big, down_big = clamp.histograms(big_rows, spec.bounds, spec.type)
    _, up_small, down_small = clamp.histograms(small_rows, spec.bounds, spec.type)
    return [(_l1(dict(enumerate(up_big)), dict(enumerate(up_small))), part.sensitivity),
            (_l1(dict(enumerate(down_big)), dict(enumerate(down_small))), part.sensitivity)]


def assert_choice_within(part: auto.AutoPart, big: list[tuple[object, ...]], small: list[tuple[object, ...]],
                         label: str) -> None:
    """The whole selection of max_rows (at every g <= L0 it may run at) and of max_groups, by the error it causes
    (mechanisms/count_target.py, as auto_release.draw runs it), on D and D minus one unit: the exact output
    distributions' log ratio is at most the part's ε, for targets on both sides of the data (the score's
    sensitivity: every N_i moves by at most the cells one unit adds)."""
    big_rows = [(int(a), int(b), int(n)) for a, b, n in big]  # type: ignore[call-overload]
    small_rows = [(int(a), int(b), int(n)) for a, b, n in small]  # type: ignore[call-overload]
    if part.bound == "max_rows":
        grid = auto.bound_grid(int(part.limit))

        def above(rows: list[tuple[int, int, int]], g: int) -> list[int]:
            counts = [0] * len(grid)
            for c, r, n in rows:
                if r <= g:
                    counts[bisect.bisect_left(grid, c)] += n
            return count_target.counts_above(counts)

        pairs = [(above(big_rows, g), above(small_rows, g), g) for g in range(1, part.sensitivity + 1)]
        # one cell per unit (rows.choose_bound at s = 1), here at every g: the truncated cells beside the truncated
        # rows, each cell's clipped at D (count_target.joint_numerators), from the exact capped cell sizes
        for g in range(1, part.sensitivity + 1):
            sizes = [[(c, n) for c, r, n in rows if r <= g] for rows in (big_rows, small_rows)]
            for clip, weight in ((rows_module.ROWS_CLIP, rows_module.ROWS_WEIGHT), (3, Fraction(1, 2))):
                p, q = (count_target.joint_distribution(above(rows, g), Fraction(5, 2) * g,
                                                        count_target.clipped_truncation(cells, grid, clip), grid,
                                                        part.epsilon, g, clip, rows_module.ROWS_STEP, 0, weight)
                        for rows, cells in zip((big_rows, small_rows), sizes, strict=True))
                worst = max(abs(math.log(x / y)) for x, y in zip(p, q, strict=True))
                assert worst <= float(part.epsilon) * (1 + 1e-9), (label, "joint", g, clip, worst)
        # a quantile-only query's target ρ·C, C the cells read (targets.rows_share): the score moves by at most
        # max(ρ, 1 − ρ)·g, which share_numerators is calibrated to
        for g in range(1, part.sensitivity + 1):
            totals = [sum(n for _, r, n in rows if r <= g) for rows in (big_rows, small_rows)]
            for share in (Fraction(1, 2), Fraction(1, 5), Fraction(1, 10)):
                p, q = (_share_distribution(above(rows, g), total, share, part.epsilon, g)
                        for rows, total in zip((big_rows, small_rows), totals, strict=True))
                worst = max(abs(math.log(x / y)) for x, y in zip(p, q, strict=True))
                assert worst <= float(part.epsilon) * (1 + 1e-9), (label, "share", g, worst)
    elif part.bound == "max_groups":
        grid = auto.bound_grid(int(part.limit))

        def binned(rows: list[tuple[int, int, int]]) -> list[int]:
            counts = [0] * len(grid)
            for c, units in enumerate(auto_groups.histogram(rows, int(part.limit)), start=1):
                counts[bisect.bisect_left(grid, c)] += units
            return count_target.counts_above(counts)

        pairs = [(binned(big_rows), binned(small_rows), 1)]
    else:
        return
    for one, other, s in pairs:
        assert max(abs(a - b) for a, b in zip(one, other, strict=True)) <= s, (label, part.bound, s)
        for target in (Fraction(0), Fraction(1, 3) * s, Fraction(7) * s):
            p = count_target.output_distribution(one, target, part.epsilon, s)
            q = count_target.output_distribution(other, target, part.epsilon, s)
            worst = max(abs(math.log(x / y)) for x, y in zip(p, q, strict=True))
            assert worst <= float(part.epsilon) * (1 + 1e-9), (label, part.bound, s, worst)


def _share_distribution(above: list[int], total: int, share: Fraction, epsilon: Fraction, s: int) -> list[float]:
    numerators, denominator = count_target.share_numerators(above, total, share, epsilon, s)
    weights = [math.exp(-(n - min(numerators)) / denominator) for n in numerators]
    return [w / math.fsum(weights) for w in weights]


def _l1(a: dict[int, int], b: dict[int, int]) -> int:
    return sum(abs(a.get(c, 0) - b.get(c, 0)) for c in set(a) | set(b))


# --- the choice on real data ----------------------------------------------------------------------------------


def test_the_bounds_follow_the_data() -> None:
    """Units with 2 groups and totals 4.5 (limit [-3, 5.5]), one unit with 12 groups and huge values: the groups
    bound lands at 2, and x's per-unit cap just above the bulk's total 4.5 (one unit above it: t = √2/ε_sum is
    below 1, and the base measure makes a cap above the largest value 5.5 cost e^−0.7 per √2 step)."""
    table = TableSchema("t", "uid", COLUMNS, max_groups=8, max_rows=6, auto_max_groups=True)
    con = scratch_db.connect()
    con.execute("ATTACH ':memory:' AS src")
    con.execute("CREATE TABLE src.t (uid BIGINT, g VARCHAR, r VARCHAR, p VARCHAR, x DOUBLE, n INTEGER)")
    data = [(u, f"g{i}", "N", "a", 0.5 + 3.5 * (i % 2), i) for u in range(300) for i in range(2)]
    data += [(999, f"g{i}", "N", "a", 1e9, 10**6) for i in range(12)]
    con.executemany("INSERT INTO src.t VALUES (?, ?, ?, ?, ?, ?)", data)
    con.execute(store_layout.build_sql(table, "key"))
    alone = plan("SELECT g, SUM(x) FROM t GROUP BY g", Catalog((table,)), epsilon=10.0, delta=1e-7,
                 mechanism="laplace", bounding="store", auto_share=0.5)
    assert alone.auto is not None and [p.bound for p in alone.auto.parts] == ["total"]  # g only adds bias to it
    planned = plan("SELECT g, COUNT(*), SUM(x) FROM t GROUP BY g", Catalog((table,)), epsilon=10.0, delta=1e-7,
                   mechanism="laplace", bounding="store", auto_share=0.5)
    assert planned.auto is not None and [p.bound for p in planned.auto.parts] == ["max_groups", "total"]
    sql = auto_release.selection_text(planned, DUCKDB)
    chosen = auto_release.draw(planned.analysis, planned.auto, con.execute(sql).fetchall(), FixedSampler())
    ((name, cap),) = chosen.caps
    grid = fixed_point(ColumnSpec("x", "DOUBLE", bounds=(-3, 5.5)))[0]
    assert (chosen.max_groups, name, chosen.clamps) == (2, "x", ()) and 4.5 <= cap / grid < 4.5 * 1.42, chosen
    at = auto_release.plan_at(planned, chosen)
    assert at.analysis.max_groups == 2
    assert at.analysis.measures[1] == Measure("sum", "x", *fixed_point(ColumnSpec("x", "DOUBLE", bounds=(-3, 5.5))),
                                              cap=cap)
    assert "__group_rank__g <= 2" in at.sql and "WHERE __cap_t1 > " in at.sql  # the rank filter, heavy units scaled
    assert store_layout.grid_value("x") in at.sql  # a capped sum keeps the declared clamp: the store's clamped column
    assert at.price.noise[1].sensitivity == cap  # min(C, g·k·max|bound|) = C
    assert [(p["bound"], p["value"]) for p in chosen.report()["parts"]] == [  # type: ignore[index]
        ("max_groups", 2), ("total", cap / grid)]


@pytest.mark.parametrize("where", ["", " WHERE x > 1"])  # the rank filter, and the per-cell path
def test_an_auto_clamp_never_reads_the_stores_grid_even_when_the_spec_carries_the_chosen_clamp(where: str) -> None:
    """The store clamps an auto column at its declared limit; a spec rewritten to the chosen (tighter) clamp must
    make the rewrite clamp per query, or the sum would hold values up to the limit under noise for the choice."""
    import dataclasses

    from proxy.query.rewrite.on_store import rewrite_ranked

    x = ColumnSpec("x", "DOUBLE", bounds=(0, 1000), auto_bounds=True)
    base = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), x), max_rows=3, max_groups=2)
    chosen = dataclasses.replace(base, columns=(ColumnSpec("u", "BIGINT"), dataclasses.replace(x, bounds=(0, 8))))
    sql = rewrite_ranked(analyse(parse(f"SELECT SUM(x) FROM t{where}"), Catalog((chosen,))))
    assert "__grid__x" not in sql
    assert "LEAST(GREATEST(" in sql and "8" in sql


SHARED = ["SELECT g, COUNT(*), SUM(x) FROM t WHERE n > 2 GROUP BY g",
          "SELECT g, r, AVG(n) FROM t WHERE x < 50 GROUP BY g, r", "SELECT g, COUNT(*) FROM t GROUP BY g"]


@pytest.mark.parametrize("query", SHARED)
@settings(max_examples=10, deadline=None)
@given(data=rows)
def test_the_shared_cells_give_the_histograms_of_separate_scans(query: str, data: list[tuple[object, ...]]) -> None:
    """Where the rows per cell and the groups per unit are both read per query, they come from one CTE of the
    (unit, group) cells (histograms.selection): the same rows as grouping the cells once per histogram."""
    analysis = analyse(parse(query), CATALOG, canonical_units=True)
    chooser = auto.auto_bounds(analysis, 0.1, 0.9)
    assert chooser.part("max_rows") is not None and chooser.part("max_groups") is not None
    for store in (True, False):
        together, apart = (selection(analysis, chooser, store, DUCKDB, share=share) for share in (True, False))
        assert ("WITH __sel_cells" in together) == (not store or analysis.where is not None)
        assert "__sel_cells" not in apart
        shared_rows, separate_rows = _on_store([together, apart], data)
        assert sorted(shared_rows, key=repr) == sorted(separate_rows, key=repr)


@pytest.mark.parametrize("query", [*SHARED, "SELECT AVG(x), SUM(n) FROM t WHERE g = 'a'",
                                   "SELECT r, COUNT(*) FROM t GROUP BY r"])
def test_the_selection_text_is_kept_per_query_shape_not_per_charge(query: str) -> None:
    """histograms.selection keeps the text it built: a second query of the same shape at another ε or quantile
    gets the same text, the one a fresh build gives; another WHERE literal gets its own."""
    analysis = analyse(parse(query), CATALOG, canonical_units=True)
    first, second = auto.auto_bounds(analysis, 0.1, 0.9), auto.auto_bounds(analysis, 0.37, 0.95)
    assert first.parts and first != second
    histograms._remembered.cache_clear()  # earlier tests in this process may have asked for the same shape
    for store, share in itertools.product((True, False), repeat=2):
        fresh = histograms._remembered.__wrapped__(histograms._Asked(analysis, (), store, DUCKDB, True, share, first))
        hits = histograms._remembered.cache_info().hits
        assert selection(analysis, first, store, DUCKDB, share=share) == fresh
        assert selection(analysis, second, store, DUCKDB, share=share) == fresh
        assert histograms._remembered.cache_info().hits == hits + 1
    other = analyse(parse(query.replace("2", "3").replace("50", "51").replace("'a'", "'A'")), CATALOG,
                    canonical_units=True)
    assert (other != analysis) == ("WHERE" in query)  # the same shape with another constant: never the first's text
    assert (selection(other, first, True, DUCKDB) != selection(analysis, first, True, DUCKDB)) == ("WHERE" in query)


def test_groups_are_never_chosen_beyond_what_the_public_domain_holds() -> None:
    """Grouped by p (public domain of 2 values) with a limit of 8 groups: g is drawn among 1 and 2 only (a unit
    cannot reach more groups in the release; a larger g would only add noise), units beyond 2 groups (values
    outside the domain) counted at 2; grouped by g (no public domain) the grid runs to the limit."""
    table = TableSchema("t", "uid", COLUMNS, max_groups=8, max_rows=6, auto_max_groups=True)
    planned = plan("SELECT p, COUNT(*) FROM t GROUP BY p", Catalog((table,)), epsilon=1.0, delta=1e-7,
                   mechanism="laplace", bounding="store")
    assert planned.auto is not None and [p.bound for p in planned.auto.parts] == ["max_groups"]
    assert auto_groups.domain_limit(planned.analysis) == 2
    rows = [(0, 1, 0, 3), (0, 2, 0, 40), (0, 5, 0, 7)]  # (part, groups, EXACT, units)
    sampler = SecureSampler()
    drawn = {auto_release.draw(planned.analysis, planned.auto, rows, sampler).max_groups for _ in range(200)}
    assert drawn <= {1, 2} and 2 in drawn
    free = plan("SELECT g, COUNT(*) FROM t GROUP BY g", Catalog((table,)), epsilon=1.0, delta=1e-7,
                mechanism="laplace", bounding="store")
    assert auto_groups.domain_limit(free.analysis) == 8


def test_bounds_holding_no_whole_number_are_refused_and_candidates_are_whole_numbers() -> None:
    """A BIGINT column declared within [1e-300, 0.5] holds no whole number: its clamp grid's points lay outside it,
    the draw chose [0, 0] and the plan at the chosen bounds failed after the charge (found by
    tests/query/test_totality.py). Such bounds are refused when the policy loads, and every candidate clamp is a
    value of the column's type inside the declared clamp."""
    with pytest.raises(ValueError, match="hold no BIGINT value"):
        ColumnSpec("x", "BIGINT", bounds=(1e-300, 0.5), auto_bounds=True)
    assert clamp.clamp_grid((0.5, 9.5), "BIGINT") == (1, 2, 3, 4, 5, 7, 9)  # 9.5·2^(−j/2), moved up, in [1, 9]
    assert clamp.clamp_grid((-0.004, 0.0021), "DECIMAL(9,3)") == (-0.004, -0.002, -0.001, 0.0, 0.001, 0.002)
    t = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("x", "BIGINT", bounds=(0.5, 9.5),
                                                                          auto_bounds=True)), max_rows=5)
    analysis = analyse(parse("SELECT MEDIAN(x) FROM t"), Catalog((t,)))
    assert auto.at_bound(analysis, 5, clamps=(("x", 1, 4),)).table.column("x").bounds == (1, 4)
