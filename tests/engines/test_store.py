"""The bounding store (proxy/store/duckdb_store.py, docs/privacy.md §11): stable per unit, true to its source,
swapped safely.

Everything here runs on real DuckDB files and, for the HTTP case, a real server; nothing is mocked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import httpx
import pytest

from proxy.app import build_env
from proxy.cli.demo import DemoFiles, build_demo
from proxy.engines.base import ExecutionFailed
from proxy.engines.duckdb_engine import write_database
from proxy.engines.spark_config import SparkSource, SparkTable
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from proxy.query.rewrite import store_layout
from proxy.settings import Settings
from proxy.store.duckdb_store import (
    FORMAT,
    KEY_FILE,
    StoreEngine,
    StoreError,
    StoreUnavailable,
    build_store,
    deployment_key,
    fingerprint,
    store_path,
)
from proxy.store.histogram_cache import ANSWER_ROWS
from proxy.store.spark_store import stamp_of
from tests.support.live import Server, policy_copy

TABLE = TableSchema(
    "t", "uid",
    (ColumnSpec("uid", "VARCHAR"), ColumnSpec("g", "VARCHAR", groupable=True),
     ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True), ColumnSpec("x", "DOUBLE", bounds=(0, 10))),
    max_groups=2, max_rows=2,
)
USERS = TableSchema("users", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("plan", "VARCHAR", groupable=True,
                                                                             unit_level=True)), one_row_per_unit=True)
CATALOG = Catalog((TABLE,))
COUNT = "SELECT COUNT(*) FROM t"


def _rows(n_units: int, *, extra: int = 0) -> list[tuple[object, ...]]:
    """Data that breaks the declarations: r varies within a unit, units differ only in case, NULL units."""
    out: list[tuple[object, ...]] = []
    for u in range(n_units):
        unit = f"u{u}" if u % 3 else f"U{u}"
        for i in range(1 + (u * 7) % 9 + extra):
            out.append((unit, "abcd"[(u + i) % 4], "NSE"[(u * i) % 3], float(i * 1.5 - 2)))
    out.append((None, "a", "N", 1.0))
    out.append((f"u{1}".upper(), "a", "N", 1.0))  # "U1" is another unit than "u1" (binary collation)
    return out


def _source(path: Path, data: list[tuple[object, ...]], users: list[tuple[object, ...]] | None = None) -> Path:
    values = ", ".join(
        "(" + ", ".join("NULL" if v is None else repr(v) for v in row) + ")" for row in data
    )
    statements = ["CREATE TABLE t (uid VARCHAR COLLATE NOCASE, g VARCHAR, r VARCHAR, x DOUBLE)"]
    if data:
        statements.append(f"INSERT INTO t VALUES {values}")
    if users is not None:
        statements.append("CREATE TABLE users (uid BIGINT, plan VARCHAR)")
        statements.append("INSERT INTO users VALUES " + ", ".join(f"({u}, '{p}')" for u, p in users))
    write_database(path, tuple(statements))
    return path


def _store_rows(path: Path) -> Counter[tuple[object, ...]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return Counter(con.execute("SELECT * FROM t").fetchall())
    finally:
        con.close()


def _exact(engine: StoreEngine, sql: str = COUNT) -> tuple[tuple[object, ...], ...]:
    planned = plan(sql, CATALOG, epsilon=1.0, delta=1e-8, mechanism="laplace", bounding="store")
    return engine.run(planned.sql).rows


def test_removing_a_unit_changes_only_its_rows_in_a_rebuilt_store(tmp_path: Path) -> None:
    key = deployment_key(tmp_path)
    data = _rows(12)
    for removed in ("u1", "U3", "u5"):
        (tmp_path / removed).mkdir()
        full = build_store("d", _source(tmp_path / removed / "full.duckdb", data), CATALOG, tmp_path / removed, key)
        rest = [row for row in data if row[0] != removed]
        less = build_store("e", _source(tmp_path / removed / "less.duckdb", rest), CATALOG, tmp_path / removed, key)
        before, after = _store_rows(full), _store_rows(less)
        assert any(row[0] == removed for row in before)
        assert Counter({row: n for row, n in before.items() if row[0] != removed}) == after
        assert all(row[0] is not None for row in before)  # rows without a unit are dropped


def test_ranks_and_canonical_values_are_what_the_queries_rely_on(tmp_path: Path) -> None:
    path = build_store("d", _source(tmp_path / "s.duckdb", _rows(9)), CATALOG, tmp_path, deployment_key(tmp_path))
    con = duckdb.connect(str(path), read_only=True)
    try:
        by_unit = con.execute(
            "SELECT uid, list(r), list(__row_rank ORDER BY __row_rank) FROM t GROUP BY uid").fetchall()
        groups = con.execute(
            "SELECT uid, g, list(__row_rank__g ORDER BY __row_rank__g), min(__group_rank__g), max(__group_rank__g)"
            " FROM t GROUP BY uid, g").fetchall()
        grids = con.execute("SELECT count(*) FROM t WHERE __grid__x NOT BETWEEN 0 AND 10 * 2 ** 26").fetchone()
    finally:
        con.close()
    assert {"u1", "U1"} <= {u for u, _, _ in by_unit}  # binary collation: two units
    for _, regions, ranks in by_unit:
        assert len(set(regions)) == 1  # the canonical value: one per unit
        assert ranks == list(range(1, len(ranks) + 1))
    for unit in {u for u, *_ in groups}:
        mine = [g for g in groups if g[0] == unit]
        assert all(ranks == list(range(1, len(ranks) + 1)) and lo == hi for _, _, ranks, lo, hi in mine)
        assert sorted(lo for *_, lo, _ in mine) == list(range(1, len(mine) + 1))
    assert grids == (0,)


def test_a_changed_source_is_detected_and_rebuilt_before_the_next_answer(tmp_path: Path) -> None:
    source = _source(tmp_path / "src.duckdb", _rows(5))
    engine = StoreEngine("d", source, CATALOG, tmp_path)
    try:
        first, old = _exact(engine), engine.path
        replacement = _source(tmp_path / "next.duckdb", _rows(5, extra=3) + _rows(3))
        os.replace(replacement, source)
        engine.refresh()
        assert _exact(engine) != first
        assert engine.path != old and not old.exists()  # the old store is closed and deleted
        assert _exact(engine, "SELECT COUNT(DISTINCT uid) FROM t")[0][1] == 5 + 1  # 5 units, "U1" and "u1"
    finally:
        engine.close()


def _commit(source: Path, units: int, *, checkpoint: bool) -> None:
    """A writer appends one row for each of `units` new units and closes: with a checkpoint (the rows are in the
    file), or without one (they are only in its write-ahead log `<file>.wal`, as after a crash or
    `disable_checkpoint_on_shutdown`; DuckDB replays them whenever the file is opened, read-only too)."""
    con = duckdb.connect(str(source), config={"checkpoint_threshold": "1TB"})  # no automatic checkpoint
    try:
        if not checkpoint:
            con.execute("PRAGMA disable_checkpoint_on_shutdown")
        con.execute("INSERT INTO t SELECT 'w' || range, 'a', 'N', 1.0 FROM range(?)", [units])
    finally:
        con.close()


def _seen(source: Path) -> tuple[int, int]:
    """(rows with a unit, units) of `t` as a query of the source reads it: DuckDB opened read-only."""
    con = duckdb.connect(str(source), read_only=True)
    try:
        return con.execute("SELECT COUNT(uid), COUNT(DISTINCT uid) FROM t").fetchone()  # type: ignore[return-value]
    finally:
        con.close()


def _held(engine: StoreEngine) -> tuple[int, int]:
    """(rows, units) the store holds: what its answers are computed from."""
    return engine.run("SELECT COUNT(*), COUNT(DISTINCT uid) FROM t").rows[0]  # type: ignore[return-value]


def _file_stats(path: Path) -> tuple[int, int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


@pytest.mark.parametrize("checkpoint", [False, True], ids=["wal_only", "checkpointed"])
def test_a_commit_is_rebuilt_into_the_store_whether_or_not_it_was_checkpointed(
    tmp_path: Path, checkpoint: bool
) -> None:
    """Issue #26 (6): a commit left in the WAL leaves the file's size, mtime and inode as they were; the store
    was not rebuilt and answered 1000 rows while the source held 50 000. The WAL is part of the source's stamp."""
    source = _source(tmp_path / "src.duckdb", [(f"u{i}", "a", "N", 1.0) for i in range(1000)])
    engine = StoreEngine("d", source, CATALOG, tmp_path)
    try:
        old, stats = engine.path, _file_stats(source)
        assert _held(engine) == _seen(source) == (1000, 1000)
        _commit(source, 49_000, checkpoint=checkpoint)
        wal = Path(f"{source}.wal")
        if checkpoint:
            assert not wal.exists() and _file_stats(source) != stats
        else:
            assert wal.stat().st_size > 0 and _file_stats(source) == stats  # the file itself shows nothing
        engine.refresh()
        assert engine.path != old and not old.exists()
        assert _held(engine) == _seen(source) == (50_000, 50_000)  # exactly what a query of the source reads
        assert _exact(engine)[0][1] == 50_000  # the COUNT(*) answered before noise: every new row
        path = engine.path
        engine.refresh()
        assert engine.path == path  # nothing changed since: no rebuild
    finally:
        engine.close()


