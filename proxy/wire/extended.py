"""The extended query protocol of one connection (Parse, Bind, Describe, Execute, Close): prepared statements,
portals, bind parameters substituted as typed literals (proxy/query/wire_sql.py `bind`), and Describe, which
never charges and never reads data (a data query's columns come from its plan).

`Extended` is a part of `proxy.wire.connection.Connection` (a mixin, split off so that each module has one
job): it uses the connection's `session`, `statements`, `portals`, `send`, `_run`, `_catalog` and `_rows`.
"""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass
from typing import Any

from proxy.query.wire_sql import bind, parameter_columns, parameter_count
from proxy.wire import answers, messages, pgtypes
from proxy.wire.messages import Column
from proxy.wire.session import Command, WireError


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


_DESCRIBED = Command("DESCRIBED")  # a data query's portal described from its plan, not yet run


class Extended:
    """Parse, Bind, Describe, Execute and Close, on the connection that mixes this in."""

    __slots__ = ()
    session: Any
    statements: dict[str, Statement]
    portals: dict[str, Portal]

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
