"""Operations, against live servers: readiness, request ids, the JSON access log, graceful SIGTERM; and, in
process, the error path no handler catches and the metrics token."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from proxy.app import create_app
from proxy.cli.demo import DemoFiles
from proxy.http import ops
from proxy.settings import Settings
from tests.support.live import Server, StartFresh, policy_copy

ERROR_KEYS = {"ok", "status", "code", "error", "detail", "charged"}
SQL = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"
LITERAL = "zq%secret-literal%xj"  # appears in a query's WHERE clause and must never reach the log


def ledger_file(server: Server) -> Path:
    assert server.policy is not None
    return server.policy.parent / "ledger.sqlite"


def process(server: Server) -> subprocess.Popen[bytes]:
    proc = server._proc  # the fixture owns the process; these tests signal it directly
    assert proc is not None
    return proc


# --- readiness ---------------------------------------------------------------------------------------


def test_readyz_fails_with_the_error_body_when_the_ledger_file_is_gone(
    fresh_server: StartFresh, demo: DemoFiles
) -> None:
    server = fresh_server()
    with server.client() as anyone:
        assert anyone.get("/readyz").json() == {"ok": True}
        ledger = ledger_file(server)
        moved = ledger.rename(ledger.with_name("moved-away.sqlite"))
        try:
            response = anyone.get("/readyz")
            assert response.status_code == 503
            body = response.json()
            assert set(body) == ERROR_KEYS
            assert body["code"] == "unavailable" and body["status"] == 503 and body["charged"] is False
            assert body["detail"] == {"failed": ["ledger"]}
            assert str(ledger) not in response.text  # paths go to the log only
            assert anyone.get("/healthz").status_code == 200  # alive, just not ready
        finally:
            moved.rename(ledger)
        assert anyone.get("/readyz").status_code == 200  # the same file (same inode) is back
    assert "not ready: ledger: FileNotFoundError" in server.log.read_text()


def test_readyz_fails_when_the_ledger_file_is_replaced(fresh_server: StartFresh) -> None:
    """A replaced file would take new charges into the old, unlinked one: lost at the next restart."""
    server = fresh_server()
    ledger = ledger_file(server)
    copy = ledger.with_name("copy.sqlite")
    copy.write_bytes(ledger.read_bytes())
    copy.replace(ledger)
    with server.client() as anyone:
        response = anyone.get("/readyz")
    assert response.status_code == 503, response.text
    assert response.json()["detail"] == {"failed": ["ledger"]}
    assert "replaced since start-up" in server.log.read_text()


def test_a_readiness_check_that_hangs_fails_at_its_time_limit() -> None:
    """A ledger waiting on a lock must not hang the probe: each check has a time limit."""
    start = time.monotonic()
    assert asyncio.run(ops._within(0.2, lambda: time.sleep(5))) == "no answer within 0.2 s"
    assert time.monotonic() - start < 2
    assert asyncio.run(ops._within(1.0, lambda: None)) is None
    assert asyncio.run(ops._within(1.0, lambda: 1 / 0)) == "ZeroDivisionError: division by zero"


# --- request ids and the access log ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offered", "echoed"),
    [
        ("job-42.step:7", "job-42.step:7"),
        (None, None),  # generated
        ("has spaces", None),  # not a plain token: replaced
        ("x" * 129, None),  # too long: replaced
    ],
)
def test_request_id_is_echoed_or_generated(analyst: httpx.Client, offered: str | None, echoed: str | None) -> None:
    headers = {} if offered is None else {"X-Request-Id": offered}
    for response in (analyst.get("/v1/budget", headers=headers), analyst.get("/nowhere", headers=headers)):
        rid = response.headers["x-request-id"]
        if echoed is not None:
            assert rid == echoed
        else:
            assert re.fullmatch(r"[0-9a-f]{32}", rid), rid


def access_line(server: Server, rid: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The access log line of request `rid` (written just after the response is sent)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for line in server.log.read_text(errors="replace").splitlines():
            if rid in line and '"dpproxy.access"' in line:
                parsed: dict[str, Any] = json.loads(line)
                if parsed.get("request_id") == rid:
                    return parsed
        assert time.monotonic() < deadline, f"no access line for {rid}:\n{server.log_tail()}"
        time.sleep(0.05)


def test_one_json_access_line_per_request_without_sql_or_data(server: Server, analyst: httpx.Client) -> None:
    # grouped by region, filtered on category: a LIKE on the key itself that matches no declared value would be
    # refused, free, before it is charged (no_reachable_group)
    sql = f"SELECT region, SUM(amount) AS total FROM visits WHERE category LIKE '{LITERAL}' GROUP BY region"
    ok = analyst.post("/v1/query", json={"sql": sql, "epsilon": 0.1}, headers={"X-Request-Id": "log-ok-1"})
    assert ok.status_code == 200, ok.text
    bad = analyst.post("/v1/query", json={"sql": f"SELECT '{LITERAL}' FROM visits", "dataset": "demo"},
                       headers={"X-Request-Id": "log-bad-1"})
    assert bad.status_code == 400

    line = access_line(server, "log-ok-1")
    assert set(line) == {"ts", "level", "logger", "msg", "request_id", "method", "route", "status", "code",
                         "analyst", "dataset", "duration_ms", "stages_ms", "charge_id"}
    assert line["method"] == "POST" and line["route"] == "/v1/query" and line["status"] == 200
    assert line["code"] == "ok" and line["analyst"] == "analyst" and line["dataset"] == "demo"
    assert line["charge_id"] == ok.json()["charge"]["id"] == ok.headers["x-dp-charge-id"]
    assert line["duration_ms"] > 0 and line["level"] == "info"
    assert set(line["stages_ms"]) == {"plan", "admit", "execute", "release"}
    assert sum(line["stages_ms"].values()) <= line["duration_ms"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", line["ts"])

    rejected = access_line(server, "log-bad-1")
    assert (rejected["status"], rejected["code"], rejected["analyst"], rejected["dataset"]) == (
        400, bad.json()["code"], "analyst", "demo")
    assert rejected["stages_ms"].keys() == {"plan"} and rejected["charge_id"] is None

    text = server.log.read_text(errors="replace")
    assert LITERAL not in text and "secret-literal" not in text
    for row in ok.json()["rows"]:  # no released value either
        assert f'"{row[0]}", {row[1]}' not in text and str(row[1]) not in text


def test_unauthenticated_request_is_logged_without_an_analyst(server: Server) -> None:
    with server.client("not-a-key") as stranger:
        response = stranger.post("/v1/query", json={"sql": SQL}, headers={"X-Request-Id": "log-anon-1"})
    assert response.status_code == 401
    line = access_line(server, "log-anon-1")
    assert (line["code"], line["analyst"], line["dataset"]) == ("unauthenticated", None, None)


# --- graceful shutdown -------------------------------------------------------------------------------


def test_sigterm_lets_the_in_flight_query_finish_and_exits_0(fresh_server: StartFresh, demo: DemoFiles) -> None:
    """SIGTERM arrives while a query is in flight (its body half sent): the server stops accepting, the query
    is still answered 200 and charged, and the process exits 0."""
    server = fresh_server()
    proc = process(server)
    body = json.dumps({"sql": SQL, "epsilon": 0.2}).encode()
    head = (f"POST /v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {demo.analyst_key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nX-Request-Id: in-flight-1\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port or 0), timeout=30) as conn:
        conn.sendall(head.encode() + body[:10])
        wait_in_flight(server, demo.admin_key, 2)  # that request, and the scrape asking
        proc.send_signal(signal.SIGTERM)
        wait_for(server, "Waiting for connections to close")
        with pytest.raises(OSError):  # no new connections while draining
            socket.create_connection(("127.0.0.1", server.port or 0), timeout=2).close()
        conn.sendall(body[10:])
        response = read_response(conn)
    assert response.startswith(b"HTTP/1.1 200 "), response[:200]
    answer = json.loads(response.split(b"\r\n\r\n", 1)[1])
    # ε = 0.2 as written, charged as the largest float at or below it (proxy/schemas.py)
    charged = 0.19999999999999998
    assert answer["charge"]["epsilon"] == charged and answer["budget"]["epsilon_spent"] == charged
    assert proc.wait(timeout=30) == 0, server.log_tail()
    log = server.log.read_text()
    assert "shut down: requests drained" in log


def wait_in_flight(server: Server, admin_key: str, count: int, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    with server.client(admin_key) as admin:
        while True:
            scraped = admin.get("/metrics").text
            found = re.search(r"^dpproxy_requests_in_flight (\S+)$", scraped, flags=re.MULTILINE)
            if found and float(found.group(1)) >= count:
                return
            assert time.monotonic() < deadline, scraped
            time.sleep(0.02)


def wait_for(server: Server, text: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in server.log.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"{text!r} not logged:\n{server.log_tail()}"
        time.sleep(0.02)


def read_response(conn: socket.socket) -> bytes:
    """One whole HTTP/1.1 response with a Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    while len(rest) < length:
        chunk = conn.recv(65536)
        assert chunk
        rest += chunk
    return head + b"\r\n\r\n" + rest


