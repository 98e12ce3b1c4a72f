"""Red team over HTTP: every attack in tests/fixtures/redteam.sql against one fresh live server.

The attacker is an analyst who has read our docs and source and wants more than the DP release (raw values,
membership, data-dependent errors, group existence before noise) or more than the budget
(docs/architecture.md, the security boundary).
Each case must end exactly as the fixture says: rejected with its code and `charged: false`, or answered
with the expected charge. Afterwards the ledger must hold exactly the answered charges: no rejection, at
any layer, may have cost anything.

Product bugs this suite exposed are marked `-- regression:` in the fixture and `# Regression:` here.
"""

from __future__ import annotations

import base64
import json
import math
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from mechanisms.rounding import up
from proxy.cli.demo import CATEGORIES, PLANS, DemoFiles
from proxy.http.errors import STATUS
from tests.support.live import Server, StartFresh, policy_copy, spend, sum_up

FIXTURE = Path(__file__).parent.parent / "fixtures" / "redteam.sql"
DEFAULT_EPSILON, DEFAULT_DELTA = 0.1, 1e-8  # the demo dataset's defaults per query
QUERY_KEYS = {"ok", "dataset", "columns", "rows", "charge", "budget", "noise", "partitions",
              "unreliable"}  # unreliable: the reliability flag (issue #29)
ERROR_KEYS = {"ok", "status", "code", "error", "detail", "charged"}
TIMING_HEADERS = {"server-timing", "x-response-time", "x-process-time", "x-runtime"}
_REPEAT = re.compile(r"<<(.*?)\*(\d+)>>", re.DOTALL)


@dataclass(frozen=True)
class Case:
    line: int
    attack: str  # the attack class
    expect: tuple[str, ...]  # acceptable outcomes: error codes or "answered"
    sql: str
    charge: tuple[str, str] | None = None  # (event signature, partition kind)
    params: dict[str, Any] = field(default_factory=dict)
    bug: str | None = None

    @property
    def body(self) -> dict[str, Any]:
        return {"sql": self.sql, **self.params}

    @property
    def label(self) -> str:
        text = re.sub(r"\s+", " ", self.sql)[:60]
        return f"L{self.line}:{text}"


def load_cases(path: Path = FIXTURE) -> list[Case]:
    """Read the fixture (its header documents the format)."""
    cases: list[Case] = []
    attack: str | None = None
    pending: dict[str, Any] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.rstrip("\n")
        if not line.strip():
            continue
        if line.startswith("--"):
            key, sep, value = line[2:].strip().partition(":")
            if not sep:
                continue
            key, value = key.strip(), value.strip()
            if key == "class":
                attack = value
            elif key == "expect":
                pending["expect"] = tuple(v.strip() for v in value.split("|"))
            elif key == "charge":
                events, partitions = value.split()
                pending["charge"] = (events, partitions)
            elif key == "params":
                pending["params"] = json.loads(value)  # Python's json reads NaN and Infinity
            elif key in ("BUG", "regression"):
                pending["bug"] = value
            continue
        assert attack is not None, f"line {number}: a query before any '-- class:'"
        assert "expect" in pending, f"line {number}: a query without '-- expect:'"
        sql = json.loads(line) if line.startswith('"') else line
        sql = _REPEAT.sub(lambda m: m.group(1) * int(m.group(2)), sql)
        cases.append(Case(line=number, attack=attack, sql=sql, **pending))
        pending = {}
    assert not pending, "the fixture ends with headers but no query"
    return cases


CASES = load_cases()


def signature(event: dict[str, Any]) -> str:
    """A compact form of a charge's event tree: composed(threshold,laplace:80), gaussian, ..."""
    kind = event["kind"]
    if kind in ("composed", "parallel"):
        return f"{kind}({','.join(signature(e) for e in event['events'])})"
    if kind == "laplace":
        sensitivity = float(event["sensitivity"])
        return f"laplace:{int(sensitivity) if sensitivity.is_integer() else sensitivity}"
    return str(kind)


