"""Queries over public tables with joins, subqueries and CTEs (proxy/query/public/joined.py) against DuckDB: on
a small supplier schema with NULLs, duplicate keys and decimals, the rebuilt query answers exactly what the
analyst's text answers when run plainly; every column is a declared one under a generated alias; a protected
table in the FROM tree makes a DP query (None), one in an expression subquery is refused saying why; and the
allow-list refuses what it does not name."""

from __future__ import annotations

import duckdb
import pytest

from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
from proxy.query.errors import QueryError
from proxy.query.planner import plan_public

REGION = PublicTable("region", (ColumnSpec("r_key", "BIGINT"), ColumnSpec("r_name", "VARCHAR")), ("r_key",))
NATION = PublicTable("nation", (ColumnSpec("n_key", "BIGINT"), ColumnSpec("n_name", "VARCHAR"),
                                ColumnSpec("n_region", "BIGINT")), ("n_key",))
SUPPLIER = PublicTable("supplier", (ColumnSpec("s_key", "BIGINT"), ColumnSpec("s_name", "VARCHAR"),
                                    ColumnSpec("s_nation", "BIGINT"), ColumnSpec("s_bal", "DECIMAL(12,2)")),
                       ("s_key",))
SUPPLY = PublicTable("supply", (ColumnSpec("p_key", "BIGINT"), ColumnSpec("s_key", "BIGINT"),
                                ColumnSpec("cost", "DECIMAL(12,2)"), ColumnSpec("qty", "INTEGER")), ("p_key",))
ORDERS = TableSchema("orders", "cust", (ColumnSpec("cust", "BIGINT"), ColumnSpec("s_key", "BIGINT"),
                                        ColumnSpec("amount", "DECIMAL(12,2)", bounds=(0, 100))))
CATALOG = Catalog((ORDERS,), public=(REGION, NATION, SUPPLIER, SUPPLY))

SAME = [
    "SELECT DISTINCT n_name FROM nation JOIN region ON n_region = r_key WHERE r_name = 'EUROPE' ORDER BY 1",
    "SELECT n.n_name, r.r_name FROM nation n LEFT JOIN region r ON n.n_region = r.r_key ORDER BY 1, 2",
    "SELECT s_name, n_name FROM supplier, nation, region WHERE s_nation = n_key AND n_region = r_key "
    "AND r_name IN ('EUROPE', 'ASIA') ORDER BY s_name",
    # Q2's shape: a correlated scalar subquery with the same tables as the outer query
    "SELECT s_name, p_key, cost FROM supply, supplier WHERE supply.s_key = supplier.s_key AND cost = "
    "(SELECT MIN(cost) FROM supply s2, supplier x WHERE s2.s_key = x.s_key AND s2.p_key = supply.p_key) "
    "ORDER BY s_bal DESC, s_name, p_key LIMIT 3",
    # Q11's shape: HAVING against an uncorrelated scalar subquery, ORDER BY an alias
    "SELECT p_key, SUM(cost * qty) AS value FROM supply JOIN supplier USING_NOT (s_key) GROUP BY p_key",
    # Q16's shape: COUNT(DISTINCT), NOT IN a subquery, NOT LIKE, IN a list
    "SELECT n_name, COUNT(DISTINCT s_key) AS c FROM supplier JOIN nation ON s_nation = n_key WHERE s_key NOT IN "
    "(SELECT s_key FROM supply WHERE qty IS NULL) AND s_name NOT LIKE '%x%' AND n_key IN (1, 2, 3) "
    "GROUP BY n_name ORDER BY c DESC, n_name",
    "SELECT s_name FROM supplier s WHERE EXISTS (SELECT * FROM supply p WHERE p.s_key = s.s_key AND p.qty > 5) "
    "AND NOT EXISTS (SELECT 1 FROM nation WHERE n_key = s.s_nation AND n_name = 'PERU') ORDER BY s_name",
    "WITH big AS (SELECT s_key, SUM(qty) AS q FROM supply GROUP BY s_key) "
    "SELECT s_name, q FROM supplier JOIN big ON supplier.s_key = big.s_key WHERE q BETWEEN 5 AND 100 ORDER BY 1",
    "SELECT t.n, COUNT(*) AS k FROM (SELECT n_name AS n, n_region FROM nation WHERE n_key > 0) AS t "
    "GROUP BY t.n HAVING COUNT(*) >= 1 ORDER BY k DESC, t.n",
    "SELECT s_name, (SELECT COUNT(*) FROM supply p WHERE p.s_key = s.s_key) AS parts, "
    "CASE WHEN s_bal > 100 THEN 'rich' WHEN s_bal IS NULL THEN NULL ELSE 'poor' END AS kind, s_bal * 2 - 1 AS b "
    "FROM supplier s ORDER BY 1",
    "SELECT r_name, AVG(s_bal) AS a, MIN(s_bal) AS lo, MAX(s_name) AS hi, COUNT(s_bal) AS c FROM supplier "
    "JOIN nation ON s_nation = n_key JOIN region ON n_region = r_key GROUP BY r_name ORDER BY r_name",
    "SELECT a.n_name, b.n_name FROM nation a CROSS JOIN nation b WHERE a.n_key < b.n_key ORDER BY 1, 2",
    # output aliases in GROUP BY, HAVING and ORDER BY; a subquery's own column of an output's name stays its own
    "SELECT s_nation AS n, COUNT(*) AS c FROM supplier GROUP BY n HAVING c >= 1 ORDER BY c DESC, n",
    "SELECT s_nation AS n_key, COUNT(*) AS c FROM supplier GROUP BY s_nation HAVING COUNT(*) >= "
    "(SELECT MIN(n_key) FROM nation WHERE n_key > 0) ORDER BY 1",
]
SAME[4] = ("SELECT p_key, SUM(cost * qty) AS value FROM supply, supplier WHERE supply.s_key = supplier.s_key "
           "GROUP BY p_key HAVING SUM(cost * qty) > (SELECT SUM(cost * qty) * 0.1 FROM supply) ORDER BY value DESC")

