"""Padded answer times (proxy/run/padding.py): on a dataset with `answer_time = "padded"`, every outcome
after admission (an answer, a timeout, a repeat) is handed to the request handler no earlier than its window's
end, fixed at admission; refusals before admission are not held.

The real pipeline runs on the real query pool against the demo data (its bounding store, the SQLite ledger,
the secure sampler). Times are compared on the server's own monotonic clock: the release time the deadline
fixed, the time it handed the outcome over, and the test's own reading after the outcome arrived; each
comparison is an inequality that holds however loaded the machine is.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from accountant.ledger.charges import Charge
from proxy.app import build_env
from proxy.cli.demo import DemoFiles
from proxy.engines.base import ExecutionTimeout
from proxy.pipeline import Env, Reply, reply
from proxy.policy.load import PolicyFileError, load_policy
from proxy.query.errors import PolicyError
from proxy.run.padding import PacedDeadline
from proxy.run.query_pool import QueryRunner
from proxy.schemas import QueryRequest
from proxy.settings import Settings
from tests.support.live import policy_copy

WINDOW_MS = 300
LIMIT_S = 30.0  # the query time limit the pool is given; a padded dataset's window replaces it


def _padded_env(demo: DemoFiles, directory: Path, padded_ms: int) -> Env:
    policy = policy_copy(demo, directory, epsilon=100.0, delta=1e-4)
    text = policy.read_text()
    text = text.replace("[datasets.demo]\n", f'[datasets.demo]\nanswer_time = "padded"\npadded_ms = {padded_ms}\n', 1)
    policy.write_text(text)
    return build_env(Settings(policy=policy, query_timeout_s=LIMIT_S))


@pytest.fixture(scope="module")
def env(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    built = _padded_env(demo, tmp_path_factory.mktemp("padded"), WINDOW_MS)
    yield built
    for _, engine in built.engines:
        engine.close()


@dataclass
class Asked:
    """One request through the pool: what the pipeline saw and when."""

    deadline: PacedDeadline | None = None
    admitted_at: float | None = None  # time.monotonic() when the charge committed
    charges: list[Charge] = field(default_factory=list)
    outcome_at: float | None = None  # when the handler had the outcome (the test's reading, after it)


def _ask(env: Env, sql: str, asked: Asked, **request: object) -> Reply:
    analyst = next(a for a in env.policy.analysts if a.name == "analyst")

    def admitted(charge: Charge) -> None:
        asked.admitted_at = time.monotonic()
        asked.charges.append(charge)

    def work(deadline: PacedDeadline) -> Reply:
        asked.deadline = deadline
        return reply(QueryRequest(sql=sql, **request), analyst, env, admitted,  # type: ignore[arg-type]
                     lambda answer: repr(answer.release.rows).encode(), deadline)

    async def main() -> Reply:
        runner = QueryRunner(2)
        try:
            return await runner.run("analyst", work, LIMIT_S)  # type: ignore[arg-type]
        finally:
            asked.outcome_at = time.monotonic()
            await asyncio.to_thread(runner.close)  # the abandoned work, if any, ends before the next test

    return asyncio.run(main())


def test_an_answer_is_released_no_earlier_than_the_window_after_its_admission(env: Env) -> None:
    asked = Asked()
    answer = _ask(env, "SELECT region, COUNT(*) AS n FROM visits GROUP BY region", asked)
    assert not answer.repeat and len(asked.charges) == 1
    deadline = asked.deadline
    assert deadline is not None and deadline.release_at is not None and deadline.released_at is not None
    assert asked.admitted_at is not None
    assert deadline.release_at - asked.admitted_at >= WINDOW_MS / 1000
    assert asked.outcome_at is not None and asked.outcome_at >= deadline.released_at >= deadline.release_at


def test_a_repeat_is_padded_like_an_answer(env: Env) -> None:
    sql = "SELECT category, COUNT(*) AS n FROM visits GROUP BY category"
    first = _ask(env, sql, Asked())
    asked = Asked()
    before = time.monotonic()
    again = _ask(env, sql, asked)
    assert again.repeat and again.body == first.body and asked.charges == []  # nothing charged, same answer
    deadline = asked.deadline
    assert deadline is not None and deadline.release_at is not None and deadline.released_at is not None
    assert deadline.release_at - before >= WINDOW_MS / 1000
    assert asked.outcome_at is not None and asked.outcome_at >= deadline.released_at >= deadline.release_at


def test_the_analysts_next_query_starts_only_after_the_padded_answer_left(env: Env) -> None:
    """Its slot frees at the release time, not when the work ends: the next query's start says nothing."""
    analyst = next(a for a in env.policy.analysts if a.name == "analyst")
    deadlines: list[PacedDeadline] = []
    started: list[float] = []

    def work(sql: str) -> Callable[[PacedDeadline], Reply]:
        def run(deadline: PacedDeadline) -> Reply:
            started.append(time.monotonic())
            deadlines.append(deadline)
            return reply(QueryRequest(sql=sql), analyst, env, lambda _: None, lambda answer: b"", deadline)
        return run

    async def main() -> None:
        runner = QueryRunner(2)  # alone, the analyst runs two queries at once (work-conserving); the third waits
        try:
            await asyncio.gather(*(runner.run("analyst", work(f"SELECT COUNT(*) AS n{i} FROM visits"), LIMIT_S)
                                   for i in range(3)))  # type: ignore[arg-type]
        finally:
            await asyncio.to_thread(runner.close)

    asyncio.run(main())
    releases = [d.release_at for d in deadlines[:2]]
    assert None not in releases and started[2] >= min(releases)  # type: ignore[type-var]