@dataclass(frozen=True)
class Outcome:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def result(self) -> str:
        return "answered" if self.status == 200 else str(self.body.get("code"))

    @property
    def repeat(self) -> bool:
        return self.headers.get("x-dp-repeat") == "true"


@dataclass(frozen=True)
class Run:
    outcomes: tuple[Outcome, ...]
    ledger: dict[str, Any]  # GET /v1/ledger right after the last case, as the admin
    budget: dict[str, Any]  # GET /v1/budget right after the last case, as the analyst


def send(client: httpx.Client, case: Case) -> Outcome:
    # json.dumps writes NaN/Infinity tokens, as an attacker would; a new connection per case, because a
    # 500 makes the server close the connection and the next request on it would fail in transport.
    content = json.dumps(case.body).encode()
    response = client.post(
        "/v1/query?detail=cells", content=content, headers={"Content-Type": "application/json", "Connection": "close"}
    )
    body = response.json()
    assert isinstance(body, dict), response.text
    return Outcome(response.status_code, body, {k.lower(): v for k, v in response.headers.items()})


@pytest.fixture(scope="module")
def redteam(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """One fresh server (the `fresh_server` recipe at module scope: own policy copy, empty ledger, a budget
    no case can exhaust), every case sent once in fixture order, then the ledger and budget as they stand."""
    directory = tmp_path_factory.mktemp("redteam")
    server = Server(directory / "server.log").start(policy_copy(demo, directory, epsilon=1000.0, delta=1e-3))
    try:
        with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
            outcomes = tuple(send(analyst, case) for case in CASES)
            ledger = admin.get("/v1/ledger", params={"analyst": "analyst", "limit": 1000})
            assert ledger.status_code == 200, ledger.text
            yield Run(outcomes, ledger.json(), spend(analyst))
    finally:
        server.stop()


def test_corpus_size_and_coverage() -> None:
    classes = Counter(case.attack for case in CASES)
    assert len(CASES) >= 150, len(CASES)
    assert len(classes) >= 15, sorted(classes)
    assert all(n >= 3 for n in classes.values()), classes  # several queries per class
    answered = [c for c in CASES if "answered" in c.expect]
    assert len(answered) >= 25 and all(c.charge for c in answered if c.expect == ("answered",))
    known = set(STATUS) | {"answered"}
    assert all(set(c.expect) <= known for c in CASES), [c.expect for c in CASES if not set(c.expect) <= known]
    assert all(STATUS.get(code, 400) < 500 for c in CASES for code in c.expect)  # never expect a 5xx


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.label for c in CASES])
def test_attack(redteam: Run, index: int) -> None:
    case, outcome = CASES[index], redteam.outcomes[index]
    where = f"{case.attack} (fixture line {case.line}): {outcome.status} {json.dumps(outcome.body)[:400]}"
    assert outcome.status < 500, where  # no crash, no data-dependent engine failure
    assert not (TIMING_HEADERS & set(outcome.headers)), where  # no timing side channel in the response
    assert outcome.result in case.expect, where
    if outcome.status != 200:
        assert set(outcome.body) == ERROR_KEYS, where
        assert outcome.body["ok"] is False and outcome.body["status"] == outcome.status, where
        assert STATUS[outcome.body["code"]] == outcome.status, where
        assert outcome.body["charged"] is False, where  # rejected before admission: nothing spent
        assert "x-dp-charge-id" not in outcome.headers, where
        return
    body = outcome.body
    assert set(body) == QUERY_KEYS and body["ok"] is True, where
    charge = body["charge"]
    assert outcome.headers.get("x-dp-charge-id") == charge["id"], where
    requested_epsilon = case.params.get("epsilon", DEFAULT_EPSILON)
    requested_delta = case.params.get("delta", DEFAULT_DELTA)
    assert 0 < charge["epsilon"] <= requested_epsilon, where  # never more than asked
    assert 0 <= charge["delta"] <= requested_delta, where
    if case.charge is None:
        return
    events, partitions = case.charge
    assert signature(charge["events"]) == events, where
    assert body["partitions"]["kind"] == partitions, where
    assert charge["composition"] == ("parallel" if events.startswith("parallel(") else "sequential"), where
    assert charge["mechanism"] == ("gaussian" if "gaussian" in events else "laplace"), where
    # δ is spent exactly when partition selection or Gaussian noise runs
    assert (charge["delta"] > 0) == ("threshold" in events or "gaussian" in events), where
    if "threshold" not in events and "gaussian" not in events:
        assert charge["epsilon"] >= requested_epsilon * (1 - 1e-9), where  # pure Laplace: ε split exactly
    if partitions == "private":
        assert isinstance(body["partitions"]["threshold"], int) and body["partitions"]["threshold"] > 1, where