NATIONS = [(0, "ALGERIA", 0), (1, "FRANCE", 3), (2, "GERMANY", 3), (3, "PERU", 1), (4, "JAPAN", 2), (5, "X", None)]
SUPPLIERS = [(1, "s1", 1, "10.50"), (2, "s2", 2, "200.00"), (3, "s3x", 3, None), (4, "s4", 1, "-5.25"),
             (5, "s5", 4, "99.99")]
SUPPLIES = [(1, 1, "3.00", 10), (1, 2, "2.00", 4), (2, 2, "7.50", None), (2, 4, "7.50", 8), (3, 5, "1.25", 100),
            (3, 1, "1.00", 6), (4, 3, "9.00", 1)]


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
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
    return con


@pytest.mark.parametrize("sql", SAME)
def test_the_rebuilt_query_answers_exactly_what_the_text_does(sql: str, con: duckdb.DuckDBPyConnection) -> None:
    planned = plan_public(sql, CATALOG, max_rows=100)
    assert planned is not None
    expected = con.execute(sql).fetchall()
    assert expected  # a comparison with rows: not vacuous
    assert con.execute(planned.tree.sql("duckdb")).fetchall() == expected
    assert planned.query.columns == tuple(d[0] for d in con.execute(sql).description) or "*" in sql or "(" in sql


def test_the_rebuilt_sql_names_declared_columns_under_generated_aliases() -> None:
    planned = plan_public("SELECT x.n_name FROM nation AS x JOIN region AS evil ON x.n_region = evil.r_key "
                          "WHERE evil.r_name = 'EUROPE'", CATALOG, max_rows=100)
    assert planned is not None
    text = planned.tree.sql("duckdb")
    assert "evil" not in text and '"t2"."r_name"' in text
    assert [t.name for t in planned.query.tables] == ["nation", "region"]
    assert planned.query.label == "the public tables nation, region"


def test_an_alias_in_group_by_stands_for_its_output_never_an_undeclared_column() -> None:
    """`r_secret` is a column of region in the database, not declared: an alias of that name in GROUP BY must be
    the output's expression, not a name the engine would bind to the undeclared column."""
    planned = plan_public("SELECT r_name AS r_secret, COUNT(*) FROM region JOIN nation ON r_key = n_region "
                          "GROUP BY r_secret", CATALOG, max_rows=100)
    assert planned is not None and "r_secret" not in planned.tree.sql("duckdb").split(" AS ", 2)[-1]
    assert 'GROUP BY "t1"."r_name"' in planned.tree.sql("duckdb")


def test_the_limit_asks_for_one_row_more_than_may_be_released(con: duckdb.DuckDBPyConnection) -> None:
    sql = "SELECT a.n_name FROM nation a, nation b"
    planned = plan_public(sql, CATALOG, max_rows=7)
    assert planned is not None and len(con.execute(planned.tree.sql("duckdb")).fetchall()) == 8
    assert str(plan_public(sql + " LIMIT 3", CATALOG, max_rows=7).tree.args["limit"].expression) == "3"


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM orders o JOIN supplier s ON o.s_key = s.s_key",
    "SELECT COUNT(*) FROM supplier s JOIN orders o ON o.s_key = s.s_key",
    "SELECT s_name FROM supplier, (SELECT s_key FROM orders) AS o WHERE supplier.s_key = o.s_key",
    "WITH o AS (SELECT s_key FROM orders) SELECT s_name FROM supplier JOIN o ON supplier.s_key = o.s_key",
    "SELECT n_name FROM nation JOIN unknown_table ON n_key = k",
    "SELECT n_name FROM nation, read_csv('/etc/passwd') AS f",  # a table function is no public table
])
def test_a_protected_or_undeclared_relation_makes_a_dp_query(sql: str) -> None:
    """Never answered as public: None (the DP rules analyse it), or the DP rules' refusal of a wrapper they do
    not flatten (a CTE joined), raised while parsing, before the public rules."""
    try:
        planned = plan_public(sql, CATALOG, max_rows=100)
    except QueryError as error:
        assert error.detail.get("construct") == "WITH", error.message
        planned = None
    assert planned is None


