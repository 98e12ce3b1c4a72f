"""The PLD report over cell-scoped histories (accountant/pld_cells.py, docs/privacy.md §5.6, §7): the worst-off
unit's charges, against a brute-force per-cell oracle, and end to end on a drill-down over HTTP."""

from __future__ import annotations

import random

import pytest

from accountant.cell_scope import CellScope
from accountant.events import GaussianEvent, LaplaceEvent
from accountant.filter import Entry
from accountant.pld_cells import pld_report_cells
from accountant.report import pld_report
from proxy.cli.demo import DemoFiles
from tests.support.live import StartFresh

DELTA = 1e-6


def _g(sigma: float, scope: CellScope | None = None) -> Entry:
    return Entry(GaussianEvent(1, sigma), 0.1, 1e-9, scope)


def _cell(index: int, key: str = "s1", size: int = 6) -> CellScope:
    return CellScope.of("visits", key, size, [index])


def test_disjoint_cells_report_one_cell() -> None:
    history = [_g(20.0, _cell(0))] * 10 + [_g(20.0, _cell(1))] * 10
    cells, whole, one = pld_report_cells(history, DELTA), pld_report(history, DELTA), pld_report(history[:10], DELTA)
    assert cells is not None and whole is not None and one is not None
    assert cells.epsilon == one.epsilon < whole.epsilon and cells.delta == DELTA and cells.method == "pld"


def test_unscoped_and_empty_scoped_charges_reach_every_cell() -> None:
    empty = CellScope.of("visits", "s1", 6, [])
    history = [_g(20.0)] * 4 + [_g(20.0, empty)] + [_g(20.0, _cell(0))] * 10 + [_g(20.0, _cell(1))] * 3
    expected = pld_report(history[:15], DELTA)  # the north cell: 5 everywhere plus its own 10
    assert expected is not None and pld_report_cells(history, DELTA) == expected


def test_the_tightest_space_bounds() -> None:
    # space s1 splits the charges 6/6; space s2 (another axis) puts all 12 in one cell: s1 is what bounds
    history = [Entry(LaplaceEvent(1, 10.0), 0.1, 0.0, _cell(i % 2)) for i in range(12)]
    history += [_g(30.0, CellScope.of("visits", "s2", 3, [0, 1]))]
    expected = pld_report([history[0]] * 6 + [history[-1]], DELTA)
    assert pld_report_cells(history, DELTA) == expected


def test_overlapping_scopes_take_the_heaviest_cell() -> None:
    wide = CellScope.of("visits", "s1", 6, [0, 1, 2])
    history = [_g(15.0, wide)] * 5 + [_g(15.0, _cell(1))] * 5 + [_g(15.0, _cell(4))] * 7
    expected = pld_report([_g(15.0)] * 10, DELTA)
    assert expected is not None and pld_report_cells(history, DELTA) == expected


def test_selection_delta_is_paid_per_cell_and_none_stays_none() -> None:
    assert pld_report_cells([], DELTA) is None
    heavy = Entry(GaussianEvent(1, 2e7), 0.1, 0.0, _cell(0))  # σ beyond the proven range: no μ, no figure
    assert pld_report_cells([heavy, _g(20.0, _cell(1))], DELTA) is None
    assert pld_report(([heavy, _g(20.0, _cell(1))]), DELTA) is None


@pytest.mark.parametrize("seed", range(6))
def test_agrees_with_a_per_cell_oracle(seed: int) -> None:
    rng = random.Random(seed)
    size = 5
    history = []
    for _ in range(rng.randint(1, 14)):
        cells = rng.sample(range(size), rng.randint(1, size))
        scope = None if rng.random() < 0.2 else CellScope.of("visits", "s1", size, cells)
        event = GaussianEvent(1, rng.choice([10.0, 25.0])) if rng.random() < 0.6 else LaplaceEvent(1, 8.0)
        history.append(Entry(event, 0.1, 0.0, scope))
    per_cell = []
    for cell in range(size):  # a unit of this cell: the charges whose scope holds it
        mine = [e for e in history if e.scope is None or bool(e.scope.mask()[cell])]
        found = pld_report(mine, DELTA) if mine else None
        per_cell.append(0.0 if found is None else found.epsilon)
    reported = pld_report_cells(history, DELTA)
    whole = pld_report(history, DELTA)
    assert reported is not None and whole is not None
    assert reported.epsilon == pytest.approx(max(per_cell), rel=1e-9)
    assert max(per_cell) * (1 - 1e-9) <= reported.epsilon <= whole.epsilon


def test_a_drill_down_is_reported_per_cell_over_http(demo: DemoFiles, fresh_server: StartFresh) -> None:
    server = fresh_server(epsilon=5.0, delta=1e-6)
    with server.client(demo.analyst_key) as client:
        for region in ("north", "south", "east", "west"):
            response = client.post("/v1/query", json={
                "sql": f"SELECT COUNT(*) AS n FROM visits WHERE region = '{region}'", "epsilon": 0.5})
            assert response.status_code == 200, response.text
        body = client.get("/v1/budget").json()
    (budget,), (reports,) = body["budgets"], body["reports"]
    found = reports["history_report"]
    one = pld_report([Entry(LaplaceEvent(1, 2.0), 0.5, 0.0)], 1e-6)  # one query's worth: ε = 0.5
    assert one is not None and found["epsilon"] == pytest.approx(one.epsilon, rel=1e-9)
    assert found["epsilon"] <= budget["epsilon_spent"] == 0.5  # four cells, one query each
