"""The BI corpus (tests/fixtures/bi_corpus.sql): every query ends as the fixture says, answered with its charge
and partitions or refused with its code and construct; every answered query's SQL runs on the demo data."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from accountant.events import to_json
from proxy.cli.demo import build_demo
from proxy.query.errors import QueryError
from proxy.query.planner import plan
from tests.http.test_redteam import signature
from tests.support.demo_catalog import DEMO

FIXTURE = Path(__file__).parent.parent / "fixtures" / "bi_corpus.sql"


@dataclass(frozen=True)
class Case:
    line: int
    tool: str
    dialect: str
    expect: tuple[str, ...]
    sql: str


def _cases() -> list[Case]:
    cases, header, expect = [], ("", ""), ()
    for number, line in enumerate(FIXTURE.read_text().splitlines(), start=1):
        if line.startswith("-- tool:"):
            tool, _, dialect = line.removeprefix("-- tool:").partition("dialect:")
            header = (tool.strip(), dialect.strip())
        elif line.startswith("-- expect:"):
            outcome, _, rest = line.removeprefix("-- expect:").strip().partition(" ")
            expect = (outcome, *rest.split()) if outcome == "answered" else (outcome, rest)
        elif line and not line.startswith("--"):
            cases.append(Case(number, *header, expect, line))
    return cases


CASES = _cases()


def test_the_corpus_covers_the_tools_and_both_outcomes() -> None:
    assert len(CASES) >= 150
    tools = collections.Counter(c.tool for c in CASES)
    assert {"metabase", "superset", "tableau", "looker", "dbt", "pandas"} <= set(tools)
    assert all(n >= 10 for t, n in tools.items() if t in ("metabase", "superset", "tableau", "looker", "dbt"))
    outcomes = collections.Counter(c.expect[0] for c in CASES)
    assert outcomes["answered"] >= 100 and outcomes["unsupported"] + outcomes["policy"] >= 30


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[duckdb.DuckDBPyConnection]:
    files = build_demo(tmp_path_factory.mktemp("corpus"), users=60, rows=600)
    con = duckdb.connect(str(files.database))
    con.execute("CREATE TABLE departments AS SELECT * FROM (VALUES ('groceries', 'food'), ('dining', 'food'), "
                "('travel', 'leisure'), ('books', 'leisure')) t(category, department)")
    yield con
    con.close()


@pytest.mark.parametrize("case", CASES, ids=[f"L{c.line}:{c.tool}:{c.sql[:40]}" for c in CASES])
def test_corpus_query(case: Case, demo_data: duckdb.DuckDBPyConnection) -> None:
    try:
        planned = plan(case.sql, DEMO, epsilon=0.1, delta=1e-8, mechanism="laplace", dialect=case.dialect)
    except QueryError as err:
        assert (err.code, str(err.detail.get("construct"))) == case.expect, err.message
        return
    assert ("answered", signature(to_json(planned.price.event)), planned.analysis.partitions) == case.expect
    demo_data.execute(planned.sql).fetchall()  # the rewritten SQL runs on the data, whatever it holds
