"""The SQL BI tools send (issue #14, first part): the same question in every supported dialect, and names
qualified by schema and database, plan exactly as DuckDB's own SQL does."""

from __future__ import annotations

import httpx
import pytest
from sqlglot import exp

from proxy.query.catalog import Catalog
from proxy.query.errors import InvalidParameter, PolicyError
from proxy.query.parse.statement import parse
from proxy.query.planner import plan, repeat_identity
from tests.support.catalogs import VISITS

CATALOG = Catalog((VISITS,), schemas=("main", "public"), databases=("demo",))
DUCKDB = "SELECT region, COUNT(*) AS n, SUM(amount) AS s FROM visits WHERE age >= 30 GROUP BY region LIMIT 3"
SAME_QUESTION = [
    ("duckdb", 'SELECT "region", COUNT(*) AS n, SUM(amount) AS s FROM main.visits WHERE age >= 30 GROUP BY region '
               "LIMIT 3"),
    ("postgres", "SELECT region, COUNT(*) AS n, SUM(amount) AS s FROM public.visits WHERE age >= 30 GROUP BY region "
                 "LIMIT 3"),
    ("mysql", "SELECT `region`, COUNT(*) AS n, SUM(`amount`) AS s FROM `visits` WHERE `age` >= 30 GROUP BY `region` "
              "LIMIT 3"),
    ("bigquery", "SELECT region, COUNT(*) AS n, SUM(amount) AS s FROM `main.visits` WHERE age >= 30 GROUP BY region "
                 "LIMIT 3"),
    ("snowflake", "SELECT REGION, COUNT(*) AS N, SUM(AMOUNT) AS S FROM DEMO.PUBLIC.VISITS WHERE AGE >= 30 "
                  "GROUP BY REGION LIMIT 3"),
    ("tsql", "SELECT TOP 3 [region], COUNT(*) AS n, SUM([amount]) AS s FROM [main].[visits] WHERE [age] >= 30 "
             "GROUP BY [region]"),
]


def _plan(sql: str, dialect: str = "duckdb"):  # type: ignore[no-untyped-def]
    return plan(sql, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=3, dialect=dialect)


@pytest.mark.parametrize(("dialect", "sql"), SAME_QUESTION, ids=[d for d, _ in SAME_QUESTION])
def test_each_dialect_plans_the_same_question_as_duckdb(dialect: str, sql: str) -> None:
    reference, planned = _plan(DUCKDB), _plan(sql, dialect)
    assert planned.sql == reference.sql  # the same rewritten SQL runs
    assert planned.price == reference.price  # the same noise and charge
    assert planned.analysis.limit == 3 and [o.name.lower() for o in planned.analysis.outputs] == ["region", "n", "s"]
    # one question, one repeat (pipeline.py), unless its columns are released under other names (Snowflake's N)
    same_names = [o.name for o in planned.analysis.outputs] == ["region", "n", "s"]
    assert (repeat_identity(planned, CATALOG) == repeat_identity(reference, CATALOG)) == same_names


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM staging.visits",
    "SELECT COUNT(*) FROM other.main.visits",
    "SELECT COUNT(*) FROM visits WHERE staging.visits.age > 3",
])
def test_a_qualifier_of_another_schema_or_database_is_refused(sql: str) -> None:
    with pytest.raises(PolicyError, match=r"unknown (schema|database)"):
        _plan(sql)


def test_qualified_columns_and_quoted_names_in_any_case() -> None:
    reference = _plan("SELECT COUNT(*) AS n FROM visits WHERE age > 3")
    for sql in ('SELECT COUNT(*) AS n FROM "MAIN"."VISITS" WHERE "Age" > 3',
                "SELECT COUNT(*) AS n FROM main.visits WHERE main.visits.age > 3",
                "SELECT COUNT(*) AS n FROM demo.main.visits v WHERE v.age > 3"):
        assert _plan(sql).sql == reference.sql, sql


@pytest.mark.parametrize(("dialect", "sql"), SAME_QUESTION, ids=[d for d, _ in SAME_QUESTION])
def test_the_audited_text_names_its_dialect_and_reads_back_as_the_same_query(dialect: str, sql: str) -> None:
    """Issue #26 (5): the audit log (and the ledger's sql_sha256) recorded the query printed as DuckDB's, where
    PostgreSQL's `age / 10` (integer division) reads as a division of reals. The text is now printed in its own
    dialect, named first unless DuckDB's, and reads back as the tree that was planned."""
    planned = _plan(sql, dialect)
    prefix = "" if dialect == "duckdb" else f"/* {dialect} */ "
    assert planned.normalized_sql.startswith(prefix + "SELECT ")
    assert parse(planned.normalized_sql, dialect) == parse(sql, dialect)
    divided = _plan("SELECT COUNT(*) FROM visits WHERE age / 10 = 3", dialect)
    assert parse(divided.normalized_sql, dialect).find(exp.Div).args.get("typed") == (dialect in ("postgres", "tsql"))


def test_an_unknown_dialect_names_the_supported_ones() -> None:
    with pytest.raises(InvalidParameter) as err:
        _plan("SELECT COUNT(*) FROM visits", "oracle")
    assert "postgres" in str(err.value) and err.value.detail["supported"][0] == "duckdb"


def test_dialect_over_http(analyst: httpx.Client) -> None:
    tsql = analyst.post("/v1/query", json={"sql": "SELECT TOP 2 [region], COUNT(*) AS n FROM [main].[visits] "
                                                  "GROUP BY [region]", "dialect": "tsql", "epsilon": 0.01})
    assert tsql.status_code == 200, tsql.text
    assert len(tsql.json()["rows"]) == 2
    unknown = analyst.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM visits", "dialect": "oracle"})
    body = unknown.json()
    assert unknown.status_code == 400 and body["code"] == "invalid_parameter" and body["charged"] is False
    assert "tsql" in body["error"]
