"""HTTP hygiene on a live server (issue #11, findings 5, 8, 9 and the minor ones): bounded metric labels,
`Cache-Control: no-store` on every /v1/* response, opt-in interactive docs under a strict CSP, no route by
an encoded slash, no redirect built from the Host header, HEAD on GET routes, no `server` header."""

from __future__ import annotations

import base64
import hashlib
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.cli.demo import DemoFiles
from tests.support.live import Server, policy_copy

SQL = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"
KNOWN_METHODS = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "other"}


def raw_get(server: Server, target: str, host: str = "127.0.0.1") -> tuple[int, dict[str, str], bytes]:
    """One GET of `target` exactly as written (no client normalises it); (status, headers, body)."""
    assert server.port is not None
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


# --- finding 5: invented HTTP methods ----------------------------------------------------------------------


def test_invented_methods_do_not_add_metric_series(server: Server, analyst: httpx.Client,
                                                   admin: httpx.Client) -> None:
    for i in range(40):
        response = analyst.request(f"M{i:06d}XYZ", "/v1/budget")
        assert response.status_code == 405
        assert response.json()["code"] == "method_not_allowed"
    scraped = admin.get("/metrics")
    assert scraped.status_code == 200
    methods = {
        s.labels["method"]
        for family in text_string_to_metric_families(scraped.text)
        for s in family.samples if "method" in s.labels
    }
    assert "other" in methods
    assert methods <= KNOWN_METHODS, sorted(methods - KNOWN_METHODS)[:5]


# --- finding 9: Cache-Control: no-store on /v1/* -----------------------------------------------------------


def test_every_v1_response_says_no_store(server: Server, analyst: httpx.Client, admin: httpx.Client) -> None:
    responses = {
        "budget": analyst.get("/v1/budget"),
        "datasets": analyst.get("/v1/datasets"),
        "ledger": admin.get("/v1/ledger"),
        "audit": admin.get("/v1/audit"),
        "query": analyst.post("/v1/query", json={"sql": SQL, "epsilon": 0.01}),
        "preview": analyst.post("/v1/query/preview", json={"sql": SQL}),
        "unsupported query": analyst.post("/v1/query", json={"sql": "SELECT * FROM visits"}),
        "no key": httpx.get(f"{server.base_url}/v1/budget"),
        "forbidden ledger": analyst.get("/v1/ledger"),
        "unknown /v1 route": analyst.get("/v1/nothing"),
        "invalid body": analyst.post("/v1/query", content=b"{"),
    }
    statuses = {name: r.status_code for name, r in responses.items()}
    assert statuses == {"budget": 200, "datasets": 200, "ledger": 200, "audit": 200, "query": 200, "preview": 200,
                        "unsupported query": 400, "no key": 401, "forbidden ledger": 403, "unknown /v1 route": 404,
                        "invalid body": 400}
    assert {name: r.headers.get("cache-control") for name, r in responses.items()} == {
        name: "no-store" for name in responses
    }


# --- finding 8: interactive docs ---------------------------------------------------------------------------


def test_interactive_docs_are_off_by_default_and_the_schema_stays(analyst: httpx.Client) -> None:
    assert analyst.get("/docs").status_code == 404
    assert analyst.get("/redoc").status_code == 404
    assert analyst.get("/docs/oauth2-redirect").status_code == 404
    assert analyst.get("/openapi.json").json()["info"]["title"] == "dp-proxy"


@pytest.fixture(scope="module")
def with_docs(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("with-docs")
    server = Server(directory / "server.log", settings={"DPPROXY_INTERACTIVE_DOCS": "true"})
    server.start(policy_copy(demo, directory))
    try:
        yield server
    finally:
        server.stop()


def _sources(csp: str, directive: str) -> list[str]:
    (found,) = [d.split()[1:] for d in csp.split(";") if d.split() and d.split()[0] == directive]
    return found


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_interactive_docs_when_on_run_only_pinned_scripts(with_docs: Server, path: str) -> None:
    page = httpx.get(f"{with_docs.base_url}{path}")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "base-uri 'none'" in csp
    allowed = _sources(csp, "script-src")
    assert "'unsafe-inline'" not in allowed and "'unsafe-eval'" not in allowed
    assert not any("*" in s or s.endswith("/") or s in ("https:", "http:") for s in allowed), allowed
    external = re.findall(r'<script src="([^"]+)"', page.text)
    assert external and all(src in allowed for src in external)
    assert all(re.search(r"@\d+\.\d+\.\d+/", src) for src in external), external  # pinned, not @5
    for inline in re.findall(r"<script>(.*?)</script>", page.text, re.DOTALL):
        digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in allowed
    assert _sources(csp, "connect-src") == ["'self'"]
    assert httpx.get(f"{with_docs.base_url}/openapi.json").status_code == 200


# --- minor findings ----------------------------------------------------------------------------------------


def test_an_encoded_slash_is_not_a_route(server: Server, demo: DemoFiles) -> None:
    assert raw_get(server, "/v1/datasets")[0] == 401  # the plain spelling is a route (no key here)
    for target in ("/v1%2fledger", "/v1%2Fdatasets", "/v1%5cbudget"):
        status, _, body = raw_get(server, target)
        assert status == 404, target
        assert b'"code":"not_found"' in body.replace(b" ", b"")


def test_a_trailing_slash_is_not_redirected_to_the_host_header(server: Server) -> None:
    status, headers, _ = raw_get(server, "/v1/budget/", host="attacker.example")
    assert status == 404
    assert "location" not in headers


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/openapi.json", "/v1/datasets", "/v1/budget"])
def test_head_answers_every_get_route_without_a_body(server: Server, demo: DemoFiles, path: str) -> None:
    key = {"Authorization": f"Bearer {demo.analyst_key}"}
    get = httpx.get(f"{server.base_url}{path}", headers=key)
    head = httpx.head(f"{server.base_url}{path}", headers=key)
    assert (head.status_code, get.status_code) == (200, 200)
    assert head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]


def test_head_on_a_post_route_is_still_not_allowed(analyst: httpx.Client) -> None:
    response = analyst.head("/v1/query")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


def test_responses_do_not_name_the_server_software(server: Server) -> None:
    assert "server" not in httpx.get(f"{server.base_url}/healthz").headers
    assert "server" not in raw_get(server, "/nothing")[1]


def test_the_docs_list_the_docs_setting() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "policy.md").read_text()
    assert "`DPPROXY_INTERACTIVE_DOCS`" in text
