"""Request intake on a live server (issue #11): what a body may cost, and what the audit log records of it.

Regressions of an independent security review, each against a real `python -m proxy serve`:
1. padding a query's JSON body hid its SQL from the audit log (the log re-read ~1 MB of raw bytes, the cut
   JSON did not parse, and the entry said `sql: ""` while the query was answered and charged);
2. bodies of any size were buffered (and parsed) before the key was checked: 8 × 50 MB POSTs without a key
   took the server from 0.3 to 1.3 GB;
3. the audit log parsed (sqlglot) and stored the SQL of requests without a key;
4. 3,000 nested `[` raised RecursionError in a body peek: a 500 `internal` with no audit entry.
Raw sockets send what httpx would not (a Content-Length with no body, a chunked body that never ends).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from typing import Any

import pytest

from proxy.cli.demo import DemoFiles
from tests.support.live import Server, StartFresh

COUNT = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"
LIMIT = 64 * 1024  # DPPROXY_MAX_BODY_BYTES's default
RESPONSE_WITHIN_S = 10.0


def _head(port: int, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json",
             *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    return "\r\n".join(lines).encode()


def _response(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """Read one HTTP/1.1 response with a Content-Length: its status and JSON body."""
    sock.settimeout(RESPONSE_WITHIN_S)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection without a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-response"
        body += chunk
    return status, json.loads(body[:length])


def _declared_only(server: Server, key: str | None, length: int, path: str = "/v1/query") -> tuple[int, dict[str, Any]]:
    """Send only the head of a POST declaring a `length`-byte body: the server must answer without it."""
    headers = {"Content-Length": str(length)} | ({} if key is None else {"Authorization": f"Bearer {key}"})
    assert server.port is not None
    with socket.create_connection(("127.0.0.1", server.port), timeout=RESPONSE_WITHIN_S) as sock:
        sock.sendall(_head(server.port, path, headers))
        return _response(sock)


def _chunked(server: Server, key: str, chunk: bytes, most: int) -> tuple[int, dict[str, Any], int]:
    """Stream a chunked body (no Content-Length) until the server answers or `most` bytes went; and how
    many bytes were sent."""
    assert server.port is not None
    headers = {"Transfer-Encoding": "chunked", "Authorization": f"Bearer {key}"}
    with socket.create_connection(("127.0.0.1", server.port), timeout=RESPONSE_WITHIN_S) as sock:
        sock.sendall(_head(server.port, "/v1/query", headers))
        sent = 0
        while sent < most and not select.select([sock], [], [], 0.005)[0]:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        if sent >= most:
            sock.sendall(b"0\r\n\r\n")
        status, body = _response(sock)
        return status, body, sent


def _audit(server: Server, admin_key: str, **params: Any) -> list[dict[str, Any]]:
    with server.client(admin_key) as admin:
        page = admin.get("/v1/audit", params={"limit": 1000, **params})
        assert page.status_code == 200, page.text
        return list(page.json()["entries"])


def _charges(server: Server, admin_key: str) -> list[dict[str, Any]]:
    with server.client(admin_key) as admin:
        return list(admin.get("/v1/ledger", params={"limit": 1000}).json()["charges"])


def _canonical(status: int, body: dict[str, Any], code: str) -> None:
    assert (status, body.get("code")) == (body.get("status"), code), body
    assert set(body) == {"ok", "status", "code", "error", "detail", "charged"} and body["ok"] is False
    assert body["charged"] is False


@pytest.fixture
def fresh(fresh_server: StartFresh) -> Server:
    return fresh_server(epsilon=5.0, delta=1e-6)


# --- 1. the audit log records the SQL the route parsed and the ledger charged ---------------------------


def test_a_padded_body_over_the_limit_is_refused_unread_and_audited(fresh: Server, demo: DemoFiles) -> None:
    padded = f'{{"sql": "{COUNT}", "epsilon": 0.1' + " " * 2_000_000 + "}"
    with fresh.client(demo.analyst_key) as client:
        response = client.post("/v1/query", content=padded, headers={"Content-Type": "application/json"})
    _canonical(response.status_code, response.json(), "payload_too_large")
    assert response.status_code == 413 and response.json()["detail"] == {"limit": LIMIT}
    assert _charges(fresh, demo.admin_key) == []  # not answered, not charged
    (entry,) = _audit(fresh, demo.admin_key)
    assert (entry["analyst"], entry["decision"], entry["error_code"], entry["sql"]) == (
        "analyst", "rejected", "payload_too_large", "")


def test_a_padded_body_within_a_raised_limit_is_audited_with_its_sql(
    fresh_server: StartFresh, demo: DemoFiles
) -> None:
    server = fresh_server(epsilon=5.0, settings={"DPPROXY_MAX_BODY_BYTES": str(4 * 1024 * 1024)})
    padded = f'{{"sql": "{COUNT.lower()}", "epsilon": 0.1' + " " * 2_000_000 + "}"
    with server.client(demo.analyst_key) as client:
        response = client.post("/v1/query", content=padded, headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    (charge,) = _charges(server, demo.admin_key)
    entries = {e["decision"]: e for e in _audit(server, demo.admin_key)}
    assert entries["answered"]["sql"] == COUNT  # it used to say "" (the log re-read 1 MB of the raw body)
    assert sorted(entries) == ["admitted", "answered"]
    for entry in entries.values():
        assert entry["sql"] == COUNT  # normalised, as the ledger charged it
        assert entry["sql_sha256"] == charge["sql_sha256"] and entry["charge_id"] == charge["id"]


# --- 2. the size of a body, and who may send one -------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/query", "/v1/query/preview"])
def test_a_request_without_a_valid_key_is_refused_before_its_body_is_read(
    server: Server, demo: DemoFiles, path: str
) -> None:
    for key in (None, "not-a-key"):
        started = time.monotonic()
        status, body = _declared_only(server, key, 50_000_000, path)  # the 50 MB never come
        assert time.monotonic() - started < RESPONSE_WITHIN_S
        _canonical(status, body, "unauthenticated")


@pytest.mark.parametrize("path", ["/v1/query", "/v1/query/preview"])
def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(
    server: Server, demo: DemoFiles, path: str
) -> None:
    status, body = _declared_only(server, demo.analyst_key, LIMIT + 1, path)
    _canonical(status, body, "payload_too_large")


def test_a_streamed_body_over_the_limit_is_refused_as_it_passes_it(server: Server, demo: DemoFiles) -> None:
    status, body, sent = _chunked(server, demo.analyst_key, b" " * 4096, most=4 * 1024 * 1024)
    _canonical(status, body, "payload_too_large")
    assert sent < 1024 * 1024  # answered while the body was still coming, not after all of it


def test_a_body_at_the_limit_is_read(server: Server, demo: DemoFiles) -> None:
    text = json.dumps({"sql": COUNT, "epsilon": 0.01})
    body = text[:-1] + " " * (LIMIT - len(text)) + "}"
    with server.client(demo.analyst_key) as client:
        response = client.post("/v1/query/preview", content=body, headers={"Content-Type": "application/json"})
    assert len(body) == LIMIT and response.status_code == 200, response.text


def test_a_streamed_body_within_the_limit_is_read(server: Server, demo: DemoFiles) -> None:
    text = json.dumps({"sql": COUNT, "epsilon": 0.01}).encode()
    pieces = iter([text[i:i + 7] for i in range(0, len(text), 7)])  # no Content-Length: chunked
    with server.client(demo.analyst_key) as client:
        response = client.post("/v1/query/preview", content=pieces, headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    assert response.request.headers.get("transfer-encoding") == "chunked"


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def _flood(port: int, size: int, stop: threading.Event, answers: list[int]) -> None:
    """One POST without a key declaring `size` bytes, sent in 1 MB pieces while the server lets it."""
    piece = b" " * (1 << 20)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as sock:
            sock.sendall(_head(port, "/v1/query", {"Content-Length": str(size)}))
            sent = 0
            while sent < size and not stop.is_set() and not select.select([sock], [], [], 0)[0]:
                sock.sendall(piece)
                sent += len(piece)
            answers.append(_response(sock)[0])
    except OSError:
        answers.append(0)  # the server stopped reading and closed: nothing buffered


def test_a_flood_of_large_bodies_without_a_key_costs_no_memory(fresh: Server) -> None:
    """8 concurrent 50 MB POSTs without a key (1.3 GB RSS before the fix): the server's RSS stays flat."""
    assert fresh._proc is not None and fresh.port is not None
    pid, before = fresh._proc.pid, _rss_bytes(fresh._proc.pid)
    stop, answers, peak = threading.Event(), [], before
    threads = [threading.Thread(target=_flood, args=(fresh.port, 50_000_000, stop, answers)) for _ in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        peak = max(peak, _rss_bytes(pid))
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert peak - before < 64 * 1024 * 1024, f"RSS grew by {(peak - before) / 2**20:.0f} MiB"
    assert set(answers) <= {401, 0} and 401 in answers


# --- 3. a request without a key costs no parsing and no storage -----------------------------------------


def test_the_sql_of_a_request_without_a_key_is_never_parsed_or_stored(fresh: Server, demo: DemoFiles) -> None:
    sql = "SELECT " + ", ".join(f"COUNT(*) AS c{i}" for i in range(1000)) + " FROM visits"  # 18 KB: 0.15 s to parse
    with fresh.client() as anonymous, fresh.client("not-a-key") as unknown:
        for client in (anonymous, unknown):
            response = client.post("/v1/query", json={"sql": sql})
            _canonical(response.status_code, response.json(), "unauthenticated")
    entries = _audit(fresh, demo.admin_key)
    assert [(e["analyst"], e["decision"], e["error_code"], e["sql"]) for e in entries] == [
        (None, "rejected", "unauthenticated", "")] * 2


# --- 4. every parse of client input is total ------------------------------------------------------------


@pytest.mark.parametrize("body", [
    '{"sql": ' + "[" * 3000 + "]" * 3000 + "}",
    "[" * 3000,
    f'{{"sql": "{COUNT}", "dataset": ' + "{\"a\": " * 3000 + "1" + "}" * 3000 + "}",
], ids=["nested-value", "nested-unclosed", "nested-objects"])
def test_deeply_nested_json_is_an_audited_invalid_request(fresh: Server, demo: DemoFiles, body: str) -> None:
    with fresh.client(demo.analyst_key) as client:
        for path in ("/v1/query", "/v1/query/preview"):
            response = client.post(path, content=body, headers={"Content-Type": "application/json"})
            _canonical(response.status_code, response.json(), "invalid_request")
    (entry,) = _audit(fresh, demo.admin_key)
    assert (entry["analyst"], entry["dataset"], entry["decision"], entry["error_code"], entry["sql"]) == (
        "analyst", "demo", "rejected", "invalid_request", "")


def test_the_audit_of_a_rejected_body_verifies(fresh: Server, demo: DemoFiles) -> None:
    with fresh.client(demo.analyst_key) as client:
        client.post("/v1/query", content="[" * 3000, headers={"Content-Type": "application/json"})
        client.post("/v1/query", json={"sql": COUNT, "epsilon": 0.1})
    with fresh.client(demo.admin_key) as admin:
        verified = admin.get("/v1/audit/verify").json()
    assert verified["ok"] is True and verified["charges"] == 1 and verified["unaudited_charges"] == []

