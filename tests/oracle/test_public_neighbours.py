"""The neighbouring-dataset oracle for queries over public tables alone (docs/privacy.md §3.1): such a query is
answered exactly and free, which is private only if its answer is the same on every pair of neighbouring
datasets. Each dataset here has the same public tables (region, nation, supplier, supply) and different
protected rows (orders, one row per order of a customer): D; D′ without one customer and all their orders;
D″ with an adversarial customer added (many orders, extreme amounts, every supplier); and D‴ with no protected
row at all. Each is read through its own bounding store, as the product reads it, and every public query's
answer, with joins, correlated subqueries, CTEs and HAVING, must be identical on all four. A query whose
subquery reads the protected table is refused on every one, before any data is read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from proxy.engines.duckdb_engine import Engine
from proxy.query.errors import QueryError
from proxy.query.planner import plan_public
from proxy.store.duckdb_store import build_store
from tests.query.test_public_joins import CATALOG, NATIONS, SAME, SUPPLIERS, SUPPLIES

ORDERS = [(c, s, amount) for c in range(1, 9) for s, amount in ((c % 5 + 1, c * 3.5), ((c + 2) % 5 + 1, 10.0))]
NEIGHBOURS = {
    "D": ORDERS,
    "D minus customer 3": [r for r in ORDERS if r[0] != 3],
    "D plus an adversarial customer": ORDERS + [(99, s, 100.0) for s in range(1, 6) for _ in range(40)],
    "no protected row": [],
}
QUERIES = [*SAME, "SELECT DISTINCT n_name FROM nation JOIN region ON n_region = r_key WHERE r_name = 'EUROPE'"]


def _dataset(directory: Path, orders: list[tuple[int, int, float]]) -> Engine:
    source = directory / "source.duckdb"
    with duckdb.connect(str(source)) as con:
        con.execute("CREATE TABLE region (r_key BIGINT, r_name VARCHAR, r_secret VARCHAR)")
        con.executemany("INSERT INTO region VALUES (?, ?, 'x')", [(0, "AFRICA"), (1, "AMERICA"), (2, "ASIA"),
                                                                 (3, "EUROPE")])
        con.execute("CREATE TABLE nation (n_key BIGINT, n_name VARCHAR, n_region BIGINT)")
        con.executemany("INSERT INTO nation VALUES (?, ?, ?)", NATIONS)
        con.execute("CREATE TABLE supplier (s_key BIGINT, s_name VARCHAR, s_nation BIGINT, s_bal DECIMAL(12,2))")
        con.executemany("INSERT INTO supplier VALUES (?, ?, ?, ?)", SUPPLIERS)
        con.execute("CREATE TABLE supply (p_key BIGINT, s_key BIGINT, cost DECIMAL(12,2), qty INTEGER)")
        con.executemany("INSERT INTO supply VALUES (?, ?, ?, ?)", SUPPLIES)
        con.execute("CREATE TABLE orders (cust BIGINT, s_key BIGINT, amount DECIMAL(12,2))")
        if orders:
            con.executemany("INSERT INTO orders VALUES (?, ?, ?)", orders)
    store = build_store("d", source, CATALOG, directory, "0" * 64, memory_limit="1GB")
    return Engine(store, threads=1, memory_limit="1GB", timeout_s=60.0)


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Engine]]:
    built = {name: _dataset(tmp_path_factory.mktemp("neighbour"), rows) for name, rows in NEIGHBOURS.items()}
    yield built
    for engine in built.values():
        engine.close()


@pytest.mark.parametrize("sql", QUERIES)
def test_the_answer_is_the_same_on_every_neighbouring_dataset(sql: str, engines: dict[str, Engine]) -> None:
    planned = plan_public(sql, CATALOG, max_rows=100)
    assert planned is not None
    answers = {name: engine.run(planned.tree.sql("duckdb")).rows for name, engine in engines.items()}
    assert answers["D"]  # rows to compare: not vacuous
    assert all(a == answers["D"] for a in answers.values()), answers


def test_the_protected_rows_differ_between_the_neighbours(engines: dict[str, Engine]) -> None:
    """The comparison above can fail: the same question asked of the protected table answers differently."""
    counts = {name: engine.run("SELECT COUNT(*), SUM(amount) FROM orders").rows[0] for name, engine in engines.items()}
    assert len(set(counts.values())) == len(counts)


@pytest.mark.parametrize("sql", [
    "SELECT s_name FROM supplier s WHERE s_bal > (SELECT 0.5 * SUM(amount) FROM orders o WHERE o.s_key = s.s_key)",
    "SELECT s_name FROM supplier WHERE s_key IN (SELECT s_key FROM orders WHERE amount > 50)",
])
def test_a_query_whose_answer_would_depend_on_protected_rows_is_refused(sql: str, engines: dict[str, Engine]) -> None:
    """Run plainly, it does depend on them (so it must never be answered exactly); planned, it is refused."""
    plain = {name: engine.run(sql).rows for name, engine in engines.items()}
    assert len({tuple(rows) for rows in plain.values()}) > 1
    with pytest.raises(QueryError) as err:
        plan_public(sql, CATALOG, max_rows=100)
    assert err.value.detail["construct"] == "SUBQUERY" and err.value.detail["table"] == "orders"