def test_a_file_rewritten_in_place_with_its_size_and_mtime_kept_is_rebuilt(tmp_path: Path) -> None:
    """`cp -p` or `rsync -t` over the source: other rows, the same inode, size and mtime. The ctime is part of the
    stamp (it changes with every write and cannot be set back)."""
    source = _source(tmp_path / "src.duckdb", [(f"u{i}", "a", "N", 1.0) for i in range(1000)])
    other = _source(tmp_path / "other.duckdb", [(f"v{i}", "b", "S", 2.0) for i in range(900)])
    engine = StoreEngine("d", source, CATALOG, tmp_path)
    try:
        old, stats, times = engine.path, _file_stats(source), source.stat()
        assert other.stat().st_size == stats[0]  # same size: DuckDB files grow by whole blocks
        shutil.copyfile(other, source)  # in place: the same inode
        os.utime(source, ns=(times.st_atime_ns, times.st_mtime_ns))
        assert _file_stats(source) == stats
        engine.refresh()
        assert engine.path != old
        assert _held(engine) == _seen(source) == (900, 900)
    finally:
        engine.close()


def test_a_file_touched_without_a_change_is_rebuilt_into_the_same_store(tmp_path: Path) -> None:
    """The content is never read, so a touch (a new mtime, nothing else) rebuilds the store: the same rows and
    ranks (the deployment key is the same), at the cost of one build. Never stale is the promise, not never
    rebuilt (docs/operations.md, Bounding store)."""
    source = _source(tmp_path / "src.duckdb", _rows(9))
    engine = StoreEngine("d", source, CATALOG, tmp_path)
    try:
        old, rows, answer = engine.path, Counter(engine.run("SELECT * FROM t").rows), _exact(engine)
        os.utime(source)
        engine.refresh()
        assert engine.path != old and not old.exists()
        assert Counter(engine.run("SELECT * FROM t").rows) == rows and _exact(engine) == answer
    finally:
        engine.close()


