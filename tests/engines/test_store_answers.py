"""The store's remembered answers (proxy/store/duckdb_store.py `run_answer`, docs/privacy.md §10.7.1) on random
stores: the rows are DuckDB's own for the text on this store, the first time and from memory, at bounds that bind
and bounds that do not, with ties, NULLs, negative values and an empty table; a neighbouring source (one unit
removed) is answered from its rebuilt store, never from the memory of the old one. DPPROXY_ANSWER_MEMORY=0 makes
every answer a run of the text on the store (the engine's runs are counted); a bad value stops `serve` at start.

Real DuckDB files and the real store build; nothing is mocked.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proxy.app import build_env
from proxy.cli.demo import DemoFiles
from proxy.engines.duckdb_engine import Engine, Rows, write_database
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from proxy.settings import Settings
from proxy.store.duckdb_store import StoreEngine
from proxy.store.histogram_cache import ANSWERS
from tests.support.live import REPO, policy_copy

QUERIES = (
    "SELECT COUNT(*) AS n, SUM(x) AS s FROM t",
    "SELECT g, COUNT(*) AS n FROM t GROUP BY g",
    "SELECT g, SUM(x) AS s, AVG(x) AS a FROM t GROUP BY g",
    "SELECT r, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY r",
    "SELECT g, COUNT(*) AS n FROM t WHERE x > 0 GROUP BY g",  # a row-level WHERE: per-cell SQL
    "SELECT g, COUNT(*) AS n FROM t WHERE r = 'N' GROUP BY g",  # a unit-level WHERE
)


def _table(k: int, g: int) -> TableSchema:
    return TableSchema(
        "t", "uid",
        (ColumnSpec("uid", "VARCHAR"), ColumnSpec("g", "VARCHAR", groupable=True, public_domain=("a", "b", "c")),
         ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True, public_domain=("N", "S")),
         ColumnSpec("x", "DOUBLE", bounds=(-4.0, 6.0))),
        max_rows=k, max_groups=g,
    )


def _data(rng: random.Random, units: int) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for u in range(units):
        region = rng.choice(("N", "S"))  # one value per unit, as declared
        for _ in range(rng.choice((1, 1, 2, 3, 7))):
            x = rng.choice((None, -9.0, -1.5, 0.0, 2.0, 2.0, 5.5, 40.0))  # ties, NULLs, beyond the bounds
            rows.append((f"u{u}", rng.choice(("a", "b", "c", None)), region, x))
    return rows


def _source(path: Path, rows: list[tuple[object, ...]]) -> Path:
    statements = ["CREATE TABLE t (uid VARCHAR, g VARCHAR, r VARCHAR, x DOUBLE)"]
    if rows:
        values = ", ".join("(" + ", ".join("NULL" if v is None else repr(v) for v in row) + ")" for row in rows)
        statements.append(f"INSERT INTO t VALUES {values}")
    write_database(path, tuple(statements))
    return path


@pytest.mark.parametrize("seed", range(4))
def test_a_remembered_answer_is_duckdb_s_answer_to_the_text_and_never_a_neighbour_s(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    units = (0, 6, 9, 14)[seed]  # seed 0: an empty table
    data = _data(rng, units)
    k, g = ((1, 1), (2, 1), (3, 2), (100, 3))[seed]  # the first three bind, the last does not
    catalog = Catalog((_table(k, g),))
    source = _source(tmp_path / "src.duckdb", data)
    engine = StoreEngine("d", source, catalog, tmp_path)
    texts = [plan(q, catalog, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store", salt=seed).sql
             for q in QUERIES]
    try:
        before = {}
        for sql in texts:
            first = engine.run_answer(sql)
            assert sorted(first.rows, key=repr) == sorted(engine.run(sql).rows, key=repr)
            assert engine.run_answer(sql) is first  # from memory: the same rows, no second read
            before[sql] = first
        if seed == 3:  # bounds that do not bind: the count is DuckDB's answer to the query as written
            (row,) = before[texts[0]].rows
            assert row[1] == len(data) > 0  # COUNT(*) (its columns: __units, __m0, __m1)
        gone = f"u{rng.randrange(units)}" if units else None
        os.replace(_source(tmp_path / "next.duckdb", [row for row in data if row[0] != gone]), source)
        engine.refresh()  # a neighbouring dataset: another store file
        for sql in texts:
            again = engine.run_answer(sql)
            assert again is not before[sql]
            assert sorted(again.rows, key=repr) == sorted(engine.run(sql).rows, key=repr)
    finally:
        engine.close()


class CountedStore(StoreEngine):
    """The real DuckDB store, counting the SQL its engines run (each opened engine's `run`, delegated unchanged)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.runs: list[str] = []
        super().__init__(*args, **kwargs)

    def _open(self, path: Path, stamp: str) -> Engine | None:
        engine = super()._open(path, stamp)
        if engine is not None:
            run = engine.run

            def counted(sql: str, timeout_s: float | None = None) -> Rows:
                self.runs.append(sql)
                return run(sql, timeout_s)

            engine.run = counted  # type: ignore[method-assign]
        return engine


@pytest.mark.parametrize(("answers", "runs"), [(0, 3), (64, 1)])
def test_answer_memory_zero_runs_every_answer_and_the_default_remembers(tmp_path: Path, answers: int,
                                                                        runs: int) -> None:
    rng = random.Random(7)
    data = _data(rng, 12)
    catalog = Catalog((_table(3, 2),))
    engine = CountedStore("d", _source(tmp_path / "src.duckdb", data), catalog, tmp_path, answers=answers)
    try:
        sql = plan(QUERIES[2], catalog, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store", salt=1).sql
        expected = sorted(engine.run(sql).rows, key=repr)
        engine.runs.clear()
        answered = [engine.run_answer(sql) for _ in range(3)]
        assert engine.runs == [sql] * runs  # 0: a scan per answer; 64: one scan, then memory
        assert all(sorted(a.rows, key=repr) == expected for a in answered)  # the same exact rows either way
    finally:
        engine.close()


@pytest.mark.parametrize(("setting", "remembers"), [("0", False), (None, True)])
def test_the_setting_reaches_the_store_the_server_opens(demo: DemoFiles, tmp_path: Path, setting: str | None,
                                                        remembers: bool) -> None:
    extra = {} if setting is None else {"answer_memory": setting}
    env = build_env(Settings(policy=policy_copy(demo, tmp_path), **extra))  # type: ignore[arg-type]
    try:
        store = env.engine("demo")
        assert isinstance(store, StoreEngine)
        sql = "SELECT COUNT(*) FROM visits"
        first = store.run_answer(sql)
        assert (store.run_answer(sql) is first) is remembers  # a fresh run returns new rows; memory the same
    finally:
        env.ledger.close()
        for _, opened in env.engines:
            opened.close()


def test_the_setting_s_default_is_the_store_s() -> None:
    assert Settings().answer_memory == ANSWERS == 64  # two rooms, one number (docs/operations.md says 64)


@pytest.mark.parametrize("value", ["-1", "4097", "lots", "1.5"])
def test_a_bad_answer_memory_stops_serve_at_start_naming_the_setting(tmp_path: Path, value: str) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DPPROXY_")}
    done = subprocess.run([sys.executable, "-m", "proxy", "serve", "--policy", str(tmp_path / "none.toml")],
                          cwd=REPO, env={**environ, "DPPROXY_ANSWER_MEMORY": value}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "DPPROXY_ANSWER_MEMORY must be a whole number from 0" in done.stderr
