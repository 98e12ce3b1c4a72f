"""`dpproxy serve` on httptools (proxy/http/protocol.py): a method httptools cannot parse still reaches the app
and gets the JSON 405, on a new connection and on one that already served a request; malformed requests
still get a 400; the server runs the stack it was asked for."""

from __future__ import annotations

import json
import socket

from proxy.__main__ import protocol_stack
from tests.support.live import Server


def exchange(sock: socket.socket, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `request` and read one whole response (by its Content-Length); (status, headers, body)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(status_line.split()[1]), headers, body


def connect(server: Server) -> socket.socket:
    assert server.port is not None
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def test_an_unknown_method_on_a_new_connection_is_the_json_405(server: Server) -> None:
    with connect(server) as sock:
        status, headers, body = exchange(sock, b"M000042XYZ /v1/budget HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 405
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["code"] == "method_not_allowed"
    assert len(headers["x-request-id"]) == 32  # through Observe, as every response of the app


def test_an_unknown_method_after_a_request_on_the_same_connection_is_the_json_405(server: Server) -> None:
    with connect(server) as sock:
        first = exchange(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        second = exchange(sock, b"PURGEX /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        third = exchange(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # the connection goes on
    assert (first[0], json.loads(first[2])) == (200, {"ok": True})
    assert (second[0], json.loads(second[2])["code"]) == (405, "method_not_allowed")
    assert (third[0], json.loads(third[2])) == (200, {"ok": True})


def test_a_malformed_request_is_still_a_400(server: Server) -> None:
    with connect(server) as sock:
        status, _, _ = exchange(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n")
    assert status == 400


def test_serve_defaults_to_httptools_and_uvloop() -> None:
    assert protocol_stack(None, None) == ("httptools", "uvloop")  # both are dependencies (pyproject.toml)
    assert protocol_stack("h11", None) == ("h11", "uvloop")