def test_a_spark_source_rewritten_in_place_with_its_size_and_mtime_kept_is_a_change(tmp_path: Path) -> None:
    """The Spark store's stamp (proxy/store/spark_store.py) has the same hole and the same fix: each file's
    ctime and inode. Stats only: no Spark runs here."""
    table = tmp_path / "t"
    table.mkdir()
    part = table / "part-0.parquet"
    part.write_bytes(b"PAR1" + b"a" * 100)
    source = SparkSource("local[1]", (SparkTable("t", "parquet", str(table)),))
    before, times = stamp_of(source, "id"), part.stat()
    time.sleep(0.01)  # the ctime's clock ticks coarsely
    part.write_bytes(b"PAR1" + b"b" * 100)
    os.utime(part, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert _file_stats(part) == (times.st_size, times.st_mtime_ns, times.st_ino)
    assert stamp_of(source, "id") != before
    (table / "part-1.parquet").write_bytes(b"PAR1")
    assert len({before, stamp_of(source, "id")}) == 2  # a file added is a change too


def test_a_remembered_histogram_is_read_once_per_store_and_never_outlives_a_rebuild(tmp_path: Path) -> None:
    """run_remembered (the auto bounds' selection histograms): the same SQL on the same store is answered from
    memory; after the source changes and the store is rebuilt it is read again from the new store."""
    source = _source(tmp_path / "src.duckdb", _rows(5))
    engine = StoreEngine("d", source, CATALOG, tmp_path)
    sql = "SELECT COUNT(*) FROM t"
    try:
        first = engine.run_remembered(sql)
        assert engine.run_remembered(sql) is first and engine.run(sql) == first  # one read, the same rows
        os.replace(_source(tmp_path / "next.duckdb", _rows(5, extra=3) + _rows(3)), source)
        engine.refresh()
        again = engine.run_remembered(sql)
        assert again is not first and again == engine.run(sql) and again.rows != first.rows
    finally:
        engine.close()


def test_a_remembered_answer_is_the_sql_s_exact_rows_once_per_store_and_never_a_neighbour_s(tmp_path: Path) -> None:
    """run_answer (a query's SQL at its bounds, docs/privacy.md §10.7.1): the rows DuckDB gives for the text on
    this store, read once per store; after the source loses one unit (a neighbouring dataset) the rebuilt store is
    read again and answers without it; a result of more than ANSWER_ROWS rows is returned and never kept."""
    data = _rows(12)
    source = _source(tmp_path / "src.duckdb", data)
    engine = StoreEngine("d", source, CATALOG, tmp_path)
    planned = plan("SELECT g, COUNT(*), SUM(x) FROM t GROUP BY g", CATALOG, epsilon=1.0, delta=1e-8,
                   mechanism="laplace", bounding="store")
    try:
        first = engine.run_answer(planned.sql)
        exact = sorted(engine.run(planned.sql).rows)  # DuckDB's own answer to the text, on this store
        assert engine.run_answer(planned.sql) is first and sorted(first.rows) == exact and len(exact) == 4
        os.replace(_source(tmp_path / "next.duckdb", [row for row in data if row[0] != "u1"]), source)
        engine.refresh()
        again = engine.run_answer(planned.sql)
        assert again is not first and sorted(again.rows) == sorted(engine.run(planned.sql).rows) != exact
        many = f"SELECT * FROM range({ANSWER_ROWS + 1})"
        big = engine.run_answer(many)
        assert len(big.rows) == ANSWER_ROWS + 1 and engine.run_answer(many) is not big  # read each time
        fits = f"SELECT * FROM range({ANSWER_ROWS})"
        assert engine.run_answer(fits) is engine.run_answer(fits)
    finally:
        engine.close()


def test_a_corrupt_store_is_rebuilt_never_read(tmp_path: Path) -> None:
    source = _source(tmp_path / "src.duckdb", _rows(6))
    engine = StoreEngine("d", source, CATALOG, tmp_path)
    expected, path = _exact(engine), engine.path
    engine.close()
    os.chmod(path, 0o600)
    path.write_bytes(b"not a duckdb file" * 1000)
    engine = StoreEngine("d", source, CATALOG, tmp_path)
    try:
        assert _exact(engine) == expected
    finally:
        engine.close()


@pytest.mark.parametrize("other", ["source", "key"])
def test_a_store_of_another_source_or_key_is_rebuilt_never_read(tmp_path: Path, other: str) -> None:
    source = _source(tmp_path / "src.duckdb", _rows(6))
    foreign_dir = tmp_path / "foreign"
    foreign_dir.mkdir()
    foreign_source = _source(foreign_dir / "src.duckdb", _rows(4) if other == "source" else _rows(6))
    foreign = build_store("d", foreign_source if other == "source" else source, CATALOG, foreign_dir,
                          deployment_key(foreign_dir))  # another key in its own directory
    engine = StoreEngine("d", source, CATALOG, tmp_path)
    expected, path = _exact(engine), engine.path
    engine.close()
    os.chmod(path, 0o600)
    shutil.copyfile(foreign, path)  # the other store, under the name this source and key expect
    engine = StoreEngine("d", source, CATALOG, tmp_path)
    try:
        assert _exact(engine) == expected
        stamp = fingerprint(source, CATALOG, deployment_key(tmp_path))
        assert engine.run(f"SELECT format, fingerprint FROM {store_layout.META}").rows == ((FORMAT, stamp),)  # rebuilt
        assert Counter(engine.run("SELECT * FROM t").rows) != _store_rows(foreign)
    finally:
        engine.close()



def test_one_row_per_unit_is_checked_against_the_data(tmp_path: Path) -> None:
    catalog = Catalog((TABLE, USERS))
    good = _source(tmp_path / "good.duckdb", _rows(3), users=[(1, "free"), (2, "pro")])
    engine = StoreEngine("d", good, catalog, tmp_path)
    try:
        planned = plan("SELECT plan, COUNT(*) FROM users GROUP BY plan", catalog, epsilon=1.0, delta=1e-8,
                       mechanism="laplace", bounding="store")
        assert "rank" not in planned.sql  # nothing to bound
        assert sorted(engine.run(planned.sql).rows) == [("free", 1, 1), ("pro", 1, 1)]
    finally:
        engine.close()
    bad = _source(tmp_path / "bad.duckdb", _rows(3), users=[(1, "free"), (2, "pro"), (2, "free")])
    with pytest.raises(StoreError, match="table users is declared one_row_per_unit but 1 of its rows"):
        StoreEngine("d", bad, catalog, tmp_path)
    assert not list(tmp_path.glob("d.store-*.tmp")) and not list(tmp_path.glob(".d.store-*"))


def test_the_key_is_created_once_owner_only_and_a_readable_key_is_refused(tmp_path: Path) -> None:
    key = deployment_key(tmp_path)
    assert deployment_key(tmp_path) == key and re.fullmatch(r"[0-9a-f]{64}", key)
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600
    os.chmod(tmp_path / KEY_FILE, 0o644)
    with pytest.raises(StoreError, match="chmod 600"):
        deployment_key(tmp_path)


def test_the_store_is_read_only_and_never_holds_the_key(tmp_path: Path) -> None:
    engine = StoreEngine("d", _source(tmp_path / "src.duckdb", _rows(4)), CATALOG, tmp_path)
    key = (tmp_path / KEY_FILE).read_text().strip()
    try:
        assert engine.path.stat().st_mode & 0o777 == 0o400
        assert key.encode() not in engine.path.read_bytes()
        assert store_path(tmp_path, "d", "x" * 64).parent == tmp_path
        with pytest.raises(ExecutionFailed):  # read-only: the engine's fixed error
            engine.run("CREATE TABLE evil AS SELECT 1")
    finally:
        engine.close()


def test_rebuilds_while_eight_threads_query_give_answers_from_one_store(tmp_path: Path) -> None:
    versions = [_rows(4), _rows(7, extra=2)]
    source = _source(tmp_path / "src.duckdb", versions[0])
    expected = []
    for i, data in enumerate(versions):
        probe = StoreEngine(f"p{i}", _source(tmp_path / f"v{i}.duckdb", data), CATALOG, tmp_path)  # same key
        expected.append(_exact(probe, "SELECT g, COUNT(*), SUM(x) FROM t GROUP BY g"))
        probe.close()
    engine = StoreEngine("d", source, CATALOG, tmp_path)
    stop = threading.Event()

    def client() -> list[tuple[tuple[object, ...], ...]]:
        seen = []
        while not stop.is_set():
            engine.refresh()
            seen.append(tuple(sorted(_exact(engine, "SELECT g, COUNT(*), SUM(x) FROM t GROUP BY g"))))
        return seen

    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(client) for _ in range(8)]
            for i in range(4):
                os.replace(_source(tmp_path / f"next{i}.duckdb", versions[(i + 1) % 2]), source)
                engine.refresh()
            stop.set()
            answers = [a for f in futures for a in f.result()]
    finally:
        engine.close()
    allowed = {tuple(sorted(e)) for e in expected}
    assert answers and set(answers) <= allowed