def test_a_refusal_before_admission_is_not_held(env: Env) -> None:
    asked = Asked()
    with pytest.raises(PolicyError):
        _ask(env, "SELECT user_id FROM visits", asked)  # row-level output: refused while planning
    assert asked.deadline is not None and asked.deadline.release_at is None  # no clock started: nothing held
    assert asked.charges == []


def test_work_past_the_window_is_a_charged_timeout_released_at_the_window(
    demo: DemoFiles, tmp_path: Path
) -> None:
    env = _padded_env(demo, tmp_path, padded_ms=1)  # no admitted query finishes within a millisecond
    try:
        asked = Asked()
        sql = "SELECT region, MEDIAN(amount) AS m, SUM(amount) AS s FROM visits GROUP BY region"
        with pytest.raises(ExecutionTimeout):
            _ask(env, sql, asked)
        assert len(asked.charges) == 1  # charged: the timeout is an outcome after admission
        deadline = asked.deadline
        assert deadline is not None and deadline.release_at is not None and asked.admitted_at is not None
        assert deadline.release_at - asked.admitted_at >= 0.001
        assert asked.outcome_at is not None and asked.outcome_at >= deadline.release_at
        assert env.ledger.stored_release("analyst", "demo", _identity(env, sql)) is None  # never released
    finally:
        for _, engine in env.engines:
            engine.close()


def _identity(env: Env, sql: str) -> str:
    from proxy.pipeline import prepare

    analyst = next(a for a in env.policy.analysts if a.name == "analyst")
    return prepare(QueryRequest(sql=sql), analyst, env.policy, env.sampler.salt()).request_sha256


@pytest.mark.parametrize(("lines", "problem"), [
    ('answer_time = "later"\n', "datasets.demo.answer_time: must be one of immediate, padded"),
    ("padded_ms = 100\n", 'datasets.demo.padded_ms: applies only with answer_time = "padded"'),
    ('answer_time = "padded"\npadded_ms = 0\n', "datasets.demo.padded_ms: must be an integer in [1, 3600000]"),
])
def test_the_policy_refuses_a_bad_answer_time(demo: DemoFiles, tmp_path: Path, lines: str, problem: str) -> None:
    policy = policy_copy(demo, tmp_path)
    policy.write_text(policy.read_text().replace("[datasets.demo]\n", "[datasets.demo]\n" + lines, 1))
    with pytest.raises(PolicyFileError, match=re.escape(problem)):
        load_policy(policy)


def test_the_policy_reads_a_padded_dataset(demo: DemoFiles, tmp_path: Path) -> None:
    policy = policy_copy(demo, tmp_path)
    policy.write_text(policy.read_text().replace("[datasets.demo]\n", '[datasets.demo]\nanswer_time = "padded"\n', 1))
    dataset = load_policy(policy).dataset("demo")
    assert dataset is not None and (dataset.answer_time, dataset.padded_ms) == ("padded", None)
