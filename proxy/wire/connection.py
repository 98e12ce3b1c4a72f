"""One PostgreSQL-protocol connection: its framing, its start-up (proxy/wire/startup.py), the simple query
protocol, the extended one (proxy/wire/extended.py) and its errors. Each statement is answered by the session
(proxy/wire/session.py); errors are ErrorResponses with a SQLSTATE, the product's error code first in the
message, and the connection kept, except where PostgreSQL closes it too (start-up and authentication
failures, a malformed message). A CancelRequest naming the connection (`cancel`) cancels the data query it is
answering.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.settings import Settings
from proxy.wire import answers, messages, pgtypes
from proxy.wire.catalog import CatalogAnswers
from proxy.wire.errors import error_message
from proxy.wire.extended import Extended, Portal, Statement
from proxy.wire.messages import Column, ProtocolViolation
from proxy.wire.session import Command, Session, WireError
from proxy.wire.startup import StartUp

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 30.0  # from connecting to ReadyForQuery: TLS, the startup packet, the password
STARTUP_MAX_BYTES = 10_000  # the startup packet's largest size (PostgreSQL's limit)


class Host(Protocol):
    """What a connection reads of its listener (proxy/wire/server.py `WireServer`)."""

    app_state: Any
    settings: Settings
    tls: ssl.SSLContext | None
    keys: dict[tuple[int, int], Connection]
    serials: Any

    def catalog(self, dataset: str, user: str) -> CatalogAnswers: ...


@dataclass(slots=True)
class Connection(StartUp, Extended):
    server: Host
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

    # errors ----------------------------------------------------------------------------------------------------

    def _error(self, err: Exception) -> None:
        self.send(error_message(err))

