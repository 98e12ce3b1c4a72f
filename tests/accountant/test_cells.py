"""Per-cell accounting (accountant/cells.py): exact sums per cell, the bound over spaces, and the admit."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accountant.cell_scope import CellScope
from accountant.cells import ledgered, plus
from accountant.errors import BudgetExceeded, UnsupportedEvent
from accountant.events import GaussianEvent, LaplaceEvent
from accountant.filter import Accounting, Budget, Entry, Usage, additive, cost, usage
from accountant.ledger.charges import Admission
from accountant.ledger.memory import MemoryLedger
from accountant.ledger.sqlite import SqliteLedger
from accountant.report import account as report_account
from accountant.report import refusal

SIZE = 6
GRID_UNIT = Fraction(1, 2**256)  # cells.py keeps per-cell sums in these units, rounded up


def scoped(
    cells: list[int] | None, epsilon: float = 0.5, *, table: str = "t", space: str = "s", size: int = SIZE
) -> Entry:
    scope = None if cells is None else CellScope.of(table, space, size, cells)
    return Entry(LaplaceEvent(1, 1 / epsilon), epsilon, 0.0, scope)


# --- the scope's wire form ------------------------------------------------------------------------------


def test_scope_round_trips_and_rejects_malformed_bitmaps() -> None:
    s = CellScope.of("visits", "abc", 11, [0, 7, 10])
    assert s.indices().tolist() == [0, 7, 10] and s.count == 3
    assert CellScope.from_json(s.to_json()) == s
    with pytest.raises(ValueError, match="padding"):
        CellScope("t", "s", 11, bytes([0, 0b00010000]))  # bit 11 lies past the 11 cells
    with pytest.raises(ValueError, match="bytes"):
        CellScope("t", "s", 11, bytes([0]))
    with pytest.raises(ValueError, match=r"0\.\.10"):
        CellScope.of("t", "s", 11, [11])
    with pytest.raises(ValueError, match="decode"):
        CellScope.from_json({"table": "t", "space": "s", "size": 11, "cells": "not base64!"})


# --- exact sums and the bound ---------------------------------------------------------------------------


def test_disjoint_cells_cost_the_maximum_and_overlaps_the_sum() -> None:
    history = ledgered([scoped([0, 1]), scoped([2, 3]), scoped([4])], "basic")
    assert history.total[0] == Fraction(3, 2)
    assert history.bound().amount == Fraction(1, 2)  # disjoint: the max over cells
    overlapping = ledgered([scoped([0, 1]), scoped([1, 2]), scoped([1, 5])], "basic")
    assert overlapping.bound().amount == Fraction(3, 2)  # cell 1 is in all three
    assert overlapping.bound(CellScope.of("t", "s", SIZE, [0, 2])).amount == Fraction(1, 2)  # one charge each
    assert overlapping.bound(CellScope.of("t", "s", SIZE, [3, 4])).amount == 0  # nobody charged there
    # issue #10: a scope of no cell used to cost nothing, so it fitted any budget any number of times
    assert overlapping.bound(CellScope.of("t", "s", SIZE, [])).amount == Fraction(3, 2)  # as every cell


def test_a_charge_with_an_empty_scope_covers_every_cell() -> None:
    # a ledger may hold such a charge from before issue #10: it counts against every unit, never against none
    history = ledgered([scoped([0]), scoped([])], "basic")
    assert history.bound().amount == Fraction(1)
    assert history.bound(scoped([3]).scope).amount == Fraction(1, 2)


def test_unscoped_charges_other_tables_and_changed_spaces_cover_every_cell() -> None:
    history = ledgered([
        scoped([0]), scoped([1]),
        scoped(None, 0.25),  # every unit
        scoped([0], 0.125, table="other"),  # another table's cells are not this table's
        scoped([1], 0.0625, space="old"),  # cells numbered under a policy since changed
    ], "basic")
    this = history.space(("t", "s"))
    assert this is not None
    assert this.base == (Fraction(0.25 + 0.125 + 0.0625), 0)
    assert this.cell(0)[0] == this.cell(1)[0] == Fraction(0.5 + 0.25 + 0.125 + 0.0625)
    assert this.cell(2)[0] == this.base[0]
    # the worst unit is bounded in every space at once: the smallest of the spaces' maxima
    other, old = history.space(("t", "other")), history.space(("other", "s"))
    assert other is None and old is not None
    assert history.bound().amount == min(this.peak()[0], old.peak()[0], history.total[0])


def test_exactly_representable_budgets_are_used_to_the_last_bit() -> None:
    # ten charges of ε = 0.125 in one cell fill ε = 1.25 exactly; an eleventh in another cell still fits
    ledger = MemoryLedger()
    budget = Budget(1.25, 0.0)
    for _ in range(10):
        ledger.admit(Admission(analyst="a", dataset="d", sql_sha256="q", event=LaplaceEvent(1, 8.0), epsilon=0.125,
                     delta=0.0, composition="parallel", budget=budget, scope=CellScope.of("t", "s", SIZE, [3])))
    ledger.admit(Admission(analyst="a", dataset="d", sql_sha256="q", event=LaplaceEvent(1, 8.0), epsilon=0.125,
                 delta=0.0, composition="parallel", budget=budget, scope=CellScope.of("t", "s", SIZE, [2, 4])))
    with pytest.raises(BudgetExceeded):
        ledger.admit(Admission(analyst="a", dataset="d", sql_sha256="q", event=LaplaceEvent(1, 8.0), epsilon=0.125,
                     delta=0.0, composition="parallel", budget=budget, scope=CellScope.of("t", "s", SIZE, [3, 5])))
    with pytest.raises(BudgetExceeded):  # an unscoped charge covers cell 3 too
        ledger.admit(Admission(analyst="a", dataset="d", sql_sha256="q", event=LaplaceEvent(1, 8.0), epsilon=0.125,
                     delta=0.0, composition="sequential", budget=budget))


def _brute_cell(entries: list[Entry], rule: str, table: str, space: str, cell: int) -> tuple[Fraction, Fraction]:
    amount, delta = Fraction(0), Fraction(0)
    for entry in entries:
        s = entry.scope
        # an empty scope covers every cell (issue #10): it must never cost nothing
        if s is None or s.key != (table, space) or not s.count or cell in s.indices().tolist():
            value, extra = cost(entry, rule)  # type: ignore[arg-type]
            amount += additive(value, rule)  # type: ignore[arg-type]
            delta += Fraction(extra)
    return amount, delta


events = st.one_of(
    st.builds(LaplaceEvent, st.integers(1, 3), st.floats(0.5, 1e6)),
    st.builds(GaussianEvent, st.integers(1, 3), st.floats(0.5, 1e6)),
)
scopes = st.one_of(
    st.none(),
    st.tuples(st.sampled_from(["t", "u"]), st.sets(st.integers(0, SIZE - 1))),
)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(events, scopes, st.floats(1e-9, 3.0), st.floats(0, 1e-6)), max_size=25),
       st.sampled_from(["basic", "zcdp"]))
def test_every_cell_sum_is_exact(history: list[tuple[object, object, float, float]], rule: str) -> None:
    entries = [
        Entry(event, epsilon, delta, None if s is None else CellScope.of(s[0], "s", SIZE, sorted(s[1])))  # type: ignore[arg-type, index]
        for event, s, epsilon, delta in history
    ]
    found = ledgered(entries, rule)  # type: ignore[arg-type]
    assert found.total == (usage(entries, rule).amount, usage(entries, rule).delta)  # type: ignore[arg-type]
    peaks = []
    for table in ("t", "u"):
        space = found.space((table, "s"))
        exact = [_brute_cell(entries, rule, table, "s", c) for c in range(SIZE)]
        if space is None:
            assert all(e == found.total for e in exact)
            continue
        # exact, except that a sum finer than 2**-256 is rounded up to it (never down)
        slack = Fraction(len(entries), 2**256)
        for c in range(SIZE):
            for got, want in zip(space.cell(c), exact[c], strict=True):
                assert want <= got <= want + slack
        if all(e.epsilon >= 2**-100 and (e.delta == 0 or e.delta >= 2**-100) for e in entries):
            assert [space.cell(c) for c in range(SIZE)] == exact
            assert space.peak() == (max(e[0] for e in exact), max(e[1] for e in exact))
            heaviest = space.heaviest(SIZE)
            assert [exact[c] for c in heaviest] == sorted(exact, reverse=True)
        peaks.append(space.peak())
    expected = (min([found.total[0], *(p[0] for p in peaks)]), min([found.total[1], *(p[1] for p in peaks)]))
    assert found.bound().amount >= expected[0] and found.bound().delta >= expected[1]


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(events, scopes, st.floats(1e-9, 3.0), st.floats(0, 1e-6)), min_size=1, max_size=25),
       st.sampled_from(["basic", "zcdp", "gdp"]))
def test_one_charge_added_to_the_sums_is_the_history_summed_with_it(
    history: list[tuple[object, object, float, float]], rule: str
) -> None:
    """A preview's "after" (cells.plus: the kept sums plus one charge) is summing the whole history afresh,
    whatever the charge's scope (a space the history has, a new one, or none): the totals and bases exactly;
    each cell exactly or one grid unit (2⁻²⁵⁶) above. A cell sums identical (scope, cost) charges first and
    rounds each such group up to the grid once, so a charge below the grid (δ = 2⁻¹⁰²² twice) added on its own
    rounds up once more: never below the fresh sum, which is itself never below the true one."""
    entries = [
        Entry(event, epsilon, delta, None if s is None else CellScope.of(s[0], "s", SIZE, sorted(s[1])))  # type: ignore[arg-type, index]
        for event, s, epsilon, delta in history
    ]
    *before, last = entries
    try:
        want = ledgered(entries, rule)  # type: ignore[arg-type]
    except UnsupportedEvent:  # a Gaussian σ outside the proven range of μ-GDP: plus refuses alike
        with pytest.raises(UnsupportedEvent):
            plus(ledgered(before, rule), last)  # type: ignore[arg-type]
        return
    got = plus(ledgered(before, rule), last)  # type: ignore[arg-type]
    assert got.rule == want.rule and got.total == want.total
    assert sorted(s.key for s in got.spaces) == sorted(s.key for s in want.spaces)
    for space in want.spaces:
        mine = got.space(space.key)
        assert mine is not None and mine.base == space.base
        for c in range(SIZE):
            for part_got, part_want in zip(mine.cell(c), space.cell(c), strict=True):
                assert 0 <= part_got - part_want <= GRID_UNIT


def test_plus_rounds_a_charge_below_the_grid_up_once_more() -> None:
    """The case hypothesis found: the fresh sum rounds 2·2⁻¹⁰²² up to one grid unit, `plus` rounds each up."""
    tiny = [Entry(LaplaceEvent(1, 1.0), 1.0, 2.0**-1022, CellScope.of("u", "s", SIZE, [0])) for _ in range(2)]
    fresh, after = ledgered(tiny, "basic"), plus(ledgered(tiny[:1], "basic"), tiny[1])
    assert fresh.total == after.total and fresh.space(("u", "s")).cell(1) == after.space(("u", "s")).cell(1)
    assert fresh.space(("u", "s")).cell(0)[1] == GRID_UNIT and after.space(("u", "s")).cell(0)[1] == 2 * GRID_UNIT


def test_sums_stay_exact_across_many_limbs_and_thousands_of_cells() -> None:
    # costs spread over 60 binary orders: the per-cell sums need several 20-bit limbs and their carries
    size = 5000
    entries = [
        Entry(LaplaceEvent(1, 1.0), math.ldexp(1.0, -k) + math.ldexp(1.0, -k - 52), 0.0,
              CellScope.of("t", "s", size, range(k, size, k + 1)))
        for k in range(60)
    ]
    space = ledgered(entries, "basic").space(("t", "s"))
    assert space is not None
    for cell in (0, 1, 2, 59, 60, 119, 4999):
        expected = sum((Fraction(e.epsilon) for k, e in enumerate(entries) if cell >= k and (cell - k) % (k + 1) == 0),
                       Fraction(0))
        assert space.cell(cell)[0] == expected


def test_gdp_cells_add_mu_squared() -> None:
    a, b = (Entry(LaplaceEvent(1, 4.0), 0.25, 0.0, CellScope.of("t", "s", SIZE, c)) for c in ([0, 1], [1, 2]))
    history = ledgered([a, b], "gdp")
    (mu, _), = {cost(a, "gdp")}
    assert history.bound().amount == 2 * Fraction(mu) ** 2  # cell 1: √(μ² + μ²)
    assert history.bound(CellScope.of("t", "s", SIZE, [0])).amount == Fraction(mu) ** 2


def test_sqlite_ledger_keeps_scopes_and_upgrades_version_1_files(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.sqlite"
    SqliteLedger(path).close()
    with sqlite3.connect(path) as conn:  # make it a version-1 file: no scope column
        conn.execute("ALTER TABLE charges DROP COLUMN scope")
        conn.execute("UPDATE schema_version SET version = 1")
        conn.execute(
            "INSERT INTO charges (id, analyst, dataset, at_us, sql_sha256, event, epsilon, delta, composition)"
            " VALUES ('old', 'a', 'd', 0, 'q', '{\"kind\":\"laplace\",\"sensitivity\":1,\"scale\":2.0}', 0.5, 0,"
            " 'sequential')"
        )
    conn.close()
    ledger = SqliteLedger(path)
    try:
        budget = Budget(1.0, 0.0)
        north = CellScope.of("t", "s", SIZE, [0])
        charge = ledger.admit(Admission(analyst="a", dataset="d", sql_sha256="q", event=LaplaceEvent(1, 2.0),
                              epsilon=0.5, delta=0.0, composition="parallel", budget=budget, scope=north))
        assert ledger.charges(limit=1)[0] == charge and charge.scope == north
        ledger.admit(Admission(analyst="a", dataset="d", sql_sha256="q", event=LaplaceEvent(1, 2.0), epsilon=0.5,
                     delta=0.0, composition="parallel", budget=budget, scope=CellScope.of("t", "s", SIZE, [1])))
        with pytest.raises(BudgetExceeded):  # the old unscoped charge covers cell 2 as well: 0.5 + 0.75 > 1
            ledger.admit(Admission(analyst="a", dataset="d", sql_sha256="q", event=LaplaceEvent(3, 4.0), epsilon=0.75,
                         delta=0.0, composition="parallel", budget=budget, scope=CellScope.of("t", "s", SIZE, [2])))
    finally:
        ledger.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(4,)]
    conn.close()


def test_the_dataset_budget_is_also_per_cell() -> None:
    ledger = MemoryLedger()
    shared = Budget(0.5, 0.0)
    for analyst, cell in (("a", 0), ("b", 1), ("c", 2)):  # three analysts, three disjoint cells: all fit
        ledger.admit(Admission(analyst=analyst, dataset="d", sql_sha256="q", event=LaplaceEvent(1, 2.0), epsilon=0.5,
                     delta=0.0, composition="parallel", budget=Budget(1.0, 0.0), dataset_budget=shared,
                     scope=CellScope.of("t", "s", SIZE, [cell])))
    with pytest.raises(BudgetExceeded) as refused:
        ledger.admit(Admission(analyst="d", dataset="d", sql_sha256="q", event=LaplaceEvent(1, 2.0), epsilon=0.5,
                     delta=0.0, composition="parallel", budget=Budget(1.0, 0.0), dataset_budget=shared,
                     scope=CellScope.of("t", "s", SIZE, [2, 3])))
    assert refused.value.detail["scope"] == "dataset"


def test_disagreeing_space_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="disagree"):
        ledgered([scoped([0]), scoped([0], size=SIZE + 1)], "basic")


# --- the admit's memo of per-cell sums ------------------------------------------------------------------


def _in_cell(ledger: SqliteLedger, epsilon: float, *, cell: int = 0) -> None:
    ledger.admit(Admission(analyst="a", dataset="d", sql_sha256="q", event=LaplaceEvent(1, 1 / epsilon),
                 epsilon=epsilon, delta=0.0, composition="parallel", budget=Budget(1.0, 0.0),
                 scope=CellScope.of("t", "s", SIZE, [cell])))


def _raw_charge(path: object, seq: int, epsilon: float) -> None:
    """A charge written behind the ledger's back with a chosen sequence number: how a commit that took its
    number early but landed late (PostgreSQL, another analyst's admit) looks to the memo."""
    import sqlite3

    scope = CellScope.of("t", "s", SIZE, [0])
    conn = sqlite3.connect(str(path))
    with conn:
        conn.execute(
            "INSERT INTO charges (seq, id, analyst, dataset, at_us, sql_sha256, event, epsilon, delta, composition,"
            " scope) VALUES (?, ?, 'a', 'd', 0, 'q', ?, ?, 0, 'parallel', ?)",
            (seq, f"raw{seq}", json.dumps({"kind": "laplace", "sensitivity": 1, "scale": 1 / epsilon}), epsilon,
             json.dumps(scope.to_json())),
        )
    conn.close()


def test_the_memo_sees_a_charge_that_landed_below_its_watermark(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = SqliteLedger(path)
    try:
        _in_cell(ledger, 0.25)  # seq 1
        _raw_charge(path, 10, 0.25)
        _in_cell(ledger, 0.25)  # reads seq 1 and 10 (watermark 10), then takes seq 11
        _raw_charge(path, 5, 0.25)  # lands below the watermark: the memo must not trust its count
        with pytest.raises(BudgetExceeded):  # 4 × 0.25 already; without the count check it would see 0.75
            _in_cell(ledger, 0.25)
        _in_cell(ledger, 0.25, cell=1)  # another cell still has room: the memo was rebuilt, not poisoned
    finally:
        ledger.close()


def test_two_ledger_objects_on_one_file_each_see_the_others_charges(tmp_path: Path) -> None:
    first, second = SqliteLedger(tmp_path / "l.sqlite"), SqliteLedger(tmp_path / "l.sqlite")
    try:
        for turn in range(4):  # alternate: each admit must count what the other object wrote
            _in_cell(first if turn % 2 else second, 0.25)
        for ledger in (first, second):
            with pytest.raises(BudgetExceeded):
                _in_cell(ledger, 0.25)
    finally:
        first.close()
        second.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.sets(st.integers(0, SIZE - 1), min_size=1)),
                          st.sampled_from([0.125, 0.25, 0.1])), max_size=30),
       st.sampled_from(["basic", "zcdp", "gdp"]))
