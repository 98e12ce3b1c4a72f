"""CancelRequest and current_setting() over the PostgreSQL protocol.

The cancel's three moments are driven through the real query pool and deadline with a stand-in for the
pipeline's work that waits where it is told (a real query on the demo data finishes in milliseconds): before
the work reaches a thread (refused, nothing charged), after admission (the charged cancel, at once, and the
thread's answer is never delivered), after delivery (the answer). Then real clients: psycopg's cancel, a
cancel with a wrong key, and current_setting() of the session's dp settings inside catalog queries."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest

from proxy.engines.base import ExecutionTimeout
from proxy.run.deadline import Deadline
from proxy.run.query_pool import QueryRunner
from proxy.wire.answers import Cancel, QueryCancelled, _run
from tests.wire.test_clients import Wire, connect, wire  # noqa: F401  (`wire`: the module's server)

WAIT_S = 30.0


class Stand:
    """The pipeline's work as the cancel sees it: `admit` (state.charged, the deadline's clock started), wait
    for `go`, then `deliver`; what happened is kept."""

    def __init__(self, state: Any) -> None:
        self.state, self.admitted, self.go, self.ran = state, threading.Event(), threading.Event(), threading.Event()
        self.delivered: bool | None = None

    def __call__(self, deadline: Deadline) -> str:
        self.ran.set()
        self.state.charged = True  # the admit's on_admitted: from here on every failure reports charged
        deadline.start()
        self.admitted.set()
        assert self.go.wait(WAIT_S)
        try:
            deadline.deliver()
        except ExecutionTimeout:
            self.delivered = False
            raise
        self.delivered = True
        return "answer"


def app(runner: QueryRunner) -> Any:
    return SimpleNamespace(runner=runner, env=SimpleNamespace(settings=SimpleNamespace(query_timeout_s=WAIT_S)))


def run(scenario: Callable[[QueryRunner], Any]) -> Any:
    runner = QueryRunner(2)
    try:
        return asyncio.run(asyncio.wait_for(scenario(runner), WAIT_S))
    finally:
        runner.close()


def test_a_cancel_after_admission_ends_the_query_at_once_charged_and_releases_nothing() -> None:
    async def scenario(runner: QueryRunner) -> tuple[Any, Stand]:
        state, cancel = SimpleNamespace(charged=False), Cancel()
        work = Stand(state)
        task = asyncio.ensure_future(_run(app(runner), SimpleNamespace(name="ana"), work, state, cancel))
        assert await asyncio.to_thread(work.admitted.wait, WAIT_S)
        cancel.request()
        with pytest.raises(QueryCancelled) as ended:
            await task  # at once: the thread is still waiting
        assert not work.go.is_set() and state.charged
        work.go.set()  # the thread goes on to deliver; run() waits for it (QueryRunner.close)
        return ended.value, work

    ended, work = run(scenario)
    assert ended.code == "timeout" and "user request" in str(ended)
    assert work.delivered is False  # the deadline refused the thread's answer: never released nor stored


def test_a_cancel_before_the_work_reaches_a_thread_runs_nothing() -> None:
    async def scenario(runner: QueryRunner) -> tuple[Stand, Stand]:
        first_state, other_state, second_state = (SimpleNamespace(charged=False) for _ in range(3))
        first, other, second = Stand(first_state), Stand(other_state), Stand(second_state)
        ana = SimpleNamespace(name="ana")  # an analyst alone runs on both workers (lent): the third waits
        busy = asyncio.ensure_future(_run(app(runner), ana, first, first_state, None))
        busy_too = asyncio.ensure_future(_run(app(runner), ana, other, other_state, None))
        assert await asyncio.to_thread(first.admitted.wait, WAIT_S)
        assert await asyncio.to_thread(other.admitted.wait, WAIT_S)
        cancel = Cancel()
        waiting = asyncio.ensure_future(_run(app(runner), ana, second, second_state, cancel))
        await asyncio.sleep(0.05)
        cancel.request()
        first.go.set()
        other.go.set()
        assert await busy == "answer"
        assert await busy_too == "answer"
        with pytest.raises(QueryCancelled):
            await waiting
        return first, second

    first, second = run(scenario)
    assert first.delivered is True
    assert not second.ran.is_set()  # refused before the pipeline started: nothing planned, admitted or charged


def test_a_cancel_after_the_answer_was_delivered_changes_nothing() -> None:
    async def scenario(runner: QueryRunner) -> Any:
        state, cancel = SimpleNamespace(charged=False), Cancel()
        work = Stand(state)
        work.go.set()
        answer = await _run(app(runner), SimpleNamespace(name="ana"), work, state, cancel)
        cancel.request()  # too late, as PostgreSQL's cancel of a finished query
        return answer, cancel.expired

    assert run(scenario) == ("answer", False)


# real clients -----------------------------------------------------------------------------------------------


def _cancel_request(port: int, process_id: int, secret: int) -> bytes:
    """Send a CancelRequest; what the server answers before closing (PostgreSQL: nothing)."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(struct.pack("!iiii", 16, 80877102, process_id, secret))
        return sock.recv(100)


