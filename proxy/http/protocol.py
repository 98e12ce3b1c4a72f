"""uvicorn's httptools protocol, with h11 for a request whose method httptools cannot parse.

httptools (llhttp) parses a fixed list of methods and refuses any other with a plain-text 400 before the app
sees it, where h11 hands every token to the app, which answers the documented JSON 405 `method_not_allowed`
(docs/errors.md), counted under the method label "other" (proxy/http/middleware/access_log.py). So when the
request that fails
is an unknown method at the start of a connection's next request (nothing else of it parsed, no response
pending), the connection is handed to uvicorn's h11 protocol with the bytes received, as uvicorn hands a
WebSocket upgrade on: the app answers it as before, and the connection stays on h11 until it closes (uvicorn
has already logged its warning "Invalid HTTP request received." by then). Any other parse error keeps
httptools' 400, as h11 answers malformed requests too; so does an unknown method that arrives split over two
reads or pipelined behind another request on the same read (rare: clients send a request line in one write).
"""

from __future__ import annotations

import sys

import httptools
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class HttpToolsWithH11Methods(HttpToolsProtocol):
    """HttpToolsProtocol; an unknown method on an idle connection goes to H11Protocol (module docstring)."""

    _begun = 0  # messages whose parsing began on this connection
    _complete = 0  # messages parsed in full
    _fresh: bytes | None = None  # the data being fed, when it starts a request on an idle connection
    _fed_at = 0  # _begun when that data came

    def on_message_begin(self) -> None:
        self._begun += 1
        super().on_message_begin()

    def on_message_complete(self) -> None:
        self._complete += 1
        super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        idle = self._begun == self._complete and not self.pipeline and (
            self.cycle is None or self.cycle.response_complete)
        self._fresh, self._fed_at = (data if idle else None), self._begun
        try:
            super().data_received(data)
        finally:
            self._fresh = None

    def send_400_response(self, msg: str) -> None:
        # called by data_received's `except httptools.HttpParserError`: the exception is the one being handled
        fresh = self._fresh
        if (fresh is not None and self._complete == self._fed_at and self._begun <= self._fed_at + 1
                and isinstance(sys.exception(), httptools.HttpParserInvalidMethodError)):
            self._to_h11(fresh)
            return
        super().send_400_response(msg)

    def _to_h11(self, data: bytes) -> None:
        """Hand the connection, and `data` (its next request from its first byte), to uvicorn's h11 protocol."""
        self.connections.discard(self)
        protocol = H11Protocol(config=self.config, server_state=self.server_state, app_state=self.app_state,
                               _loop=self.loop)
        protocol.connection_made(self.transport)
        self.transport.set_protocol(protocol)
        protocol.data_received(data)