def test_admits_through_the_memo_decide_as_a_fresh_computation_would(
    requests: list[tuple[set[int] | None, float]], rule: str
) -> None:
    ledger = MemoryLedger()
    accounting = Accounting(rule, 0.0)  # type: ignore[arg-type]
    budget = Budget(1.0, 1e-6)
    for cells, epsilon in requests:
        scope = None if cells is None else CellScope.of("t", "s", SIZE, sorted(cells))
        entry = Entry(LaplaceEvent(1, 1 / epsilon), epsilon, 0.0, scope)
        fresh = ledgered(ledger.entries(dataset="d"), rule).bound(scope)  # type: ignore[arg-type]
        expected = refusal(fresh, entry, budget, accounting) is None
        try:
            ledger.admit(Admission(analyst="a", dataset="d", sql_sha256="q", event=entry.event, epsilon=epsilon,
                         delta=0.0, composition="parallel", budget=budget, accounting=accounting, scope=scope))
            admitted = True
        except BudgetExceeded:
            admitted = False
        assert admitted == expected


# --- what reports show: the heaviest cells and their accounts (issue #32) ------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, SIZE - 1), max_size=SIZE), st.sampled_from([0.5, 0.25, 1.0])),
                max_size=8), st.integers(0, SIZE + 2))
