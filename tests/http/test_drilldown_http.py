"""Parallel composition across queries, end to end (issue #5): a real server on the demo policy, a drill-down
query by query, and what POST /v1/query and GET /v1/budget say about cells."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.__main__ import main
from proxy.cli.demo import REGIONS, DemoFiles
from tests.support.live import Server, StartFresh, policy_copy, spend, sum_up

_LISTED = ", ".join(f"'{r}'" for r in REGIONS)  # every declared region: NOT IN them reaches only OTHER

AGES = 90 - 18 + 1 + 3  # 18..90, BELOW, ABOVE, NULL
SPACE = (len(REGIONS) + 2) * AGES  # regions, OTHER, NULL


def _ask(client: httpx.Client, sql: str, epsilon: float = 0.5) -> httpx.Response:
    return client.post("/v1/query?detail=cells", json={"sql": sql, "epsilon": epsilon})


def _ok(client: httpx.Client, sql: str, epsilon: float = 0.5) -> dict[str, Any]:
    response = _ask(client, sql, epsilon)
    assert response.status_code == 200, (sql, response.text)
    return response.json()  # type: ignore[no-any-return]


def _refused(client: httpx.Client, sql: str, epsilon: float = 0.5) -> dict[str, Any]:
    response = _ask(client, sql, epsilon)
    assert response.status_code == 403, (sql, response.text)
    body = response.json()
    assert body["code"] == "budget_exceeded" and body["charged"] is False
    if body["detail"].get("cells") is not None:  # per cell: what is left where this query reaches
        assert f"in the {body['detail']['cells']} cells of" in body["error"]
    return body  # type: ignore[no-any-return]


def test_a_drill_down_is_charged_the_maximum_over_cells(demo: DemoFiles, fresh_server: StartFresh) -> None:
    server = fresh_server(epsilon=1.0, delta=1e-6)
    with server.client(demo.analyst_key) as client:
        north = _ok(client, "SELECT COUNT(*) AS n FROM visits WHERE region = 'north'")
        scope = north["charge"]["scope"]
        assert (scope["table"], scope["cells"], scope["of"], scope["truncated"]) == ("visits", AGES, SPACE, False)
        assert {c["region"] for c in scope["listed"]} == {"north"}
        assert {c["age"] for c in scope["listed"]} == {*range(18, 91), "<below>", "<above>", None}

        _ok(client, "SELECT COUNT(*) FROM visits WHERE region = 'south'")  # equality
        _ok(client, "SELECT region, COUNT(*) FROM visits WHERE region IN ('east', 'west') GROUP BY region")  # IN
        _ok(client, "SELECT AVG(amount) FROM visits WHERE region = 'central' AND age < 30")  # mixed, range
        _ok(client, "SELECT AVG(amount) FROM visits WHERE region = 'central' AND age >= 30")  # its complement
        _ok(client, f"SELECT COUNT(*) FROM visits WHERE region NOT IN ({_LISTED})")  # undeclared values: only OTHER
        # a row-level predicate never narrows: this covers every north cell again (0.5 + 0.5 = 1)
        rowlevel = _ok(client, "SELECT COUNT(*) FROM visits WHERE region = 'north' AND amount > 100")
        assert rowlevel["charge"]["scope"]["listed"] == scope["listed"]
        spent = spend(client)
        assert spent["epsilon_spent"] == 1.0 and spent["epsilon_remaining"] == 0.0  # the north cells are full

        refused = _refused(client, "SELECT SUM(amount) FROM visits WHERE region = 'north'")
        assert (refused["detail"]["cells"], refused["detail"]["cells_table"]) == (AGES, "visits")
        assert refused["detail"]["epsilon_remaining"] == 0.0  # in the north cells; the east ones have 0.5
        assert "cells" not in _refused(client, "SELECT COUNT(*) FROM visits")["detail"]  # every unit
        _refused(client, "SELECT COUNT(*) FROM visits WHERE amount > 1")  # row-level only: every unit
        _refused(client, "SELECT COUNT(*) FROM visits WHERE region = 'north' OR region = 'west'")  # overlaps north
        _refused(client, "SELECT COUNT(*) FROM visits WHERE region LIKE 'nor%'")  # LIKE restricts nothing provable
        _ok(client, "SELECT COUNT(*) FROM visits WHERE region = 'west' OR region = 'east'")  # both at 0.5: fits

        charges = client.get("/v1/budget").json()["budgets"][0]
        assert charges["epsilon_spent"] == 1.0
        (space,) = charges["cells"]
        assert space["table"] == "visits" and space["cells"] == SPACE
        heaviest = space["heaviest"]
        assert {c["cell"]["region"] for c in heaviest if c["account"]["epsilon_spent"] == 1.0} >= {"north"}
        assert space["elsewhere"]["epsilon_spent"] == 0.0  # e.g. region NULL: no charge covers it
        assert [c["account"]["epsilon_spent"] for c in heaviest] == sorted(
            (c["account"]["epsilon_spent"] for c in heaviest), reverse=True
        )


def test_sequential_without_cell_accounting_and_across_tables(demo: DemoFiles, fresh_server: StartFresh) -> None:
    server = fresh_server(epsilon=1.0, delta=1e-6)
    with server.client(demo.analyst_key) as client:
        _ok(client, "SELECT COUNT(*) FROM visits WHERE region = 'north'")
        # another table's cells are computed from other rows: its charges cover every visits cell and back
        users_south = _ok(client, "SELECT COUNT(*) FROM users WHERE region = 'south'")
        assert users_south["charge"]["scope"]["table"] == "users"
        _ok(client, "SELECT COUNT(*) FROM users WHERE region = 'north'")
        _refused(client, "SELECT SUM(amount) FROM visits WHERE region = 'north'")  # 0.5 + the users charges' 0.5
        _refused(client, "SELECT COUNT(*) FROM visits WHERE region = 'east'")
        assert spend(client)["epsilon_spent"] == 1.0


def test_preview_and_repeat_follow_the_cells(demo: DemoFiles, fresh_server: StartFresh) -> None:
    server = fresh_server(epsilon=1.0, delta=1e-6)
    with server.client(demo.analyst_key) as client:
        for region in REGIONS:
            _ok(client, f"SELECT COUNT(*) FROM visits WHERE region = '{region}'", 1.0)
        other = f"SELECT COUNT(*) FROM visits WHERE region NOT IN ({_LISTED})"
        preview = client.post("/v1/query/preview", json={"sql": other,
                                                         "epsilon": 1.0}).json()
        assert preview["admissible"] is True and preview["charge"]["scope"]["cells"] == AGES
        assert preview["budget_after"]["epsilon_spent"] == 1.0  # still the maximum over cells
        blocked = client.post("/v1/query/preview", json={"sql": "SELECT COUNT(*) FROM visits WHERE age > 60",
                                                         "epsilon": 0.5}).json()
        assert blocked["admissible"] is False and "ε" in blocked["refusal"]
        again = _ask(client, "SELECT COUNT(*) FROM visits WHERE region = 'north'", 1.0)
        assert again.status_code == 200 and again.headers["X-DP-Repeat"] == "true"  # free, byte for byte
        ledger = client.get("/v1/budget").json()["budgets"][0]
        assert ledger["epsilon_spent"] == 1.0
        assert sum_up([1.0] * len(REGIONS)) == 5.0  # what sequential composition would have charged


def test_cell_accounting_false_charges_every_unit(demo: DemoFiles, tmp_path: Path) -> None:
    policy = policy_copy(demo, tmp_path, epsilon=1.0, delta=1e-6)
    text, found = re.subn(r"^(max_epsilon = .*)$", r"\1\ncell_accounting = false", policy.read_text(), count=1,
                          flags=re.MULTILINE)
    assert found == 1
    policy.write_text(text)
    server = Server(tmp_path / "server.log").start(policy)
    try:
        with server.client(demo.analyst_key) as client:
            north = _ok(client, "SELECT COUNT(*) FROM visits WHERE region = 'north'")
            assert north["charge"]["scope"] is None and north["budget"]["cells"] == []
            _ok(client, "SELECT COUNT(*) FROM visits WHERE region = 'south'")
            _refused(client, "SELECT COUNT(*) FROM visits WHERE region = 'east'")  # sequential: 0.5 + 0.5 is all
    finally:
        server.stop()


def test_explain_names_the_cells(demo: DemoFiles, capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT COUNT(*) FROM visits WHERE region = 'north' AND age < 30"
    assert main(["explain", "--policy", str(demo.policy), "--dataset", "demo", sql]) == 0
    printed = capsys.readouterr().out
    plan = json.loads(printed[printed.index("\n{") + 1:])
    assert plan["cells"] == {"table": "visits", "count": 30 - 18 + 1, "of": SPACE}  # ages 18..29 and BELOW
    assert main(["explain", "--policy", str(demo.policy), "--dataset", "demo", "SELECT COUNT(*) FROM users"]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed[printed.index("\n{") + 1:])["cells"] is None
