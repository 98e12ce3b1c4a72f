"""The emulated catalog (proxy/wire/catalog.py) and the statement reading before it (proxy/query/wire_sql.py,
proxy/wire/session.py): what clients probe is answered from the policy alone; nothing else gets there."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import QueryError
from proxy.query.wire_sql import bind, catalog_sql, statement_count
from proxy.wire import pgtypes
from proxy.wire.catalog import RELATIONS, CatalogAnswers
from proxy.wire.session import WireError, dp_comment, first_word

PROBES = [q.strip() for q in (Path(__file__).parent / "fixtures" / "probes.sql").read_text().split("\n;;\n")[1:]
          if q.strip()]
VISITS = TableSchema("visits", "user_id", (
    ColumnSpec("user_id", "BIGINT"), ColumnSpec("region", "VARCHAR", groupable=True),
    ColumnSpec("age", "INTEGER", bounds=(18, 90)), ColumnSpec("day", "DATE"),
    ColumnSpec("amount", "DOUBLE", bounds=(0, 500))))
USERS = TableSchema("users", "user_id", (ColumnSpec("user_id", "BIGINT"), ColumnSpec("plan", "VARCHAR")))


@pytest.fixture(scope="module")
def answers() -> CatalogAnswers:
    return CatalogAnswers(Catalog((VISITS, USERS)), "demo", "analyst")


def test_fixtures_found() -> None:
    assert len(PROBES) >= 20


@pytest.mark.parametrize("sql", PROBES, ids=[f"probe{i}" for i in range(len(PROBES))])
def test_every_captured_client_probe_is_answered(answers: CatalogAnswers, sql: str) -> None:
    names, oids, rows = answers.run(sql)
    assert len(names) == len(oids) and all(len(row) == len(names) for row in rows)
    assert set(oids) <= set(pgtypes.TYPNAMES)  # only built-in types: no client has to look one up


def test_tables_and_columns_are_the_policys(answers: CatalogAnswers) -> None:
    _, _, tables = answers.run("SELECT table_schema, table_name FROM information_schema.tables ORDER BY 2")
    assert tables == [("public", "users"), ("public", "visits")]
    _, _, columns = answers.run("SELECT column_name, data_type FROM information_schema.columns "
                                "WHERE table_name = 'visits' ORDER BY ordinal_position")
    assert columns == [("user_id", "bigint"), ("region", "text"), ("age", "integer"), ("day", "date"),
                       ("amount", "double precision")]
    _, _, described = answers.run(
        "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute a "
        "WHERE a.attrelid = 'visits'::regclass AND a.attnum > 0 ORDER BY a.attnum")
    assert [r[1] for r in described] == ["bigint", "text", "integer", "date", "double precision"]


def test_session_functions(answers: CatalogAnswers) -> None:
    names, _, rows = answers.run("SELECT version(), current_schema(), current_database(), current_user, 1")
    assert names == ("version", "current_schema", "current_database", "current_user", "?column?")
    assert rows[0][0].startswith("PostgreSQL 15.0 ") and rows[0][1:] == ("public", "demo", "analyst", 1)
    _, _, setting = answers.run("SELECT current_setting('standard_conforming_strings')")
    assert setting == [("on",)]


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_parquet('/etc/hostname')",
    "SELECT * FROM glob('/*')",
])
def test_the_catalog_database_reads_no_file(answers: CatalogAnswers, sql: str) -> None:
    with pytest.raises((ValueError, QueryError)):  # not a catalog query (or not parsed): never run there
        answers.run(sql)
    if "glob" not in sql:
        with pytest.raises(duckdb.Error, match="disabled by configuration"):  # and DuckDB refuses it anyway
            answers.run_duckdb(sql)


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM visits",
    "SELECT * FROM visits",
    "SELECT c.relname FROM pg_catalog.pg_class c JOIN visits v ON true",
    "SELECT * FROM 'demo.duckdb'",
    "SELECT * FROM main.visits",
    "SELECT * FROM duckdb_settings()",  # the catalog database's own table functions are not the catalog
    "SELECT * FROM duckdb_databases()",
])
def test_a_query_of_data_is_never_a_catalog_query(sql: str) -> None:
    assert catalog_sql(sql, RELATIONS) is None


def test_the_configuration_is_locked(answers: CatalogAnswers) -> None:
    with pytest.raises(duckdb.Error):
        answers.run_duckdb("SET enable_external_access = true")


def test_bind_substitutes_typed_literals_in_the_tree() -> None:
    sql = "SELECT region, COUNT(*) FROM visits WHERE region = $1 AND age > $2 AND day >= $3 GROUP BY region"
    import datetime

    assert bind(sql, ["x' OR '1'='1", 30, datetime.date(2024, 1, 2)]) == (
        "SELECT region, COUNT(*) FROM visits WHERE region = 'x'' OR ''1''=''1' AND age > 30 "
        "AND day >= CAST('2024-01-02' AS DATE) GROUP BY region")


def test_statements_are_counted_by_tokens() -> None:
    assert statement_count("SELECT 1;") == 1
    assert statement_count("SELECT 1; DROP TABLE visits") == 2
    assert statement_count("SELECT ';' AS a; ;") == 1


def test_dp_comment() -> None:
    options, rest = dp_comment("/* dp: epsilon=0.5 delta=1e-7 */ SELECT COUNT(*) FROM visits")
    assert {k: str(v) for k, v in options.items()} == {"epsilon": "0.5", "delta": "1E-7"}
    assert rest.strip() == "SELECT COUNT(*) FROM visits"
    with pytest.raises(WireError) as refused:
        dp_comment("/* dp: epsilom=0.5 */ SELECT 1")
    assert refused.value.sqlstate == "42704"


@pytest.mark.parametrize(("sql", "word"), [
    ("select 1", "SELECT"), ("  -- x\nWITH a AS (SELECT 1) SELECT 1", "WITH"), ("/* c */ set x = 1", "SET"),
])
def test_first_word(sql: str, word: str) -> None:
    assert first_word(sql) == word
