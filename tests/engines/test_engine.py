from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import pytest

from proxy.engines.base import EngineMisconfigured, ExecutionFailed, ExecutionTimeout, Rows
from proxy.engines.duckdb_engine import Engine
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema


@pytest.fixture(scope="module")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("engine") / "tiny.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute(
        "CREATE TABLE visits AS SELECT i AS user_id, 'r' || (i % 3) AS region, (i * 1.5)::DOUBLE AS amount,"
        " (i * 2)::DECIMAL(10, 2) AS price FROM range(100) t(i)"
    )
    conn.close()
    return path


@pytest.fixture(scope="module")
def engine(db_path: Path) -> Iterator[Engine]:
    with Engine(db_path, threads=2, memory_limit="512MB", timeout_s=5.0) as engine:
        yield engine


def setting(engine: Engine, name: str) -> object:
    return engine.run(f"SELECT current_setting('{name}')").rows[0][0]


def test_hardening_settings_are_in_force(engine: Engine) -> None:
    for name in (
        "enable_external_access",
        "autoload_known_extensions",
        "autoinstall_known_extensions",
        "allow_community_extensions",
        "allow_unsigned_extensions",
        "enable_progress_bar",
    ):
        assert setting(engine, name) is False, name
    assert setting(engine, "lock_configuration") is True
    assert setting(engine, "access_mode") == "read_only"
    assert setting(engine, "threads") == 2
    assert Path(str(setting(engine, "temp_directory"))).is_dir()


def test_run_returns_columns_and_rows(engine: Engine) -> None:
    result = engine.run("SELECT region, count(*) AS n FROM visits GROUP BY region ORDER BY region")
    assert result == Rows(("region", "n"), (("r0", 34), ("r1", 33), ("r2", 33)))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "COPY visits TO '/tmp/dpproxy-leak.csv'",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET threads = 8",
        "SET enable_external_access = true",
        "ATTACH '/tmp/dpproxy-other.duckdb' AS other",
        "CREATE TABLE evil (a INTEGER)",
        "SELECT CAST(region AS INTEGER) FROM visits",
    ],
    ids=["read_csv", "copy_to", "install", "load", "set_threads", "set_access", "attach", "create", "cast"],
)
def test_forbidden_or_failing_statements_raise_a_fixed_message(
    engine: Engine, sql: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="proxy.engines.duckdb_engine"), pytest.raises(ExecutionFailed) as info:
        engine.run(sql)
    assert str(info.value) == "query execution failed"
    assert info.value.code == "execution_failed"
    assert info.value.detail == {}
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert any("query failed" in r.getMessage() for r in caplog.records)  # engine text: log only
    assert not Path("/tmp/dpproxy-leak.csv").exists()


SLOW = "SELECT count(*) FROM range(100000000) a, range(100000) b WHERE a.range + b.range = 7"


def test_long_query_times_out_and_engine_recovers(engine: Engine) -> None:
    with pytest.raises(ExecutionTimeout) as info:
        engine.run(SLOW, timeout_s=0.2)
    assert str(info.value) == "query exceeded the time limit"
    assert info.value.code == "timeout"
    assert engine.run("SELECT count(*) FROM visits").rows == ((100,),)


def test_concurrent_runs_from_many_threads(engine: Engine) -> None:
    def work(i: int) -> object:
        return engine.run(f"SELECT sum(user_id) + {i} FROM visits").rows[0][0]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(work, range(64)))
    assert results == [4950 + i for i in range(64)]


def test_columns_reports_duckdb_types(engine: Engine) -> None:
    assert engine.columns("VISITS") == {
        "user_id": "BIGINT",
        "region": "VARCHAR",
        "amount": "DOUBLE",
        "price": "DECIMAL(10,2)",
    }
    assert engine.columns("missing") == {}


def test_check_catalog_reports_problems(engine: Engine) -> None:
    def table(name: str, *columns: ColumnSpec) -> TableSchema:
        return TableSchema(name, "user_id", (ColumnSpec("user_id", "BIGINT"), *columns))

    good = Catalog((table("visits", ColumnSpec("amount", "DOUBLE"), ColumnSpec("price", "DECIMAL(10, 2)")),))
    assert engine.check_catalog(good) == ()
    bad = Catalog(
        (
            table("visits", ColumnSpec("nope", "DOUBLE"), ColumnSpec("region", "BIGINT"),
                  ColumnSpec("price", "DOUBLE")),
            table("ghost"),
        )
    )
    problems = engine.check_catalog(bad)
    assert len(problems) == 4
    assert "nope" in problems[0] and "not found" in problems[0]
    assert "region" in problems[1] and "VARCHAR" in problems[1]
    # a DECIMAL compares exactly, a DOUBLE rounds: the scope would be computed in the wrong type (issue #10)
    assert "price" in problems[2] and 'declare type = "DECIMAL(10,2)"' in problems[2]
    assert "ghost" in problems[3]


def test_missing_file_is_misconfigured(tmp_path: Path) -> None:
    with pytest.raises(EngineMisconfigured):
        Engine(tmp_path / "absent.duckdb")


def test_close_removes_temp_directory(tmp_path: Path) -> None:
    # A second file: DuckDB refuses a second, differently configured instance of the same file.
    path = tmp_path / "other.duckdb"
    duckdb.connect(str(path)).close()
    engine = Engine(path)
    temp = Path(str(setting(engine, "temp_directory")))
    engine.close()
    engine.close()
    assert not temp.exists()


def test_a_setting_that_did_not_take_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "third.duckdb"
    duckdb.connect(str(path)).close()
    monkeypatch.setattr("proxy.engines.duckdb_engine._normalised_memory_limit", lambda _: "999.0 GiB")
    with pytest.raises(EngineMisconfigured, match="memory_limit"):
        Engine(path)