@pytest.mark.parametrize(("sql", "why"), [
    ("SELECT s_name FROM supplier s WHERE s_bal > (SELECT 0.5 * SUM(amount) FROM orders o WHERE o.s_key = s.s_key)",
     "a correlated aggregate over protected rows would be a release inside the WHERE"),
    ("SELECT s_name FROM supplier WHERE s_key IN (SELECT s_key FROM orders)", "which public rows the WHERE keeps"),
    ("SELECT s_name, (SELECT MAX(amount) FROM orders) AS m FROM supplier",
     "an aggregate over protected rows would be a release inside the SELECT"),
    ("SELECT n_name FROM nation WHERE EXISTS (SELECT 1 FROM supplier s WHERE s.s_nation = n_key AND s.s_key IN "
     "(SELECT s_key FROM orders))", "which public rows the WHERE keeps"),
])
def test_a_protected_table_in_a_subquery_is_refused_saying_why(sql: str, why: str) -> None:
    with pytest.raises(QueryError) as err:
        plan_public(sql, CATALOG, max_rows=100)
    assert (err.value.code, err.value.detail["construct"], err.value.detail["table"]) == (
        "unsupported", "SUBQUERY", "orders")
    assert why in err.value.message


@pytest.mark.parametrize(("sql", "code", "construct"), [
    ("SELECT r_secret FROM region JOIN nation ON r_key = n_region", "policy", "COLUMN"),
    ("SELECT n_name FROM nation WHERE n_key IN (SELECT r_secret FROM region)", "policy", "COLUMN"),
    ("SELECT s_key FROM supplier JOIN supply ON supplier.s_key = supply.s_key", "unsupported", "COLUMN"),
    ("SELECT n_name FROM nation JOIN region USING (r_key)", "unsupported", "JOIN"),
    ("SELECT n_name FROM nation NATURAL JOIN region", "unsupported", "JOIN"),
    ("SELECT n_name FROM nation WHERE n_key IN (SELECT * FROM read_parquet('x.parquet'))", "unsupported", "FROM"),
    ("SELECT UPPER(n_name) FROM nation JOIN region ON n_region = r_key", "unsupported", "UPPER()"),
    ("SELECT n_name FROM nation JOIN region ON n_region = r_key WHERE RANDOM() > 0.5", "unsupported", "RAND()"),
    ("SELECT n_name, ROW_NUMBER() OVER () FROM nation JOIN region ON n_region = r_key", "unsupported", "WINDOW"),
    ("SELECT n_name FROM nation JOIN region ON n_region = r_key LIMIT 1 OFFSET 1", "unsupported", "OFFSET"),
    ("SELECT n_name FROM nation JOIN region ON n_region = r_key WHERE COUNT(*) > 1", "unsupported", "COUNT()"),
    ("SELECT n_name FROM nation WHERE n_key IN (SELECT n_key FROM nation UNION SELECT r_key FROM region)",
     "unsupported", "UNION"),
    ("WITH RECURSIVE q AS (SELECT n_key FROM nation) SELECT n_key FROM q", "unsupported", "WITH"),
    ("SELECT n_name FROM staging.nation JOIN region ON n_region = r_key", "policy", "SCHEMA"),
    ("SELECT n_name FROM nation JOIN region ON n_region = r_key WHERE n_name = DATE '2024-02-30'",
     "unsupported", "DATE"),
])
def test_what_a_public_join_may_not_do_is_refused(sql: str, code: str, construct: str) -> None:
    with pytest.raises(QueryError) as err:
        plan_public(sql, CATALOG, max_rows=100)
    assert (err.value.code, err.value.detail.get("construct")) == (code, construct), err.value.message


def test_a_preview_gives_the_same_refusal_and_a_public_query_none_to_preview() -> None:
    """`plan` (POST /v1/query/preview, dpproxy explain) of a query over public tables: its refusal if it has
    one, else that there is nothing to charge or preview."""
    from proxy.query.planner import plan

    def refused(sql: str) -> tuple[str, str]:
        with pytest.raises(QueryError) as err:
            plan(sql, CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace")
        return err.value.code, err.value.detail["construct"]

    assert refused("SELECT s_name FROM supplier WHERE s_key IN (SELECT s_key FROM orders)") == (
        "unsupported", "SUBQUERY")
    assert refused("SELECT n_name FROM nation JOIN region ON n_region = r_key") == ("policy", "TABLE")