# --- in process --------------------------------------------------------------------------------------


@pytest.fixture
def app_factory(demo: DemoFiles, tmp_path: Path) -> Iterator[Any]:
    def make(**settings: Any) -> FastAPI:
        return create_app(Settings(policy=policy_copy(demo, tmp_path / "in-process"), **settings))

    yield make


def call(app: FastAPI, *requests: tuple[str, str, dict[str, str]]) -> list[httpx.Response]:
    """Run the app's lifespan and send `requests` (method, path, headers) through ASGI, in order."""

    async def run() -> list[httpx.Response]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
                return [await client.request(m, p, headers=h) for m, p, h in requests]

    return asyncio.run(run())


def test_an_exception_no_handler_catches_gets_the_error_body_and_a_request_id(app_factory: Any) -> None:
    app = app_factory()

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("boom: a detail that must not reach the client")

    (response,) = call(app, ("GET", "/boom", {"X-Request-Id": "boom-1"}))
    assert response.status_code == 500
    body = response.json()
    assert set(body) == ERROR_KEYS and body["code"] == "internal" and "boom" not in response.text
    assert response.headers["x-request-id"] == "boom-1"


def test_the_metrics_token_reads_metrics_and_nothing_else(app_factory: Any, demo: DemoFiles) -> None:
    app = app_factory(metrics_token="scrape-token-123")
    token = {"Authorization": "Bearer scrape-token-123"}
    metrics, ledger, wrong = call(
        app, ("GET", "/metrics", token), ("GET", "/v1/ledger", token),
        ("GET", "/metrics", {"Authorization": "Bearer scrape-token-12"}),
    )
    assert metrics.status_code == 200 and "dpproxy_budget_epsilon_spent" in metrics.text
    assert ledger.status_code == 401 and wrong.status_code == 401
    admin, analyst = call(app_factory(), ("GET", "/metrics", {"Authorization": f"Bearer {demo.admin_key}"}),
                          ("GET", "/metrics", {"Authorization": f"Bearer {demo.analyst_key}"}))
    assert admin.status_code == 200 and analyst.status_code == 403
    assert analyst.json()["code"] == "forbidden"