def test_ledger_holds_exactly_the_answered_charges(redteam: Run) -> None:
    outcomes = redteam.outcomes
    assert not [o for o in outcomes if 400 <= o.status < 500 and o.body.get("charged") is not False]
    answered = [o for o in outcomes if o.status == 200]
    new = [o for o in answered if not o.repeat]
    new_ids = [o.body["charge"]["id"] for o in new]
    assert len(set(new_ids)) == len(new_ids)
    # a repeat is the stored answer of an earlier identical request: same charge, nothing new spent
    assert all(o.body["charge"]["id"] in new_ids for o in answered if o.repeat)
    # failures after admission (the fixture's BUG cases) keep their charge and say so
    late = [o for o in outcomes if o.status >= 500]
    assert all(o.body.get("charged") is True and o.body["detail"].get("charge_id") for o in late)
    late_ids = [o.body["detail"]["charge_id"] for o in late]

    ledger = redteam.ledger
    assert len(new) >= 25
    assert ledger["total"] == len(new) + len(late)
    charges = {c["id"]: c for c in ledger["charges"]}
    assert set(charges) == set(new_ids) | set(late_ids)
    for outcome in new:  # the ledger records exactly what each response said it charged
        charge, stored = outcome.body["charge"], charges[outcome.body["charge"]["id"]]
        assert (stored["epsilon"], stored["delta"], stored["composition"]) == (
            charge["epsilon"], charge["delta"], charge["composition"]
        )
        assert stored["events"] == charge["events"]
        assert stored["scope"] == charge["scope"]
    budget = redteam.budget
    assert sum_up(c["epsilon"] for c in charges.values()) == sum_up(
        [o.body["charge"]["epsilon"] for o in new] + [charges[i]["epsilon"] for i in late_ids]
    )
    # the spend reported is the worst-off unit's: the maximum over cells (docs/privacy.md §7)
    assert any(c["scope"] is not None for c in charges.values())  # the attacks include scoped queries
    assert budget["epsilon_spent"] == up(_worst_cell(list(charges.values()), "epsilon"))
    assert budget["delta_spent"] == up(_worst_cell(list(charges.values()), "delta"))
    assert budget["epsilon_spent"] < sum_up(c["epsilon"] for c in charges.values())


def _worst_cell(charges: list[dict[str, Any]], field: str) -> Fraction:
    """An independent oracle of per-cell spend: every cell of every space, summed exactly by brute force;
    a charge scoped to another space (or to none) covers every cell; the worst unit is bounded in each."""
    spaces = {(c["scope"]["table"], c["scope"]["space"]): c["scope"]["of"] for c in charges if c["scope"]}
    total = sum((Fraction(c[field]) for c in charges), Fraction(0))
    bounds = [total]
    for (table, space), size in spaces.items():
        per_cell = [Fraction(0)] * size
        for c in charges:
            scope = c["scope"]
            if scope is None or (scope["table"], scope["space"]) != (table, space):
                covered = range(size)
            else:
                bits = np.unpackbits(np.frombuffer(zlib.decompress(base64.b64decode(scope["bitmap"])), np.uint8))
                covered = [i for i in range(size) if bits[i]]
            for i in covered:
                per_cell[i] += Fraction(c[field])
        bounds.append(max(per_cell))
    return min(bounds)


