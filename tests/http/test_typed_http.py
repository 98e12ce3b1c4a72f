"""Red team over HTTP for the type classes of issue #10, on a live server whose policy declares REAL, DECIMAL,
DATE and COLLATE NOCASE columns: each attack that used to spend past the budget or learn a value.

The data: 40 users in `people` (one row per user, unit-level columns) and their `events`. Budget ε = 1.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.engines.duckdb_engine import write_database
from tests.support.live import Server

KEY = secrets.token_urlsafe(24)
POLICY = """
ledger = "ledger.sqlite"

[datasets.typed]
path = "typed.duckdb"
epsilon = 0.5
max_epsilon = 1.0
max_release_cells = 6

[datasets.typed.tables.people]
privacy_unit = "uid"
max_groups = 1
max_rows = 1
columns.uid = {{ type = "VARCHAR" }}
columns.f = {{ type = "REAL", unit_level = true, groupable = true, public_domain = [0.1, 0.5] }}
columns.d = {{ type = "DECIMAL(38,0)", unit_level = true, groupable = true, public_domain = [1, 9007199254740993] }}
columns.r = {{ type = "VARCHAR", unit_level = true, groupable = true, public_domain = ["N", "n", "S"] }}
columns.day = {{ type = "DATE", unit_level = true, groupable = true, public_domain = ["2024-01-01", "2024-01-02"] }}
columns.x = {{ type = "DOUBLE", bounds = [0, 1e15] }}

[analysts.eve]
role = "analyst"
key_sha256 = "{key}"
budgets = {{ typed = {{ epsilon = 1.0, delta = 1e-6 }} }}
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A fresh server and ledger per test: each test spends the whole budget its own way."""
    directory = tmp_path
    write_database(directory / "typed.duckdb", (
        "CREATE TABLE people (uid VARCHAR COLLATE NOCASE, f REAL, d DECIMAL(38,0), r VARCHAR COLLATE NOCASE,"
        " day DATE, x DOUBLE)",
        # 'u1' and 'U1' are two people (the unit column is collated NOCASE in the database)
        "INSERT INTO people SELECT CASE WHEN i % 2 = 0 THEN 'u' || i ELSE 'U' || (i - 1) END,"
        " CASE WHEN i % 4 = 0 THEN 0.1 ELSE 0.5 END,"
        " CASE WHEN i % 3 = 0 THEN 9007199254740993 ELSE 9007199254740992 END,"
        " CASE WHEN i % 2 = 0 THEN 'N' ELSE 'n' END,"
        " DATE '2024-01-01' + (i % 2)::INTEGER, CASE WHEN i = 7 THEN 1e15 ELSE i END FROM range(40) t(i)",
    ))
    (directory / "policy.toml").write_text(POLICY.format(key=hashlib.sha256(KEY.encode()).hexdigest()))
    live = Server(directory / "server.log").start(directory / "policy.toml")
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture
def eve(server: Server) -> Iterator[httpx.Client]:
    with server.client(KEY) as client:
        yield client


def _ask(client: httpx.Client, sql: str, epsilon: float = 1.0) -> httpx.Response:
    return client.post("/v1/query", json={"dataset": "typed", "sql": sql, "epsilon": epsilon})


def _spent(client: httpx.Client) -> float:
    (budget,) = client.get("/v1/budget").json()["budgets"]
    return float(budget["epsilon_spent"])


def _answer(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_real_literals_do_not_make_two_scopes_of_one_unit(eve: httpx.Client) -> None:
    # regression (issue #10): f = 0.1 and f >= 0.1000000015 were "disjoint", yet both hold a REAL 0.1 (ε = 2)
    _answer(_ask(eve, "SELECT COUNT(*) FROM people WHERE f = 0.1"))
    second = _ask(eve, "SELECT COUNT(*) FROM people WHERE f >= 0.1000000015")
    assert second.status_code == 403 and second.json()["code"] == "budget_exceeded", second.text
    # the contradiction of the audit (f = 0.1 AND f = 0.10000000149011612) is one float32 value: not empty,
    # and charged in full (varying the text to dodge the repeat cache does not help)
    for padding in ("", " ", "  "):
        again = _ask(eve, f"SELECT COUNT(*) FROM people WHERE f = 0.1 AND{padding} f = 0.10000000149011612")
        assert again.status_code == 403 and again.json()["code"] == "budget_exceeded"
    assert _spent(eve) <= 1.0


def test_empty_scopes_are_refused_for_free(eve: httpx.Client, server: Server) -> None:
    before = _spent(eve)
    for sql in ("SELECT COUNT(*) FROM people WHERE r = 'N' AND r = 'S'",
                "SELECT COUNT(*) FROM people WHERE d = 1 AND d = 9007199254740993",
                "SELECT COUNT(*) FROM people WHERE day = '2024-01-01' AND day IN ('2024-01-02')"):
        for _ in range(3):
            refused = _ask(eve, sql, 0.1)
            body = refused.json()
            assert refused.status_code == 400 and body["code"] == "empty_scope" and body["charged"] is False, sql
    assert _spent(eve) == before


def test_decimal_and_collated_keys_are_released_as_the_database_holds_them(eve: httpx.Client) -> None:
    people = _answer(_ask(eve, "SELECT d, r, COUNT(*) AS n FROM people GROUP BY d, r", 0.0001))
    # NOCASE in the database must not merge 'N' and 'n'; 2**53 + 1 is its own DECIMAL group
    keys = {(d, r) for d, r, _ in people["rows"]}
    assert keys == {(d, r) for d in (1, 9007199254740993) for r in ("N", "n", "S")}


def test_date_and_real_public_keys_match(server: Server) -> None:
    # regression (issue #10): DATE and REAL public domains never matched the engine's values (all noise)
    with server.client(KEY) as client:
        rows = _answer(_ask(client, "SELECT day, f, COUNT(*) AS n FROM people GROUP BY day, f", 0.0001))["rows"]
    counts = {(day, f): n for day, f, n in rows}
    assert set(counts) == {(day, f) for day in ("2024-01-01", "2024-01-02") for f in (0.10000000149011612, 0.5)}
    # at ε = 1e-4 the noise is huge; the keys matching at all is the point (they used to be noise around 0)


def test_a_release_larger_than_the_policy_allows_is_refused_for_free(eve: httpx.Client) -> None:
    # issue #11: the work of a release is bounded before admission, from the declared domains alone
    refused = _ask(eve, "SELECT d, r, day, COUNT(*) AS n FROM people GROUP BY d, r, day", 0.1)
    body = refused.json()
    assert refused.status_code == 400 and body["code"] == "policy" and body["charged"] is False
    assert body["detail"] == {"construct": "GROUP BY", "cells": 12, "max_release_cells": 6}
    assert _spent(eve) == 0.0
    _answer(_ask(eve, "SELECT d, r, COUNT(*) AS n FROM people GROUP BY d, r", 0.1))  # 6 cells: answered
