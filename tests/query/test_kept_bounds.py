"""Chosen bounds are releases, reused for free (issue #29 item 2; docs/privacy.md §10.8; proxy/pipeline.py
`at_kept_bounds`, `keep_bounds`; proxy/query/auto_release.py `plan_reused`, `shape_sha256`).

On the demo as shipped (visits with every bound "auto", a bounding store, a SQLite ledger), through
`pipeline.reply` with the real engine: a later query of the same shape runs no selection (the engine's calls are
counted as they pass to it), is charged exactly what the query at those bounds declared fixed is charged, says
`reused`, and a restart of the ledger keeps the bounds; another WHERE draws its own; the count refreshes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accountant import loss
from accountant.events import AutoBoundsEvent, to_json
from accountant.ledger.kept_bounds import KeptBounds
from accountant.ledger.memory import MemoryLedger
from proxy import pipeline
from proxy.app import build_env
from proxy.cli.demo import DemoFiles
from proxy.pipeline import Answer, Env
from proxy.policy.load import AnalystPolicy
from proxy.query import auto_release
from proxy.query.planner import plan
from proxy.schemas import QueryRequest
from proxy.settings import Settings
from tests.support.live import policy_copy

SQL = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"


@dataclasses.dataclass
class Counted:
    """The dataset's real engine, every SQL it is given recorded on its way through (nothing is answered here)."""

    engine: Any
    seen: list[str] = dataclasses.field(default_factory=list)
    answered: list[str] = dataclasses.field(default_factory=list)  # of `seen`, those asked through run_answer

    def run(self, sql: str, timeout_s: float | None = None) -> Any:
        self.seen.append(sql)
        return self.engine.run(sql, timeout_s)

    def run_remembered(self, sql: str, timeout_s: float | None = None) -> Any:
        self.seen.append(sql)
        return self.engine.run_remembered(sql, timeout_s)

    def run_answer(self, sql: str, timeout_s: float | None = None) -> Any:
        self.seen.append(sql)
        self.answered.append(sql)
        return self.engine.run_answer(sql, timeout_s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def _policy(demo: DemoFiles, directory: Path, reuse: int | None = None) -> Path:
    path = policy_copy(demo, directory, epsilon=1e6, delta=1e-6, auto=True)
    if reuse is not None:
        text, found = re.subn(r"^bounding = ", f"auto_bounds_reuse = {reuse}\nbounding = ",
                              path.read_text(encoding="utf-8"), count=1, flags=re.MULTILINE)
        assert found == 1
        path.write_text(text, encoding="utf-8")
    return path


def _env(policy: Path) -> tuple[Env, Counted]:
    env = build_env(Settings(policy=policy))
    (name, engine), = env.engines
    counted = Counted(engine)
    return dataclasses.replace(env, engines=((name, counted),)), counted


def _close(env: Env) -> None:
    env.ledger.close()
    for _, engine in env.engines:
        engine.close()


@pytest.fixture
def policy(demo: DemoFiles, tmp_path: Path) -> Path:
    return _policy(demo, tmp_path)


@pytest.fixture
def env(policy: Path) -> Iterator[tuple[Env, Counted]]:
    built = _env(policy)
    try:
        yield built
    finally:
        _close(built[0])


def _analyst(env: Env, demo: DemoFiles) -> AnalystPolicy:
    found = env.policy.analyst_by_key_hash(hashlib.sha256(demo.analyst_key.encode()).hexdigest())
    assert found is not None
    return found


def _ask(env: Env, analyst: AnalystPolicy, sql: str, epsilon: float) -> Answer:
    answers: list[Answer] = []

    def render(answer: Answer) -> bytes:
        answers.append(answer)
        return b"{}"

    reply = pipeline.reply(QueryRequest(sql=sql, epsilon=epsilon), analyst, env, lambda charge: None, render)
    assert not reply.repeat and len(answers) == 1
    return answers[0]


def _selections(counted: Counted, answer: Answer) -> int:
    picking = auto_release.selection_text(answer.selected) if answer.selected and answer.selected.auto else None
    return sum(sql == picking for sql in counted.seen) if picking else 0


def test_a_later_query_of_the_shape_reuses_the_bounds_reads_no_histogram_and_pays_the_fixed_price(
        env: tuple[Env, Counted], demo: DemoFiles) -> None:
    environment, counted = env
    analyst = _analyst(environment, demo)
    first = _ask(environment, analyst, SQL, 1.0)
    assert first.bounds is not None and not first.bounds.reused and first.bounds.note is None
    assert first.bounds.report()["reused"] is False and first.bounds.report()["epsilon"] > 0
    assert isinstance(first.charge.event, AutoBoundsEvent)
    picking = auto_release.selection_text(first.selected)  # type: ignore[arg-type]
    assert counted.seen.count(picking) == 1 and len(counted.seen) == 2  # the selection, then the query

    counted.seen.clear()
    second = _ask(environment, analyst, "SELECT region, COUNT(*) AS visits FROM visits GROUP BY 1", 0.5)
    assert counted.seen == [second.prepared.plan.sql]  # one engine call, the query: no histogram read again
    assert second.bounds is not None and second.bounds.reused
    assert (second.bounds.max_rows, second.bounds.max_groups) == (first.bounds.max_rows, first.bounds.max_groups)
    report = second.bounds.report()
    assert report["reused"] is True and report["epsilon"] == 0.0 and report["chosen"] is True
    assert [p["epsilon"] for p in report["parts"]] == [0.0] * len(first.bounds.parts)  # type: ignore[union-attr]
    assert [p["value"] for p in report["parts"]] == [p.value for p in first.bounds.parts]  # type: ignore[union-attr]

    # exactly the price of the query with those bounds declared: visits fixed at max_rows = k
    dataset = second.prepared.dataset
    visits = dataset.catalog.table("visits")
    assert visits is not None
    fixed_table = dataclasses.replace(visits, max_rows=second.bounds.max_rows, auto_max_rows=False)
    fixed_catalog = dataclasses.replace(dataset.catalog, tables=tuple(
        fixed_table if t.name == "visits" else t for t in dataset.catalog.tables))
    fixed = plan(SQL, fixed_catalog, epsilon=0.5, delta=dataset.delta, mechanism="laplace", bounding=dataset.bounding)
    charged = second.charge
    assert (charged.epsilon, charged.delta) == (fixed.price.epsilon, fixed.price.delta) == (0.5, 0.0)
    assert loss.approximate_rho(charged.event) == loss.approximate_rho(fixed.price.event)
    assert [(n.sensitivity, n.scale) for n in second.prepared.plan.price.noise] == [
        (n.sensitivity, n.scale) for n in fixed.price.noise]
    assert "auto_bounds" not in json.dumps(to_json(charged.event))  # no selection composed in

    counted.seen.clear()  # another WHERE is another selection: its own draw, its own histograms
    other = _ask(environment, analyst, SQL.replace("GROUP BY", "WHERE age > 30 GROUP BY"), 0.5)
    assert other.bounds is not None and not other.bounds.reused and _selections(counted, other) == 1


def test_a_restart_keeps_the_bounds(policy: Path, demo: DemoFiles) -> None:
    environment, counted = _env(policy)
    try:
        first = _ask(environment, _analyst(environment, demo), SQL, 1.0)
    finally:
        _close(environment)
    again, counted = _env(policy)  # a new process on the same SQLite ledger
    try:
        second = _ask(again, _analyst(again, demo), SQL, 0.75)
        assert second.bounds is not None and second.bounds.reused
        assert second.bounds.parts == first.bounds.parts  # type: ignore[union-attr]
        assert counted.seen == [second.prepared.plan.sql]
    finally:
        _close(again)


def test_bounds_are_reused_at_most_auto_bounds_reuse_times_then_drawn_afresh(demo: DemoFiles, tmp_path: Path) -> None:
    environment, counted = _env(_policy(demo, tmp_path, reuse=2))
    try:
        analyst = _analyst(environment, demo)
        answers = [_ask(environment, analyst, SQL, e) for e in (1.0, 0.5, 0.25, 0.75, 0.125)]
        assert [a.bounds.reused for a in answers] == [False, True, True, False, True]  # type: ignore[union-attr]
        assert counted.seen.count(auto_release.selection_text(answers[0].selected)) == 2  # type: ignore[arg-type]
    finally:
        _close(environment)
    environment, counted = _env(_policy(demo, tmp_path / "never", reuse=0))
    try:
        analyst = _analyst(environment, demo)
        answers = [_ask(environment, analyst, SQL, e) for e in (1.0, 0.5)]
        assert [a.bounds.reused for a in answers] == [False, False]  # type: ignore[union-attr]
    finally:
        _close(environment)


def test_the_ledger_reuses_only_at_the_stamp_and_within_the_count() -> None:
    ledger = MemoryLedger()
    ledger.keep_bounds(KeptBounds("demo", "ana", "ab" * 32, "stamp-1", '{"x": 1}'))
    assert ledger.reuse_bounds("demo", "ana", "ab" * 32, "stamp-2", 5) is None  # the source changed
    assert ledger.reuse_bounds("demo", "", "ab" * 32, "stamp-1", 5) is None  # another scope
    assert [ledger.reuse_bounds("demo", "ana", "ab" * 32, "stamp-1", 2) for _ in range(3)] == [
        '{"x": 1}', '{"x": 1}', None]
    ledger.keep_bounds(KeptBounds("demo", "ana", "ab" * 32, "stamp-1", '{"x": 2}'))  # a fresh draw: count at 0
    assert ledger.reuse_bounds("demo", "ana", "ab" * 32, "stamp-1", 2) == '{"x": 2}'


def test_an_answer_at_kept_bounds_is_the_sql_s_exact_answer_from_memory_with_fresh_noise(
        env: tuple[Env, Counted], demo: DemoFiles) -> None:
    """The pipeline asks the store for the SQL at the bounds through run_answer (docs/privacy.md §10.7.1): the
    rows it remembers are DuckDB's own answer to that text on the store, and answers at the same kept bounds,
    all from that one memory after the first (four ε: none is a repeat), each draw their own noise."""
    environment, counted = env
    analyst = _analyst(environment, demo)
    first = _ask(environment, analyst, SQL, 1.0)  # draws the bounds and keeps them
    assert counted.answered == [first.prepared.plan.sql]
    noisy = [_ask(environment, analyst, SQL, e) for e in (0.125, 0.25, 0.375, 0.5)]  # not repeats
    assert all(a.bounds is not None and a.bounds.reused for a in noisy)
    texts = {a.prepared.plan.sql for a in noisy}
    assert len(texts) == 1 and counted.answered[1:] == [*texts] * 4  # one text: read once, then remembered
    (sql,) = texts
    remembered = counted.engine.run_answer(sql)
    assert counted.engine.run_answer(sql) is remembered  # the rows the four answers were released from
    assert sorted(remembered.rows) == sorted(counted.engine.run(sql).rows) and len(remembered.rows) == 5
    assert len({tuple(a.release.rows) for a in noisy}) > 1  # all four alike: P < 1e-6 (5 counts, scale >= 2)