# --- targeted attacks on the shared server: the value of an answer, not only its code ---------------------
# Each uses its own connections: a 500 makes the server drop the connection, which must not break the
# session's shared `analyst` client for other tests.


def test_string_key_arithmetic_is_not_a_python_string_operation(server: Server, demo: DemoFiles) -> None:
    # Regression: expr.evaluate applied Python's str * int ('north' * 3 was released as 'northnorthnorth');
    # arithmetic on text keys is now rejected before admission.
    sql = "SELECT region, region * 3 AS x, COUNT(*) AS n FROM visits GROUP BY region"
    with server.client(demo.analyst_key) as client:
        response = client.post("/v1/query", json={"sql": sql})
    body = response.json()
    assert (response.status_code, body["code"], body["charged"]) == (400, "unsupported", False), response.text


def test_between_symmetric_keeps_its_meaning_or_is_rejected(server: Server, demo: DemoFiles) -> None:
    # Regression: analyse._predicate dropped Between(symmetric=True): BETWEEN SYMMETRIC 90 AND 18 ran as the
    # empty BETWEEN 90 AND 18.
    sql = "SELECT COUNT(*) AS n FROM visits WHERE age BETWEEN SYMMETRIC 90 AND 18"
    with server.client(demo.analyst_key) as client:
        response = client.post("/v1/query/preview", json={"sql": sql})
    if response.status_code != 200:
        assert response.status_code == 400 and response.json()["charged"] is False, response.text
        return
    rewritten = response.json()["sql"].upper()
    assert "SYMMETRIC" in rewritten or "BETWEEN 18 AND 90" in rewritten, rewritten


@pytest.mark.parametrize("path", ["/v1/query", "/v1/query/preview"])
@pytest.mark.parametrize("content", [b"\xff", b'{"sql": "SELECT COUNT(*) FROM visits \xff"}'], ids=["byte", "in-json"])
def test_undecodable_body_is_an_invalid_request(server: Server, demo: DemoFiles, path: str, content: bytes) -> None:
    # Regression: FastAPI's HTTPException(400, "There was an error parsing the body") became 500 `internal`.
    with server.client(demo.analyst_key) as client:
        response = client.post(path, content=content, headers={"Content-Type": "application/json"})
    body = response.json()
    assert (response.status_code, body["code"], body["charged"]) == (400, "invalid_request", False), response.text


@pytest.mark.parametrize(
    ("sql", "keys"),
    [
        # the WHERE reaches only north (issue #28): the other regions would be noise alone
        ("SELECT region, COUNT(*) AS n FROM visits WHERE region = 'north' GROUP BY region", ("north",)),
        ("SELECT category, COUNT(*) AS n FROM visits WHERE user_id = 42 GROUP BY category", CATEGORIES),
        ("SELECT plan, SUM(age) AS s FROM users WHERE age > 1000 GROUP BY plan", PLANS),
    ],
    ids=["filtered-away", "one-person", "no-rows"],
)
def test_public_groups_appear_whether_or_not_they_have_rows(
    server: Server, demo: DemoFiles, sql: str, keys: tuple[str, ...]
) -> None:
    """Group existence must not leak: a public domain is released in full, empty groups included (all the values
    the WHERE can reach, from the query and the declarations alone)."""
    with server.client(demo.analyst_key) as client:
        response = client.post("/v1/query", json={"sql": sql})
    assert response.status_code == 200, response.text
    assert [row[0] for row in response.json()["rows"]] == list(keys)