def test_psycopg_cancel_and_a_wrong_key_leave_the_connection_working(wire: Wire) -> None:  # noqa: F811
    with connect(wire) as conn:
        backend = conn.pgconn.backend_pid  # from the BackendKeyData
        assert 0 < backend < 2**31
        assert _cancel_request(wire.port, backend, 12345) == b""  # a guessed secret: no reply, nothing cancelled
        conn.cancel()  # nothing running: no effect, as PostgreSQL
        assert conn.execute("SELECT 1").fetchone() == (1,)
        before = wire.charges()
        rows = conn.execute("SELECT region, COUNT(*) AS n FROM visits WHERE age > 77 GROUP BY region").fetchall()
        assert sorted(region for region, _ in rows) == ["central", "east", "north", "south", "west"]  # answered
        assert wire.charges() == before + 1


@pytest.mark.parametrize("statement", ["SET dp.epsilon = 0.25", "SET dp.epsilon TO '0.25'"])
def test_current_setting_reads_the_sessions_dp_settings(wire: Wire, statement: str) -> None:  # noqa: F811
    with connect(wire) as conn:
        before = wire.charges()
        assert conn.execute("SELECT current_setting('dp.epsilon')").fetchone() == ("0.1",)  # the dataset's default
        conn.execute(statement)
        conn.execute("SET dp.mechanism = gaussian")
        conn.execute("SET application_name = 'probe'")
        assert conn.execute("SELECT current_setting('dp.epsilon'), current_setting('DP.Mechanism'),"
                            " current_setting('application_name'), current_setting('server_version_num')"
                            ).fetchone() == ("0.25", "gaussian", "probe", "150000")
        # inside a catalog query, prepared (the extended protocol) too
        row = conn.execute("SELECT n.nspname, current_setting('dp.epsilon') FROM pg_catalog.pg_namespace n"
                           " WHERE n.nspname = %s", ("public",), prepare=True).fetchone()
        assert row == ("public", "0.25")
        assert conn.execute("SELECT current_setting('dp.nonsense', true)").fetchone() == (None,)
        with pytest.raises(psycopg.errors.UndefinedObject, match=r"dp\.nonsense"):
            conn.execute("SELECT current_setting('dp.nonsense')")
        conn.execute("RESET dp.epsilon")
        assert conn.execute("SELECT current_setting('dp.epsilon')").fetchone() == ("0.1",)
    with connect(wire) as other:  # the catalog is shared by the analyst's sessions; the settings are not
        assert other.execute("SELECT current_setting('dp.mechanism')").fetchone() == ("laplace",)
    assert wire.charges() == before  # catalog queries are free
