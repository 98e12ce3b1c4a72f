"""The PostgreSQL-protocol server: asyncio, on the HTTP app's event loop, started and stopped by its lifespan.

A connection: optional TLS (SSLRequest), the startup packet (user = the analyst's name, database = the
dataset), a cleartext password (the analyst's API key, checked by hash as HTTP's bearer key is), then the
simple and extended query protocols. A connection without TLS is refused unless the operator allowed
plaintext for loopback peers (`DPPROXY_PG_ALLOW_PLAINTEXT_LOOPBACK`) and the peer is loopback. The
BackendKeyData sent at start-up (this process's id and a random secret) identifies the connection: a
CancelRequest bearing it, on a connection of its own, cancels the query the connection is running. Each statement
is answered by the session (proxy/wire/session.py); errors are ErrorResponses with a SQLSTATE, the product's
error code first in the message, and the connection kept, except where PostgreSQL closes it too (start-up
and authentication failures, a malformed message).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import itertools
import logging
import os
import ssl
from dataclasses import dataclass, field
from typing import Any

from proxy.policy import access as auth
from proxy.policy.load import AnalystPolicy
from proxy.query.wire_sql import bind, parameter_columns, parameter_count
from proxy.settings import Settings
from proxy.wire import answers, messages, pgtypes
from proxy.wire.catalog import SERVER_VERSION, CatalogAnswers
from proxy.wire.errors import error_message
from proxy.wire.messages import Column, ProtocolViolation
from proxy.wire.session import Command, Session, WireError

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 30.0  # from connecting to ReadyForQuery: TLS, the startup packet, the password
STARTUP_MAX_BYTES = 10_000  # the startup packet's largest size (PostgreSQL's limit)


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


@dataclass(slots=True)
class Statement:
    sql: str  # without its dp comment
    options: dict[str, Any]
    kind: str
    parameter_types: tuple[int, ...]


@dataclass(slots=True)
class Portal:
    statement: Statement
    sql: str  # parameters bound
    result_formats: tuple[int, ...]
    result: answers.Result | Command | None = None  # computed at Describe (catalog, SHOW) or Execute
    sent: int = 0  # rows already sent (Execute with a row limit)
    columns: tuple[Column, ...] | None = None


@dataclass(slots=True)
class Connection:
    server: WireServer
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    session: Session | None = None
    tls: bool = False
    key: tuple[int, int] | None = None  # the BackendKeyData sent at start-up
    running: answers.Cancel | None = None  # the cancel of the data query being answered, if any
    statements: dict[str, Statement] = field(default_factory=dict)
    portals: dict[str, Portal] = field(default_factory=dict)
    failed: bool = False  # an error in the extended protocol: skip to Sync

    # framing ---------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            started = await asyncio.wait_for(self._start(), STARTUP_TIMEOUT_S)  # no half-open connection lingers
            if started:
                await self._serve()
        except TimeoutError:
            with contextlib.suppress(Exception):
                await self._fatal("08006", "unauthenticated", "the connection did not authenticate in time")
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass  # the client went away
        except ProtocolViolation as err:
            await self._fatal("08P01", "protocol_violation", str(err))
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await self._fatal("57P01", "unavailable", "the server is shutting down")
            raise
        finally:
            if self.key is not None:
                self.server.keys.pop(self.key, None)
            with contextlib.suppress(Exception):
                self.writer.close()

    def cancel(self) -> None:
        """A CancelRequest for this connection: the data query it is answering, if any, is cancelled. Not on
        a dataset whose answers leave at a fixed time (`answer_time = "padded"`): whether a cancel came before
        the work was done would tell its running time, which the padding hides; its answer leaves on time."""
        if self.running is None or self.session is None:
            return
        dataset = self.session.env.policy.dataset(self.session.dataset)
        if dataset is not None and dataset.answer_time == "padded":
            log.info("a CancelRequest on a padded dataset is ignored: its answer leaves at its fixed time")
            return
        self.running.request()

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def _read_startup(self) -> messages.Message:
        length = messages.frame_length(await self.reader.readexactly(4))
        if length > STARTUP_MAX_BYTES:
            raise ProtocolViolation(f"a startup packet of {length} bytes")
        return messages.decode_startup(await self.reader.readexactly(length))

    async def _read(self) -> messages.Message:
        header = await self.reader.readexactly(5)
        body = await self.reader.readexactly(messages.frame_length(header[1:]))
        return messages.decode(header[:1], body)

    async def _fatal(self, sqlstate: str, code: str, message: str, hint: str | None = None) -> None:
        self.send(messages.error_response(sqlstate, f"{code}: {message}", f"code={code}; charged=false", hint,
                                          severity="FATAL"))
        await self.writer.drain()

    # start-up --------------------------------------------------------------------------------------------------

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

    # the protocols ---------------------------------------------------------------------------------------------

    async def _serve(self) -> None:
        while True:
            message = await self._read()
            if isinstance(message, messages.Terminate):
                return
            if self.failed and not isinstance(message, messages.Sync):
                continue  # after an error in the extended protocol, everything up to Sync is skipped
            match message:
                case messages.Query(sql=sql):
                    await self._simple(sql)
                case messages.Parse() | messages.Bind() | messages.Describe() | messages.Execute() | messages.Close():
                    try:
                        await self._extended(message)
                    except Exception as err:  # one error, then skip to Sync
                        self._error(err)
                        self.failed = True
                case messages.Sync():
                    self.failed = False
                    self._ready()
                case messages.Flush():
                    pass
                case messages.Unsupported(tag="F"):
                    self._error(WireError("0A000", "unsupported", "the function call protocol is not supported"))
                    self._ready()
                case messages.Unsupported(tag="d" | "c" | "f"):
                    pass  # CopyData, CopyDone, CopyFail outside COPY: ignored, as PostgreSQL does
                case messages.Unsupported(tag=tag):
                    raise ProtocolViolation(f"invalid frontend message type {tag!r}")
                case _:
                    raise ProtocolViolation(f"unexpected message {type(message).__name__}")
            await self.writer.drain()

    def _ready(self) -> None:
        assert self.session is not None
        self.send(messages.ready_for_query("T" if self.session.in_transaction else "I"))

    async def _simple(self, sql: str) -> None:
        assert self.session is not None
        try:
            kind, rest, options = self.session.kind(sql)
            if kind == "empty":
                self.send(messages.empty_query_response())
            else:
                outcome = await self._run(kind, rest, options)
                if isinstance(outcome, answers.Result):
                    for text in outcome.notices:
                        self.send(messages.notice_response(text))
                    self.send(messages.row_description(outcome.columns))
                    self._rows(outcome, (), 0, 0)
                else:
                    self.send(messages.command_complete(outcome.tag))
        except Exception as err:
            self._error(err)
        self._ready()

    async def _run(self, kind: str, sql: str, options: dict[str, Any]) -> answers.Result | Command:
        session = self.session
        assert session is not None
        if kind == "command":
            return session.command(sql)
        if kind == "catalog":
            return await self._catalog(sql)
        if kind == "explain":
            request = session.request(sql, options)
            return await asyncio.to_thread(answers.explain, request, session.analyst, session.env)
        self.running = answers.Cancel()
        try:
            result = await answers.answer(self.server.app_state, session.request(sql, options), session.analyst,
                                          self.running)
        finally:
            self.running = None
        session.remember(result)
        return result

    async def _catalog(self, sql: str) -> answers.Result:
        assert self.session is not None
        log.debug("catalog query", extra={"sql": sql[:8000]})
        session = self.session
        names, oids, rows = await asyncio.to_thread(lambda: session.catalog.run_duckdb(session.catalog_sql(sql)))
        columns = tuple(Column(n, o, pgtypes.size_of(o)) for n, o in zip(names, oids, strict=True))
        return answers.Result(columns, rows, f"SELECT {len(rows)}")

    def _rows(self, result: answers.Result, formats: tuple[int, ...], start: int, limit: int,
              columns: tuple[Column, ...] | None = None) -> int:
        """DataRows from `start` (at most `limit`, 0: all), each value as `columns` (default: the result's)
        say, then CommandComplete or PortalSuspended."""
        end = len(result.rows) if limit <= 0 else min(len(result.rows), start + limit)
        shown = columns if columns is not None and len(columns) == len(result.columns) else result.columns
        for row in result.rows[start:end]:
            self.send(messages.data_row([pgtypes.encode(v, c.type_oid, messages.result_format(formats, i))
                                         for i, (v, c) in enumerate(zip(row, shown, strict=True))]))
        if end < len(result.rows):
            self.send(messages.portal_suspended())
        else:
            self.send(messages.command_complete(result.tag if result.tag != "SELECT" else f"SELECT {end}"))
        return end

    async def _extended(self, message: messages.Message) -> None:
        session = self.session
        assert session is not None
        match message:
            case messages.Parse(statement=name, sql=sql, parameter_types=types):
                kind, rest, options = session.kind(sql)
                count = parameter_count(rest) if kind in ("catalog", "query", "explain") else 0
                inferred = self._parameter_types(rest) if count else {}
                full = tuple(types[i] if i < len(types) and types[i] else inferred.get(i + 1, pgtypes.TEXT)
                             for i in range(count))
                self.statements[name] = Statement(rest, options, kind, full)
                self.send(messages.parse_complete())
            case messages.Bind(portal=portal, statement=name):
                statement = self._statement(name)
                values = [None if raw is None else pgtypes.decode(raw, statement.parameter_types[i]
                                                                  if i < len(statement.parameter_types) else 0,
                                                                  messages.result_format(message.parameter_formats, i))
                          for i, raw in enumerate(message.parameters)]
                bound = statement.kind in ("catalog", "query", "explain")
                sql = bind(statement.sql, values) if bound else statement.sql
                self.portals[portal] = Portal(statement, sql, message.result_formats)
                self.send(messages.bind_complete())
            case messages.Describe(kind="S", name=name):
                statement = self._statement(name)
                self.send(messages.parameter_description(statement.parameter_types))
                dummy = Portal(statement, self._placeholder_sql(statement), ())
                await self._describe(dummy)
            case messages.Describe(kind="P", name=name):
                await self._describe(self._portal(name))
            case messages.Execute(portal=name, max_rows=limit):
                portal = self._portal(name)
                if portal.statement.kind == "empty":
                    self.send(messages.empty_query_response())
                    return
                if portal.result is None or portal.result is _DESCRIBED:  # run once; a suspended portal goes on
                    portal.result = await self._run(portal.statement.kind, portal.sql, portal.statement.options)
                result = portal.result
                if isinstance(result, Command):
                    self.send(messages.command_complete(result.tag))
                    return
                assert isinstance(result, answers.Result)
                if portal.sent == 0:
                    for text in result.notices:
                        self.send(messages.notice_response(text))
                # sent as described (a column typed by its values is described before there are any: as text)
                portal.sent = self._rows(result, portal.result_formats, portal.sent, limit, portal.columns)
            case messages.Close(kind=kind, name=name):
                (self.statements if kind == "S" else self.portals).pop(name, None)
                self.send(messages.close_complete())

    async def _describe(self, portal: Portal) -> None:
        """RowDescription (or NoData) for a portal, without charging or reading data: a data query's columns
        come from its plan; a catalog query or SHOW is answered now (it reads only the policy), and kept."""
        session = self.session
        assert session is not None
        statement = portal.statement
        if statement.kind == "query":
            request = session.request(portal.sql, statement.options)
            portal.columns = await asyncio.to_thread(answers.describe, request, session.analyst, session.env)
            portal.result = _DESCRIBED
        elif statement.kind == "explain":  # one text column; the plan itself is made at Execute
            portal.columns = (Column("QUERY PLAN", pgtypes.TEXT),)
        elif statement.kind == "catalog" or (statement.kind == "command"
                                             and statement.sql.lstrip().upper().startswith("SHOW")):
            result = await self._catalog(portal.sql) if statement.kind == "catalog" else session.command(portal.sql)
            portal.result = result
            portal.columns = result.columns if isinstance(result, answers.Result) else None
        if portal.columns is None:
            self.send(messages.no_data())
        else:
            self.send(messages.row_description(portal.columns, portal.result_formats))

    def _parameter_types(self, sql: str) -> dict[int, int]:
        """The OID of each `$n` the client left unspecified, from the declared type of the column it is compared
        with (the dataset's tables), so that drivers which encode by type (asyncpg) send it right."""
        assert self.session is not None
        dataset = self.session.env.policy.dataset(self.session.dataset)
        declared: dict[str, str] = {}
        if dataset is not None:
            for table in (*dataset.catalog.tables, *dataset.catalog.public):
                for column in table.columns:
                    declared.setdefault(column.name.lower(), column.type)
        return {n: pgtypes.oid_of(declared[name]) for n, name in parameter_columns(sql).items() if name in declared}

    def _placeholder_sql(self, statement: Statement) -> str:
        """A statement's SQL with typed placeholders for its parameters, to describe it before Bind."""
        if not statement.parameter_types or statement.kind not in ("catalog", "query", "explain"):
            return statement.sql
        samples: dict[int, object] = {pgtypes.INT2: 0, pgtypes.INT4: 0, pgtypes.INT8: 0, pgtypes.FLOAT8: 0.0,
                                      pgtypes.FLOAT4: 0.0, pgtypes.BOOL: False, pgtypes.DATE: datetime.date(2000, 1, 1)}
        return bind(statement.sql, [samples.get(t, "") for t in statement.parameter_types])

    def _statement(self, name: str) -> Statement:
        if name not in self.statements:
            raise WireError("26000", "invalid_request", f'prepared statement "{name}" does not exist')
        return self.statements[name]

    def _portal(self, name: str) -> Portal:
        if name not in self.portals:
            raise WireError("34000", "invalid_request", f'portal "{name}" does not exist')
        return self.portals[name]

    # errors ----------------------------------------------------------------------------------------------------

    def _error(self, err: Exception) -> None:
        self.send(error_message(err))


_DESCRIBED = Command("DESCRIBED")  # a data query's portal described from its plan, not yet run
