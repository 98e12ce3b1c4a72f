"""Concurrent queries never overspend: the ledger's admit is one atomic check-then-insert (docs/architecture.md).

A fresh server whose analyst budget admits exactly M queries gets N > M of them at once, from threads.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from mechanisms.rounding import down
from proxy.cli.demo import DemoFiles
from tests.support.live import Server, StartFresh, spend, sum_up

QUERY_EPSILON = 0.1
N = 16
SQL = "SELECT COUNT(*) AS n FROM visits"


def admitted(charge: float, budget: Fraction) -> int:
    """How many charges of `charge` the budget admits, one after another: spent + charge <= budget exactly,
    where spent is the exact sum of the earlier charges rounded up (accountant/filter.py)."""
    count = 0
    while Fraction(sum_up([charge] * count)) + Fraction(charge) <= budget:
        count += 1
    return count


def fire(server: Server, key: str, n: int) -> list[tuple[int, dict[str, Any]]]:
    """POST the query from n threads released at once; (status, body) of each."""
    start = threading.Barrier(n)

    def one(i: int) -> tuple[int, dict[str, Any]]:
        sql = SQL.replace(" AS n ", f" AS n{i} ")  # distinct requests: an identical one would be a free repeat
        with server.client(key) as client:
            start.wait(timeout=60)
            response = client.post("/v1/query", json={"sql": sql, "epsilon": QUERY_EPSILON})
            return response.status_code, response.json()

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(one, range(n)))


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        (0.55, 5),  # five charges of ε≈0.1 fit in 0.55 and six do not, however the charge is rounded
        # on the boundary: 5 fit if a charge is a hair below 1/10, only 4 if it is float(0.1) (> 1/10)
        (0.5, None),
    ],
    ids=["budget-0.55", "budget-0.5-boundary"],
)
def test_concurrent_queries_admit_exactly_what_the_budget_holds(
    budget: float, expected: int | None, fresh_server: StartFresh, demo: DemoFiles
) -> None:
    server = fresh_server(epsilon=budget)
    # the policy's budget as written: basic compares with its exact decimal (docs/privacy.md §8.6)
    exact = Fraction(Decimal(repr(budget)))
    with server.client(demo.analyst_key) as analyst:
        preview = analyst.post("/v1/query/preview", json={"sql": SQL, "epsilon": QUERY_EPSILON}).json()
        charge = preview["charge"]["epsilon"]
        assert QUERY_EPSILON - 1e-12 < charge <= QUERY_EPSILON
        fits = admitted(charge, exact)
        assert fits in (4, 5)
        if expected is not None:
            assert fits == expected
        assert spend(analyst)["epsilon_spent"] == 0.0

    results = fire(server, demo.analyst_key, N)

    assert Counter(status for status, _ in results) == {200: fits, 403: N - fits}
    accepted = [body for status, body in results if status == 200]
    refused = [body for status, body in results if status == 403]
    assert all((body["code"], body["charged"]) == ("budget_exceeded", False) for body in refused)
    ids = {body["charge"]["id"] for body in accepted}
    assert len(ids) == fits
    assert all(body["charge"]["epsilon"] == charge for body in accepted)

    with server.client(demo.admin_key) as admin, server.client(demo.analyst_key) as analyst:
        ledger = admin.get("/v1/ledger", params={"analyst": "analyst"}).json()
        assert ledger["total"] == fits
        assert {c["id"] for c in ledger["charges"]} == ids
        assert admin.get("/v1/ledger").json()["total"] == fits  # nothing else was written
        final = spend(analyst)
    assert final["epsilon_spent"] == sum_up([charge] * fits)
    assert Fraction(final["epsilon_spent"]) <= exact
    left = exact - Fraction(final["epsilon_spent"])  # remaining: the written budget minus the spend, rounded down
    assert final["epsilon_remaining"] == max(0.0, down(left))
    assert sum(map(Fraction, (c["epsilon"] for c in ledger["charges"]))) <= exact
