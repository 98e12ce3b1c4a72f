"""Every error path returns the one body (docs/errors.md) with the documented status per code; none is charged:

    {"ok": false, "status": 400, "code": "unsupported", "error": "...", "detail": {...}, "charged": false}
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from accountant.ledger.admit import NEXT_STEP
from proxy.cli.demo import DemoFiles
from tests.support.live import Server, StartFresh, difference_down, spend

ERROR_KEYS = {"ok", "status", "code", "error", "detail", "charged"}
COUNT = "SELECT COUNT(*) AS n FROM visits"
JOIN = "SELECT COUNT(*) FROM visits CROSS JOIN users"  # a join on the unit is answered (issue #14)
JSON = {"Content-Type": "application/json"}
RAW = b'{"sql": "SELECT COUNT(*) FROM visits", "epsilon": %s}'  # for numbers that json.dumps refuses


@dataclass(frozen=True)
class Case:
    status: int
    code: str
    body: object = None  # a JSON value, or bytes sent as they are
    method: str = "POST"
    path: str = "/v1/query"
    auth: str | None = "analyst"  # "analyst", "admin", None (no header) or a literal Authorization value
    detail: dict[str, Any] = field(default_factory=dict)  # expected to be a subset of the body's detail
    params: dict[str, str] = field(default_factory=dict)


def q(**fields: object) -> dict[str, object]:
    return {"sql": COUNT, **fields}


CASES: dict[str, Case] = {
    # unauthenticated: 401
    "no-header": Case(401, "unauthenticated", q(), auth=None),
    "unknown-key": Case(401, "unauthenticated", q(), auth="Bearer not-a-key"),
    "not-bearer": Case(401, "unauthenticated", q(), auth="Basic YWRtaW46YWRtaW4="),
    "bearer-without-key": Case(401, "unauthenticated", q(), auth="Bearer"),
    "budget-no-header": Case(401, "unauthenticated", method="GET", path="/v1/budget", auth=None),
    "ledger-no-header": Case(401, "unauthenticated", method="GET", path="/v1/ledger", auth=None),
    # forbidden: 403
    "unknown-dataset": Case(403, "forbidden", q(dataset="other"), detail={"dataset": "other"}),
    "analyst-on-ledger": Case(403, "forbidden", method="GET", path="/v1/ledger", detail={"role": "analyst"}),
    # invalid_request: 400 (FastAPI's 422, re-mapped)
    "missing-sql": Case(400, "invalid_request", {}),
    "extra-field": Case(400, "invalid_request", q(limit=10)),
    "epsilon-NaN-string": Case(400, "invalid_request", q(epsilon="NaN")),
    "epsilon-NaN-number": Case(400, "invalid_request", RAW % b"NaN"),
    "epsilon-Infinity": Case(400, "invalid_request", RAW % b"Infinity"),
    "epsilon-1e309": Case(400, "invalid_request", RAW % b"1e309"),  # parses as inf
    "epsilon-negative": Case(400, "invalid_request", q(epsilon=-0.1)),
    "epsilon-zero": Case(400, "invalid_request", q(epsilon=0)),
    "delta-one": Case(400, "invalid_request", q(delta=1)),
    "delta-negative": Case(400, "invalid_request", q(delta=-1e-9)),
    "sql-number": Case(400, "invalid_request", {"sql": 123}),
    "sql-null": Case(400, "invalid_request", {"sql": None}),
    "sql-empty": Case(400, "invalid_request", {"sql": ""}),
    "sql-list": Case(400, "invalid_request", {"sql": [COUNT]}),
    "epsilon-list": Case(400, "invalid_request", q(epsilon=[0.1])),
    # Regression: pydantic's lax mode read JSON true as ε=1.0 and charged it; must be 400
    "epsilon-true": Case(400, "invalid_request", q(epsilon=True)),
    # Regression: pydantic's lax mode read the JSON string "0.1" as ε=0.1 and charged it; must be 400
    "epsilon-string": Case(400, "invalid_request", q(epsilon="0.1")),
    "dataset-number": Case(400, "invalid_request", q(dataset=5)),
    "mechanism-unknown": Case(400, "invalid_request", q(mechanism="exponential")),
    "body-array": Case(400, "invalid_request", [COUNT]),
    "body-not-json": Case(400, "invalid_request", b"SELECT COUNT(*) FROM visits"),
    "ledger-limit-0": Case(400, "invalid_request", method="GET", path="/v1/ledger", auth="admin",
                           params={"limit": "0"}),
    "ledger-bad-since": Case(400, "invalid_request", method="GET", path="/v1/ledger", auth="admin",
                             params={"since": "yesterday"}),
    # sql_syntax: 400
    "syntax-keyword": Case(400, "sql_syntax", {"sql": "SELEC COUNT(*) FROM visits"},
                           detail={"construct": "syntax"}),
    "syntax-paren": Case(400, "sql_syntax", {"sql": "SELECT COUNT(* FROM visits"}),
    "syntax-blank": Case(400, "sql_syntax", {"sql": "   "}, detail={"construct": "empty"}),
    # unsupported: 400
    "join": Case(400, "unsupported", {"sql": JOIN}, detail={"construct": "CROSS JOIN"}),
    "statements": Case(400, "unsupported", {"sql": "SELECT COUNT(*) FROM visits; SELECT COUNT(*) FROM users"},
                       detail={"construct": "statements", "count": 2}),
    "pragma": Case(400, "unsupported", {"sql": "PRAGMA table_info('visits')"},
                   detail={"construct": "PRAGMA"}),
    "insert": Case(400, "unsupported", {"sql": "INSERT INTO visits VALUES (1)"},
                   detail={"construct": "INSERT"}),
    "raw-rows": Case(400, "unsupported", {"sql": "SELECT * FROM visits"}),
    "join-preview": Case(400, "unsupported", {"sql": "SELECT COUNT(*) FROM visits, users"},
                         path="/v1/query/preview", detail={"construct": "CROSS JOIN"}),
    # policy: 400
    "unknown-column": Case(400, "policy", {"sql": "SELECT COUNT(nope) FROM visits"},
                           detail={"column": "nope"}),
    "unknown-table": Case(400, "policy", {"sql": "SELECT COUNT(*) FROM secrets"},
                          detail={"table": "secrets"}),
    "sum-without-bounds": Case(400, "policy", {"sql": "SELECT SUM(user_id) FROM visits"},
                               detail={"construct": "SUM", "column": "user_id"}),
    "group-by-unit": Case(400, "policy", {"sql": "SELECT user_id, COUNT(*) FROM visits GROUP BY user_id"},
                          detail={"construct": "GROUP BY", "column": "user_id"}),
    # invalid_parameter: 400
    "epsilon-above-max": Case(400, "invalid_parameter", q(epsilon=1.5),
                              detail={"parameter": "epsilon", "max_epsilon": 1.0}),
    "epsilon-above-max-preview": Case(400, "invalid_parameter", q(epsilon=1.0000001),
                                      path="/v1/query/preview",
                                      detail={"parameter": "epsilon", "max_epsilon": 1.0}),
    "delta-too-large": Case(400, "invalid_parameter", q(delta=0.5), detail={"parameter": "delta"}),
    "gaussian-without-delta": Case(400, "invalid_parameter", q(mechanism="gaussian", delta=0),
                                   detail={"parameter": "delta"}),
    # not_found: 404, method_not_allowed: 405
    "unknown-route": Case(404, "not_found", method="GET", path="/v1/nothing"),
    "unknown-route-no-auth": Case(404, "not_found", method="GET", path="/admin", auth=None),
    "wrong-method": Case(405, "method_not_allowed", method="DELETE", path="/v1/query"),
}


def send(server: Server, demo: DemoFiles, case: Case) -> httpx.Response:
    headers: dict[str, str] = {}
    match case.auth:
        case "analyst":
            headers["Authorization"] = f"Bearer {demo.analyst_key}"
        case "admin":
            headers["Authorization"] = f"Bearer {demo.admin_key}"
        case str(value):
            headers["Authorization"] = value
    with server.client() as client:
        if isinstance(case.body, bytes):
            return client.request(case.method, case.path, content=case.body, headers={**headers, **JSON},
                                  params=case.params)
        if case.body is None:
            return client.request(case.method, case.path, headers=headers, params=case.params)
        return client.request(case.method, case.path, json=case.body, headers=headers, params=case.params)


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert set(body) == ERROR_KEYS, body
    assert (response.status_code, body["status"], body["code"]) == (status, status, code), body
    assert body["ok"] is False and body["charged"] is False
    assert isinstance(body["error"], str) and body["error"]
    assert isinstance(body["detail"], dict)
    assert response.headers["content-type"] == "application/json"
    return body


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_error_has_the_one_shape_and_charges_nothing(
    case: Case, server: Server, analyst: httpx.Client, demo: DemoFiles
) -> None:
    before = spend(analyst)
    body = assert_error(send(server, demo, case), case.status, case.code)
    assert {k: body["detail"].get(k) for k in case.detail} == case.detail
    assert spend(analyst) == before


def test_join_message_names_the_construct_and_the_fix(analyst: httpx.Client) -> None:
    # Regression: the message read "JOIN is not supported; JOIN is not supported; query one table".
    body = assert_error(analyst.post("/v1/query", json={"sql": JOIN}), 400, "unsupported")
    assert body == {
        "ok": False, "status": 400, "code": "unsupported",
        "error": "CROSS JOIN is not supported; supported: <protected> [INNER|LEFT] JOIN <public table> ON <a column "
                 "before it> = <one of its keys>, any number of times, and up to two more protected tables of the "
                 "same privacy unit, each joined on it (USING (unit)) or on a key of its declared unit_via path",
        "detail": {"construct": "CROSS JOIN"}, "charged": False,
    }


def test_validation_errors_name_the_field(analyst: httpx.Client) -> None:
    body = assert_error(analyst.post("/v1/query", json=q(epsilon=-1)), 400, "invalid_request")
    assert body["error"] == "the request body is invalid"
    (item,) = body["detail"]["errors"]
    assert item == {"loc": ["body", "epsilon"], "msg": "Input should be greater than 0"}
    body = assert_error(analyst.post("/v1/query", json={}), 400, "invalid_request")
    assert [e["loc"] for e in body["detail"]["errors"]] == [["body", "sql"]]


def test_budget_exceeded_is_403_with_the_remaining_budget(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server(epsilon=0.15, delta=1e-6)
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        first = analyst.post("/v1/query", json=q(epsilon=0.1))
        assert first.status_code == 200, first.text
        charge = first.json()["charge"]
        spent = spend(analyst)
        assert spent["epsilon_spent"] == charge["epsilon"]

        preview = analyst.post("/v1/query/preview", json=q(epsilon=0.1)).json()
        assert preview["admissible"] is False
        requested = preview["charge"]["epsilon"]

        # a different query (an identical one would be a free repeat of the first answer)
        other = {"sql": "SELECT COUNT(*) AS m FROM visits", "epsilon": 0.1}
        body = assert_error(analyst.post("/v1/query", json=other), 403, "budget_exceeded")
        assert body["error"] == "query needs ε=0.1 but 0.05 of your ε=0.15 remains"
        assert body["detail"] == {
            "epsilon_remaining": difference_down(0.15, charge["epsilon"]),
            "delta_remaining": 1e-6,
            "epsilon_requested": requested,
            "delta_requested": 0.0,
            "hint": NEXT_STEP,
        }
        assert spend(analyst) == spent

        # δ runs out first: a Gaussian query asking for more δ than the budget holds
        greedy = q(epsilon=0.01, delta=1e-5, mechanism="gaussian")
        body = assert_error(analyst.post("/v1/query", json=greedy), 403, "budget_exceeded")
        assert body["error"] == "query needs δ=1e-05 but 1e-06 of your δ=1e-06 remains"
        # δ = 1e-5 as written, charged as the largest float at or below it (proxy/schemas.py)
        assert (body["detail"]["delta_remaining"], body["detail"]["delta_requested"]) == (1e-6, 9.999999999999999e-06)
        assert spend(analyst) == spent

        ledger = admin.get("/v1/ledger").json()
        assert ledger["total"] == 1 and [c["id"] for c in ledger["charges"]] == [charge["id"]]


# --- the error path must not break the HTTP connection ---------------------------------------------


def pipelined_statuses(base_url: str, requests: list[bytes]) -> list[int]:
    """Send `requests` back to back on one connection; the statuses answered before the server closes it."""
    parts = urlsplit(base_url)
    statuses: list[int] = []
    buffer = b""
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(b"".join(requests))
        while len(statuses) < len(requests):
            end = buffer.find(b"\r\n\r\n")
            if end >= 0:
                head = buffer[:end].decode("latin-1").split("\r\n")
                fields = dict(line.split(":", 1) for line in head[1:])
                length = int(next(v for k, v in fields.items() if k.strip().lower() == "content-length"))
                if len(buffer) >= end + 4 + length:
                    statuses.append(int(head[0].split()[1]))
                    buffer = buffer[end + 4 + length:]
                    continue
            chunk = sock.recv(65536)
            if not chunk:  # the server closed the connection
                break
            buffer += chunk
    return statuses


def raw_request(method: str, path: str, authorization: str | None = None, body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if authorization:
        lines.append(f"Authorization: {authorization}")
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_errors_keep_the_connection_open(server: Server, demo: DemoFiles) -> None:
    # Regression: with one handler for Exception, Starlette's ServerErrorMiddleware answered every domain error
    # and re-raised it: uvicorn logged a traceback and closed the keep-alive connection.
    health = raw_request("GET", "/healthz")
    join = json.dumps({"sql": JOIN}).encode()
    observed = {
        "404": pipelined_statuses(server.base_url, [raw_request("GET", "/v1/nothing"), health]),
        "401": pipelined_statuses(server.base_url, [raw_request("GET", "/v1/budget", "Bearer nope"), health]),
        "400": pipelined_statuses(
            server.base_url, [raw_request("POST", "/v1/query", f"Bearer {demo.analyst_key}", join), health]
        ),
    }
    assert observed == {"404": [404, 200], "401": [401, 200], "400": [400, 200]}


def test_client_errors_are_not_logged_as_server_exceptions(server: Server) -> None:
    # Regression: a 401 was logged with a full traceback (same cause as above).
    marker = "Exception in ASGI application"
    before = server.log.read_text(errors="replace").count(marker)
    with server.client() as client:
        assert_error(client.get("/v1/budget"), 401, "unauthenticated")
        assert client.get("/healthz").status_code == 200  # the log line of the 401 is written by now
    assert server.log.read_text(errors="replace").count(marker) == before


def _every_subclass(cls: type) -> list[type]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _every_subclass(sub))]


def test_one_error_base_carries_each_codes_status() -> None:
    """Every error the product reports is a ProxyError whose `status` is the status table's for its code, and
    the handler answers with it (with Retry-After when the error says when to retry)."""
    import importlib
    import pkgutil

    import accountant
    import proxy
    from accountant.errors import LedgerBusy, ProxyError
    from proxy.http.errors import STATUS, error_response

    for package in (proxy, accountant):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if "spark" not in info.name and info.name != "proxy.__main__":
                importlib.import_module(info.name)
    raised = [c for c in _every_subclass(ProxyError) if not c.__subclasses__()]  # the bases are never raised
    assert len(raised) >= 15
    for cls in raised:
        assert cls.status == STATUS.get(cls.code, 500), (cls.__name__, cls.code, cls.status)

    class _Request:
        class state:
            charged = False

    response = error_response(_Request(), LedgerBusy("the ledger is busy", retry_after_s=7))  # type: ignore[arg-type]
    assert response.status_code == 503 and response.headers["retry-after"] == "7"
    assert json.loads(response.body)["detail"] == {"retry_after_s": 7}