def test_private_groups_of_one_person_stay_hidden(server: Server, demo: DemoFiles) -> None:
    """Days on which user 42 visited are groups of one unit: each passes the noisy threshold with probability
    below the charged δ (1e-8 here), so the answer lists no day at all, with or without HAVING/ORDER/LIMIT."""
    with server.client(demo.analyst_key) as client:
        for sql in [
            "SELECT day, COUNT(*) AS n FROM visits WHERE user_id = 42 GROUP BY day",
            "SELECT day, COUNT(*) AS n FROM visits WHERE user_id = 42 GROUP BY day HAVING n > -1000000 "
            "ORDER BY n DESC LIMIT 100000",
        ]:
            response = client.post("/v1/query", json={"sql": sql, "epsilon": 1.0})
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["partitions"]["kind"] == "private" and body["charge"]["delta"] > 0
            assert body["rows"] == [], body["rows"]


def test_rephrased_repeats_are_charged_again(server: Server, demo: DemoFiles) -> None:
    """Averaging noise over rewordings of one query must cost one charge per rewording (docs/privacy.md §2)."""
    variants = [
        "SELECT COUNT(*) AS rephrased FROM visits WHERE age > 33",
        "SELECT COUNT(*) AS rephrased FROM visits WHERE 33 < age",
        "SELECT COUNT(*) AS rephrased FROM visits WHERE age > 33 AND TRUE",
    ]
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        before = spend(analyst)["epsilon_spent"]
        total = admin.get("/v1/ledger", params={"analyst": "analyst"}).json()["total"]
        first_answers: dict[str, bytes] = {}  # charge id -> the body first sent for it
        charged = []
        for sql in variants:
            response = analyst.post("/v1/query", json={"sql": sql, "epsilon": 0.05})
            assert response.status_code == 200, response.text
            charge_id = response.headers["x-dp-charge-id"]
            if response.headers["x-dp-repeat"] == "false":
                charged.append(response.json()["charge"]["epsilon"])
                first_answers[charge_id] = response.content
            else:  # free only as the stored answer of an earlier request: the same bytes, never fresh noise
                assert response.content == first_answers[charge_id]
        after = admin.get("/v1/ledger", params={"analyst": "analyst"}).json()["total"]
        assert after - total == len(charged) >= 1
        assert spend(analyst)["epsilon_spent"] >= before + sum(charged) * (1 - 1e-12)


def test_budget_cannot_be_overspent(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server(epsilon=0.25, delta=1e-6)
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        for i in range(2):
            ok = analyst.post("/v1/query", json={"sql": f"SELECT COUNT(*) AS n{i} FROM visits", "epsilon": 0.1})
            assert ok.status_code == 200, ok.text
        preview = analyst.post("/v1/query/preview", json={"sql": "SELECT COUNT(*) AS n2 FROM visits",
                                                          "epsilon": 0.1})
        assert preview.status_code == 200 and preview.json()["admissible"] is False, preview.text
        for sql, epsilon in [("SELECT COUNT(*) AS n2 FROM visits", 0.1),
                             ("SELECT day, COUNT(*) AS n3 FROM visits GROUP BY day", 0.06),
                             ("SELECT COUNT(*) AS n4 FROM visits", 1.0)]:
            refused = analyst.post("/v1/query", json={"sql": sql, "epsilon": epsilon})
            assert refused.status_code == 403, refused.text
            assert (refused.json()["code"], refused.json()["charged"]) == ("budget_exceeded", False)
        last = analyst.post("/v1/query", json={"sql": "SELECT COUNT(*) AS n5 FROM visits", "epsilon": 0.04})
        assert last.status_code == 200, last.text
        budget = spend(analyst)
        assert budget["epsilon_spent"] <= 0.25 and budget["delta_spent"] <= 1e-6
        assert math.isclose(budget["epsilon_spent"], 0.24, rel_tol=1e-9)
        assert admin.get("/v1/ledger", params={"analyst": "analyst"}).json()["total"] == 3
