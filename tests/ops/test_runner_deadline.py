"""The query pool keeps the post-admit time limit without being woken at admission (proxy/run/query_pool.py).

The clock starts when the work calls `deadline.start()` (admission): planning before it is not timed, however
long, and the handler gives up exactly when the started clock runs out, even though it learnt of the start
only by looking.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from proxy.engines.base import ExecutionTimeout
from proxy.run.deadline import Deadline
from proxy.run.query_pool import QueryRunner

LIMIT_S = 0.05


def _run(work: object) -> object:
    async def main() -> object:
        runner = QueryRunner(2)
        try:
            return await runner.run("ana", work, LIMIT_S)  # type: ignore[arg-type]
        finally:
            runner.close()

    return asyncio.run(main())


def test_planning_longer_than_the_limit_is_not_timed() -> None:
    def work(deadline: Deadline) -> str:
        threading.Event().wait(3 * LIMIT_S)  # planning, before admission: the clock has not started
        deadline.start()
        deadline.check()
        deadline.deliver()
        return "answer"

    assert _run(work) == "answer"


def test_a_started_clock_that_runs_out_ends_the_request_and_the_answer_is_never_delivered() -> None:
    outcome: list[str] = []
    handler_gave_up = threading.Event()

    def work(deadline: Deadline) -> str:
        threading.Event().wait(2 * LIMIT_S)  # planning: not timed
        deadline.start()
        handler_gave_up.wait(10)  # the engine, still running when the handler stops waiting
        try:
            deadline.deliver()
        except ExecutionTimeout:
            outcome.append("refused")
            raise
        outcome.append("delivered")
        return "late answer"

    with pytest.raises(ExecutionTimeout):
        async def main() -> None:
            runner = QueryRunner(2)
            try:
                await runner.run("ana", work, LIMIT_S)
            finally:
                handler_gave_up.set()
                await asyncio.to_thread(runner.close)

        asyncio.run(main())
    assert outcome == ["refused"]
