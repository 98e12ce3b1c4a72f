"""The PostgreSQL-protocol server: asyncio, on the HTTP app's event loop, started and stopped by its lifespan.

The listener: TLS settings checked at start, at most `DPPROXY_PG_MAX_CONNECTIONS` connections at once, the
BackendKeyData of each open connection (for CancelRequests), and one emulated catalog per dataset and analyst.
Each connection is a `proxy.wire.connection.Connection`: its start-up (proxy/wire/startup.py), the simple and
extended query protocols (proxy/wire/extended.py), its errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
from typing import Any

from proxy.settings import Settings
from proxy.wire import messages
from proxy.wire.catalog import CatalogAnswers
from proxy.wire.connection import Connection

log = logging.getLogger(__name__)


class WireMisconfigured(ValueError):
    """Settings under which the PostgreSQL protocol could accept no connection, or half of a TLS pair."""


def _tls_context(settings: Settings) -> ssl.SSLContext | None:
    if (settings.pg_tls_cert is None) != (settings.pg_tls_key is None):
        raise WireMisconfigured("DPPROXY_PG_TLS_CERT and DPPROXY_PG_TLS_KEY go together: set both or neither")
    if settings.pg_tls_cert is None or settings.pg_tls_key is None:
        if not settings.pg_allow_plaintext_loopback:
            raise WireMisconfigured(
                "DPPROXY_PG_PORT is set, but without DPPROXY_PG_TLS_CERT and DPPROXY_PG_TLS_KEY every connection "
                "would be refused: set them, or DPPROXY_PG_ALLOW_PLAINTEXT_LOOPBACK=true for loopback clients")
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(settings.pg_tls_cert), str(settings.pg_tls_key))
    return context


class WireServer:
    """The listener; `start()` binds it, `stop()` closes it and every open connection."""

    def __init__(self, app_state: Any, settings: Settings) -> None:
        self.app_state = app_state
        self.settings = settings
        self.tls = _tls_context(settings)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._catalogs: dict[tuple[str, str], CatalogAnswers] = {}
        self.keys: dict[tuple[int, int], Connection] = {}  # BackendKeyData -> its connection, while it is open
        self.serials = itertools.count()  # with the sampler's salt: distinct secrets, however the sampler draws

    async def start(self) -> None:
        assert self.settings.pg_port is not None
        # `serve --workers N`: every process listens on the port, the kernel spreads connections over them
        self._server = await asyncio.start_server(self._accept, self.settings.host, self.settings.pg_port,
                                                  reuse_port=self.settings.workers > 1 or None)
        log.info("PostgreSQL protocol on %s:%s (TLS %s)", self.settings.host, self.settings.pg_port,
                 "on" if self.tls else "off: plaintext for loopback peers only")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
        for catalog in self._catalogs.values():
            catalog.close()

    def catalog(self, dataset: str, user: str) -> CatalogAnswers:
        """The emulated catalog of one dataset for one analyst (built once, from the policy)."""
        key = (dataset, user)
        if key not in self._catalogs:
            found = self.app_state.env.policy.dataset(dataset)
            self._catalogs[key] = CatalogAnswers(found.catalog, dataset, user)
        return self._catalogs[key]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self.settings.pg_max_connections:  # as PostgreSQL's max_connections
            with contextlib.suppress(Exception):
                writer.write(messages.error_response(
                    "53300", "rate_limited: sorry, too many clients already", "code=rate_limited; charged=false",
                    f"this server takes {self.settings.pg_max_connections} connections (DPPROXY_PG_MAX_CONNECTIONS)",
                    severity="FATAL"))
                await writer.drain()
                writer.close()
            return
        self._connections.add(task)
        try:
            await Connection(self, reader, writer).run()
        finally:
            self._connections.discard(task)
