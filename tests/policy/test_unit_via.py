"""`unit_via` in the policy file (docs/policy.md, proxy/policy/unit_paths.py): the path is read and checked against
the dataset's tables, the unit column takes its parent's type, and the bounding store materialises it."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from proxy.policy.load import load_policy, policy_problems
from proxy.query.catalog import UnitHop
from proxy.store.duckdb_store import StoreEngine, StoreError

ANALYST = 'role = "analyst"\nkey_sha256 = "' + "a" * 64 + '"\nbudgets = { shop = { epsilon = 3.0, delta = 1e-6 } }'


def _policy(tmp_path: Path, lineitem: str, extra: str = "") -> Path:
    duckdb.connect(str(tmp_path / "shop.duckdb")).close()
    path = tmp_path / "policy.toml"
    path.write_text(f"""
[datasets.shop]
path = "shop.duckdb"
{extra}
[datasets.shop.tables.orders]
privacy_unit = "o_custkey"
max_rows = 4
[datasets.shop.tables.orders.columns]
o_orderkey = {{ type = "BIGINT" }}
o_custkey = {{ type = "INTEGER" }}
o_prio = {{ type = "VARCHAR", groupable = true }}

[datasets.shop.tables.lineitem]
max_rows = 10
{lineitem}
[datasets.shop.tables.lineitem.columns]
l_orderkey = {{ type = "BIGINT" }}
l_qty = {{ type = "INTEGER", bounds = [0, 50] }}

[analysts.alice]
{ANALYST}
""")
    return path


def test_a_declared_path_gives_the_table_its_parents_unit(tmp_path: Path) -> None:
    policy = load_policy(_policy(tmp_path, 'unit_via = ["l_orderkey -> orders.o_orderkey", "orders.o_custkey"]'))
    dataset = policy.dataset("shop")
    assert dataset is not None
    table = dataset.catalog.table("lineitem")
    assert table is not None
    assert table.privacy_unit == "o_custkey"
    assert table.unit_via == (UnitHop("l_orderkey", "orders", "o_orderkey"),)
    assert [(c.name, c.type, c.groupable) for c in table.columns][-1] == ("o_custkey", "INTEGER", False)


@pytest.mark.parametrize(("lineitem", "extra", "problem"), [
    ('unit_via = ["l_orderkey -> orders.o_orderkey", "orders.o_prio"]', "",
     "datasets.shop.tables.lineitem.unit_via: the last element must be orders.o_custkey, the privacy unit of orders, "
     "not orders.o_prio"),
    ('unit_via = ["l_nokey -> orders.o_orderkey", "orders.o_custkey"]', "",
     "datasets.shop.tables.lineitem.unit_via: 'l_nokey' is not a declared column of lineitem"),
    ('unit_via = ["l_orderkey -> parts.p_key", "parts.o_custkey"]', "",
     "datasets.shop.tables.lineitem.unit_via: 'parts' is not a protected table of the dataset (a hop goes to a "
     "declared protected table)"),
    ('unit_via = ["l_orderkey -> orders.o_nokey", "orders.o_custkey"]', "",
     "datasets.shop.tables.lineitem.unit_via: 'o_nokey' is not a declared column of orders"),
    ('unit_via = ["l_orderkey -> orders.o_orderkey", "customer.c_custkey"]', "",
     "datasets.shop.tables.lineitem.unit_via: the unit 'customer.c_custkey' must be a column of orders, where the "
     "last hop lands"),
    ('unit_via = ["orders.o_custkey"]', "",
     'datasets.shop.tables.lineitem.unit_via: needs at least one hop "<column> -> <table>.<key>" before the unit '
     '"<table>.<column>"'),
    ('unit_via = ["l_orderkey => orders.o_orderkey", "orders.o_custkey"]', "",
     "datasets.shop.tables.lineitem.unit_via: 'l_orderkey => orders.o_orderkey' is not a hop "
     '"<column> -> <table>.<key>"'),
    ('unit_via = ["l_orderkey -> orders.o_prio", "orders.o_custkey"]', "",
     "datasets.shop.tables.lineitem.unit_via: lineitem.l_orderkey (BIGINT) cannot be a key of orders.o_prio "
     "(VARCHAR)"),
    ('unit_via = ["l_orderkey -> orders.o_orderkey", "orders.o_custkey"]', 'bounding = "per_query"',
     'datasets.shop.tables.lineitem.unit_via: needs bounding = "store" on a DuckDB dataset: the bounding store '
     "materialises the unit of every row (the source has no unit column)"),
    ('unit_via = ["l_orderkey -> orders.o_orderkey", "orders.o_custkey"]\nprivacy_unit = "l_orderkey"', "",
     "datasets.shop.tables.lineitem.privacy_unit: a table with unit_via has the unit its path ends at: remove "
     "privacy_unit"),
])
def test_check_policy_names_what_is_wrong_with_a_path(tmp_path: Path, lineitem: str, extra: str,
                                                      problem: str) -> None:
    assert policy_problems(_policy(tmp_path, lineitem, extra)) == (problem,)


def test_the_store_materialises_the_unit_and_refuses_keys_that_do_not_resolve(tmp_path: Path) -> None:
    policy = load_policy(_policy(tmp_path, 'unit_via = ["l_orderkey -> orders.o_orderkey", "orders.o_custkey"]'))
    dataset = policy.dataset("shop")
    assert dataset is not None
    (tmp_path / "stores").mkdir()
    con = duckdb.connect(str(dataset.path))
    con.execute("CREATE TABLE orders (o_orderkey BIGINT, o_custkey INTEGER, o_prio VARCHAR)")
    con.execute("CREATE TABLE lineitem (l_orderkey BIGINT, l_qty INTEGER)")
    con.execute("INSERT INTO orders VALUES (1, 7, 'a'), (2, 8, 'b')")
    con.execute("INSERT INTO lineitem VALUES (1, 3), (1, 4), (2, 5)")
    con.close()
    store = StoreEngine("shop", dataset.path, dataset.catalog, tmp_path / "stores")
    try:
        assert store.run('SELECT o_custkey, l_qty FROM lineitem ORDER BY l_qty').rows == ((7, 3), (7, 4), (8, 5))
    finally:
        store.close()
    con = duckdb.connect(str(dataset.path))
    con.execute("INSERT INTO lineitem VALUES (3, 1), (3, 2)")  # order 3 does not exist
    con.close()
    with pytest.raises(StoreError, match=r"table lineitem declares its unit through l_orderkey -> "
                                         r"orders\.o_orderkey, but 2 rows of lineitem have a l_orderkey"):
        StoreEngine("shop", dataset.path, dataset.catalog, tmp_path / "stores")