def test_heaviest_is_the_order_of_every_cell_by_usage_then_index(charges: list[tuple[list[int], float]],
                                                                 limit: int) -> None:
    history = [scoped(cells or None, epsilon) for cells, epsilon in charges]
    for space in ledgered(history, "basic").spaces:
        every = sorted(range(space.size), key=lambda i: (-space.amount[i], -space.delta[i], i))
        assert space.heaviest(limit) == every[:limit]


def test_a_reported_cell_account_is_its_own_usage_s_even_when_cells_share_one() -> None:
    from proxy.http.views.budget import _space_out  # the view the answers and GET /v1/budget render
    from proxy.schemas import AccountOut

    history = [scoped([0, 1]), scoped([0, 1]), scoped([2], 0.25), scoped(None, 0.125), scoped([4], 0.25)]
    (space,) = ledgered(history, "basic").spaces
    allowed, accounting = Budget(10.0, 1e-6), Accounting()
    shown = _space_out(space, None, allowed, accounting)

    def account(used: tuple[Fraction, Fraction]) -> AccountOut:
        a = report_account(Usage("basic", *used), allowed, accounting)
        return AccountOut(**{name: getattr(a, name) for name in AccountOut.model_fields if name != "accounting"},
                          accounting=a.rule)

    assert [c.cell for c in shown.heaviest] == [{"#": i} for i in (0, 1, 2, 4, 3, 5)]
    assert [c.account for c in shown.heaviest] == [account(space.cell(i)) for i in (0, 1, 2, 4, 3, 5)]
    assert shown.elsewhere == account(space.base)
    assert shown.heaviest[0].account.epsilon_spent == 1.125 and shown.elsewhere.epsilon_spent == 0.125
