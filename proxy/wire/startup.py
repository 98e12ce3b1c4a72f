"""A connection's start-up, as PostgreSQL's: optional TLS (SSLRequest; GSSENCRequest refused), a CancelRequest
(no reply), the startup packet (user = the analyst's name, database = the dataset), a cleartext password (the
analyst's API key, checked by hash as HTTP's bearer key is), the ParameterStatus values clients read, and the
BackendKeyData (this process's id and a random secret) that a CancelRequest names the connection by. A
connection without TLS is refused unless the operator allowed plaintext for loopback peers
(`DPPROXY_PG_ALLOW_PLAINTEXT_LOOPBACK`) and the peer is loopback.

`StartUp` is a part of `proxy.wire.connection.Connection` (a mixin, split off so that each module has one
job): it uses the connection's `server`, `writer`, `session`, `tls`, `key`, `send`, `_read`, `_read_startup`
and `_fatal`.
"""

from __future__ import annotations

import ipaddress
import os
from typing import Any

from proxy.policy import access as auth
from proxy.policy.load import AnalystPolicy
from proxy.wire import messages
from proxy.wire.catalog import SERVER_VERSION
from proxy.wire.messages import ProtocolViolation
from proxy.wire.session import Session


class StartUp:
    """From the first byte to ReadyForQuery, on the connection that mixes this in."""

    __slots__ = ()
    server: Any
    writer: Any
    session: Session | None
    tls: bool
    key: tuple[int, int] | None

    async def _start(self) -> bool:
        startup = await self._read_startup()
        while isinstance(startup, messages.SSLRequest | messages.GSSENCRequest):
            if isinstance(startup, messages.SSLRequest) and self.server.tls is not None and not self.tls:
                self.send(messages.ssl_accepted())
                await self.writer.drain()
                await self.writer.start_tls(self.server.tls)
                self.tls = True
            else:
                self.send(messages.ssl_refused())
                await self.writer.drain()
            startup = await self._read_startup()
        if isinstance(startup, messages.CancelRequest):  # as PostgreSQL: no reply, the connection closed
            target = self.server.keys.get((startup.process_id, startup.secret))
            if target is not None:
                target.cancel()
            return False
        assert isinstance(startup, messages.Startup)
        if startup.version >> 16 != 3:
            await self._fatal("0A000", "unsupported", f"unsupported frontend protocol {startup.version >> 16}."
                              f"{startup.version & 0xFFFF}: this server speaks 3.0")
            return False
        if not self.tls and not self._plaintext_allowed():
            await self._fatal("28000", "unauthenticated", "this server requires TLS (sslmode=require)",
                              "connect with sslmode=require; plaintext is accepted only from loopback when the "
                              "operator allows it (DPPROXY_PG_ALLOW_PLAINTEXT_LOOPBACK)")
            return False
        user = startup.parameters.get("user", "")
        self.send(messages.authentication_cleartext())
        await self.writer.drain()
        password = await self._read()
        if not isinstance(password, messages.Password):
            raise ProtocolViolation("expected a password message")
        analyst = self._authenticate(password.password, user)
        if analyst is None:
            await self._fatal("28P01", "unauthenticated", f'password authentication failed for user "{user}"',
                              "the user is your analyst name and the password your API key")
            return False
        database = startup.parameters.get("database") or ""
        requested = None if database in ("", user) and analyst.budget(database) is None else database
        try:
            dataset, _ = auth.dataset_for(analyst, requested)
        except auth.AuthError as err:
            await self._fatal("3D000", err.code, f'database "{database}" is not a dataset you may query: {err}',
                              "the database name is the dataset's")
            return False
        self.session = Session(self.server.app_state.env, analyst, dataset, self.server.catalog(dataset, analyst.name))
        self.send(messages.authentication_ok())
        for name, value in (("server_version", SERVER_VERSION), ("server_encoding", "UTF8"),
                            ("client_encoding", "UTF8"), ("DateStyle", "ISO, MDY"), ("TimeZone", "UTC"),
                            ("integer_datetimes", "on"), ("standard_conforming_strings", "on"),
                            ("IntervalStyle", "postgres"), ("is_superuser", "off"),
                            ("session_authorization", analyst.name), ("default_transaction_read_only", "on"),
                            ("in_hot_standby", "off"),
                            ("application_name", startup.parameters.get("application_name", ""))):
            self.send(messages.parameter_status(name, value))
        # this process's id (read now: `serve --workers` forks) and a secret no other client can guess (the OS
        # CSPRNG, through the one sampler: mechanisms/sampling.py)
        salt = self.server.app_state.env.sampler.salt()
        self.key = (os.getpid() % (1 << 31), 0)
        while self.key[1] == 0 or self.key in self.server.keys:
            self.key = (self.key[0], (salt + next(self.server.serials)) % (1 << 31))
        self.server.keys[self.key] = self
        self.send(messages.backend_key_data(*self.key))
        self.send(messages.ready_for_query("I"))
        await self.writer.drain()
        return True

    def _plaintext_allowed(self) -> bool:
        if not self.server.settings.pg_allow_plaintext_loopback:
            return False
        peer = self.writer.get_extra_info("peername")
        try:
            return peer is not None and ipaddress.ip_address(peer[0]).is_loopback
        except ValueError:
            return False

    def _authenticate(self, key: str, user: str) -> AnalystPolicy | None:
        try:
            analyst = auth.authenticate(f"Bearer {key}", self.server.app_state.env.policy)
        except auth.AuthError:
            return None
        return analyst if user in ("", analyst.name) else None