def test_serve_refuses_a_table_that_is_not_one_row_per_unit(demo: DemoFiles, tmp_path: Path) -> None:
    policy = _store_policy(demo, tmp_path, one_row_per_unit="visits")
    with pytest.raises(StoreError, match="table visits is declared one_row_per_unit"):
        build_env(Settings(policy=policy))


def _store_policy(demo: DemoFiles, directory: Path, *, one_row_per_unit: str = "users",
                  database: Path | None = None) -> Path:
    policy = policy_copy(demo, directory, epsilon=100.0, delta=1e-4)
    text = policy.read_text()  # the demo policy declares the store and users one row per unit: declared here
    text = re.sub(r"^(bounding|one_row_per_unit) = .*\n", "", text, flags=re.MULTILINE)
    text = text.replace("[datasets.demo]\n", '[datasets.demo]\nbounding = "store"\n', 1)
    text = text.replace(f"[datasets.demo.tables.{one_row_per_unit}]\n",
                        f"[datasets.demo.tables.{one_row_per_unit}]\none_row_per_unit = true\n", 1)
    if database is not None:
        text = re.sub(r"^path = .*$", f"path = {json.dumps(str(database))}", text, count=1, flags=re.MULTILINE)
    policy.write_text(text)
    return policy


def _wait_for(condition: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the store to be rebuilt"
        time.sleep(0.05)


def test_http_rebuild_while_eight_clients_query_no_5xx(demo: DemoFiles, tmp_path: Path) -> None:
    database = tmp_path / "data.duckdb"
    shutil.copyfile(demo.database, database)
    other = build_demo(tmp_path / "other", users=200, rows=5000).database
    policy = _store_policy(demo, tmp_path, database=database)
    server = Server(tmp_path / "server.log").start(policy)
    stop = threading.Event()
    queries = ["SELECT region, COUNT(*) FROM visits GROUP BY region",
               "SELECT category, SUM(amount) FROM visits GROUP BY category",
               "SELECT plan, COUNT(*) FROM users GROUP BY plan",
               "SELECT COUNT(*) FROM visits WHERE amount > 10"]

    def client(i: int) -> list[int]:
        statuses = []
        with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {demo.analyst_key}"},
                          timeout=60) as http:
            n = 0
            while not stop.is_set() or n < 3:
                sql = queries[n % len(queries)]
                body = {"dataset": "demo", "sql": sql, "epsilon": 0.01 + (i * 1000 + n) * 1e-9}
                statuses.append(http.post("/v1/query", json=body).status_code)
                n += 1
        return statuses

    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(client, i) for i in range(8)]
            for i in range(2):
                copy = tmp_path / f"swap{i}.duckdb"
                shutil.copyfile(other if i % 2 == 0 else demo.database, copy)
                os.replace(copy, database)
                # the next swap waits for this one's rebuild: on a loaded machine two swaps could otherwise
                # both land before any query notices the first
                _wait_for(lambda i=i: server.log.read_text().count("now answers from the bounding store") >= i + 2)
            stop.set()
            statuses = [s for f in futures for s in f.result()]
        assert statuses and set(statuses) == {200}, Counter(statuses)
        assert len(list(tmp_path.glob("demo.store-*.duckdb"))) == 1  # old stores are deleted
        assert server.log.read_text().count("now answers from the bounding store") >= 3  # start-up + 2 rebuilds
    finally:
        server.stop()


def test_a_failed_rebuild_while_serving_is_refused_with_a_fixed_message(tmp_path: Path) -> None:
    """The reason (here: how many rows share a unit) depends on the data: it goes to the log, not the analyst."""
    catalog = Catalog((TABLE, USERS))
    source = _source(tmp_path / "src.duckdb", _rows(3), users=[(1, "free"), (2, "pro")])
    engine = StoreEngine("d", source, catalog, tmp_path)
    try:
        os.replace(_source(tmp_path / "next.duckdb", _rows(3), users=[(1, "free"), (1, "pro")]), source)
        with pytest.raises(StoreUnavailable) as raised:
            engine.refresh()
        assert str(raised.value) == StoreUnavailable.default_message and raised.value.code == "execution_failed"
    finally:
        engine.close()
