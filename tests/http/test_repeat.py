"""Repeats cannot average noise away: an identical request gets the first answer, byte for byte, free."""

from __future__ import annotations

import duckdb
import httpx

from proxy.cli.demo import DemoFiles
from proxy.query.parse.statement import DIALECTS
from tests.support.live import StartFresh, policy_copy, spend

SQL = "SELECT category, COUNT(*) AS n, AVG(amount) AS a FROM visits GROUP BY category"


def test_identical_request_returns_the_stored_release_without_a_charge(
    fresh_server: StartFresh, demo: DemoFiles
) -> None:
    server = fresh_server()
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        first = analyst.post("/v1/query", json={"sql": SQL, "epsilon": 0.2})
        assert first.status_code == 200 and first.headers["x-dp-repeat"] == "false"
        spent = spend(analyst)
        # same query, other spelling: keyword case and whitespace do not make a new request
        again = analyst.post("/v1/query", json={"sql": SQL.lower().replace(" ", "  "), "epsilon": 0.2})
        assert again.status_code == 200
        assert again.headers["x-dp-repeat"] == "true"
        assert again.headers["x-dp-charge-id"] == first.headers["x-dp-charge-id"] == first.json()["charge"]["id"]
        assert again.content == first.content  # byte for byte: the same noise, not fresh noise
        assert spend(analyst) == spent
        assert admin.get("/v1/ledger").json()["total"] == 1

        # other parameters are another request, charged anew with fresh noise
        other = analyst.post("/v1/query", json={"sql": SQL, "epsilon": 0.3})
        assert other.headers["x-dp-repeat"] == "false"
        assert spend(analyst)["epsilon_spent"] > spent["epsilon_spent"]
        assert admin.get("/v1/ledger").json()["total"] == 2

        # the admin asking the same query is charged on the admin's own budget: releases are per analyst
        theirs = admin.post("/v1/query", json={"sql": SQL, "epsilon": 0.2})
        assert theirs.headers["x-dp-repeat"] == "false"
        assert admin.get("/v1/ledger").json()["total"] == 3


def test_repeat_survives_a_restart(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server()
    with server.client(demo.analyst_key) as analyst:
        first = analyst.post("/v1/query", json={"sql": SQL})
        assert first.status_code == 200
    server.kill9()
    server.start(server.policy)  # type: ignore[arg-type]
    with server.client(demo.analyst_key) as analyst:
        again = analyst.post("/v1/query", json={"sql": SQL})
        assert again.headers["x-dp-repeat"] == "true" and again.content == first.content


# Issue #26 (5): a repeat was identified by the query as printed in DuckDB's dialect, which drops sqlglot's typed
# division: under postgres `age / 10 = 3` divides integers (ages 30-39), under duckdb it divides reals (age 30),
# both printed `age / 10 = 3`, and the second request came back as a free repeat of the first one's release.
DIVIDED = "SELECT COUNT(DISTINCT user_id) AS n FROM visits WHERE age / 10 = 3"
INTEGER_DIVISION = ("postgres", "tsql")  # `/` between integers divides integers there, reals in the others


def _units(demo: DemoFiles, where: str) -> int:
    """The exact number of users of the demo's visits that pass `where` (DuckDB SQL)."""
    with duckdb.connect(str(demo.database), read_only=True) as con:
        (units,) = con.execute(f"SELECT COUNT(DISTINCT user_id) FROM visits WHERE {where}").fetchone()  # type: ignore[misc]
    return int(units)


def _ask(analyst: httpx.Client, sql: str, dialect: str = "duckdb", epsilon: float = 1.0) -> httpx.Response:
    response = analyst.post("/v1/query", json={"sql": sql, "dialect": dialect, "epsilon": epsilon})
    assert response.status_code == 200, response.text
    return response


def test_the_same_text_is_a_repeat_exactly_in_the_dialects_where_it_means_the_same(
    fresh_server: StartFresh, demo: DemoFiles
) -> None:
    integer, real = _units(demo, "age // 10 = 3"), _units(demo, "age / 10 = 3")
    assert integer - real > 30  # 43 and 2 users: far apart at a noise of scale 1
    server = fresh_server()
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        first: dict[bool, httpx.Response] = {}
        for dialect in DIALECTS:  # every dialect the product reads
            response = _ask(analyst, DIVIDED, dialect)
            meaning = dialect in INTEGER_DIVISION
            if meaning in first:  # the same question as an earlier request: its release, free
                assert response.headers["x-dp-repeat"] == "true", dialect
                assert response.content == first[meaning].content, dialect
            else:
                assert response.headers["x-dp-repeat"] == "false", dialect
                first[meaning] = response
        assert admin.get("/v1/ledger").json()["total"] == 2  # one charge per meaning, not per dialect
        # each answer is its own question's: Laplace noise of scale 1 (one user, ε = 1), 15 scales apart
        assert abs(first[True].json()["rows"][0][0] - integer) < 15
        assert abs(first[False].json()["rows"][0][0] - real) < 15


def test_different_texts_of_one_question_are_one_repeat_and_other_columns_are_not(
    fresh_server: StartFresh, demo: DemoFiles
) -> None:
    """The identity is what the answer is a function of (proxy/query/planner.py `repeat_identity`): texts that
    resolve to the same query (the same generated SQL, columns and noise) are one repeat, so rewording cannot buy
    fresh noise for free; the same generated SQL with other released columns is another answer."""
    server = fresh_server()
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        first = _ask(analyst, DIVIDED, "postgres")
        for sql, dialect in [
            ("SELECT COUNT(DISTINCT user_id) AS n FROM visits WHERE age // 10 = 3", "duckdb"),  # DuckDB's spelling
            ("SELECT COUNT(DISTINCT user_id) AS n FROM visits WHERE age / 10 = 3", "tsql"),
            ("SELECT COUNT(DISTINCT q.user_id) AS n FROM (SELECT * FROM visits WHERE age / 10 = 3) AS q",
             "postgres"),  # a BI tool's wrapping subquery
            ("WITH v AS (SELECT user_id, age FROM visits) SELECT COUNT(DISTINCT user_id) AS n FROM v "
             "WHERE age // 10 = 3", "duckdb"),
        ]:
            again = _ask(analyst, sql, dialect)
            assert again.headers["x-dp-repeat"] == "true", sql
            assert again.content == first.content, sql
        assert admin.get("/v1/ledger").json()["total"] == 1
        renamed = _ask(analyst, DIVIDED.replace("AS n", "AS m"), "postgres")  # the same generated SQL
        assert renamed.headers["x-dp-repeat"] == "false" and renamed.json()["columns"] == ["m"]
        assert admin.get("/v1/ledger").json()["total"] == 2


def test_a_repeat_after_the_bounds_changed_is_answered_anew(fresh_server: StartFresh, demo: DemoFiles) -> None:
    """The stored release answered the query under the declarations of its time: after a restart with other
    bounds (here: chosen per query, `max_rows = "auto"`, instead of fixed) the same request is a new answer."""
    sql = "SELECT COUNT(*) AS n, SUM(amount) AS s FROM visits"
    server = fresh_server()
    assert server.policy is not None
    with server.client(demo.analyst_key) as analyst:
        first = _ask(analyst, sql, epsilon=0.5)
        assert _ask(analyst, sql, epsilon=0.5).headers["x-dp-repeat"] == "true"  # unchanged: a repeat
    server.stop()
    policy_copy(demo, server.policy.parent, epsilon=5.0, auto=True)  # the same ledger, the shipped bounds
    server.start(server.policy)
    with server.client(demo.analyst_key) as analyst:
        again = _ask(analyst, sql, epsilon=0.5)
        assert again.headers["x-dp-repeat"] == "false" and again.content != first.content


# Issue #32: a text that differs from an earlier one only in its output labels is planned from that one's plan,
# relabelled (docs/architecture.md, "A plan per shape"): a new request, charged and audited as its own text.
def test_a_relabelled_text_is_a_new_answer_charged_and_audited_under_its_own_text(
    fresh_server: StartFresh, demo: DemoFiles
) -> None:
    server = fresh_server()
    texts = [f"SELECT region, COUNT(*) AS n{i} FROM users GROUP BY region" for i in (1, 2)]
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        first, second = (analyst.post("/v1/query", json={"sql": sql, "epsilon": 0.2}) for sql in texts)
        assert first.status_code == second.status_code == 200
        assert first.headers["x-dp-repeat"] == second.headers["x-dp-repeat"] == "false"  # two requests, two charges
        assert first.json()["columns"] == ["region", "n1"] and second.json()["columns"] == ["region", "n2"]
        assert first.json()["charge"]["epsilon"] == second.json()["charge"]["epsilon"]  # the same price
        assert first.headers["x-dp-charge-id"] != second.headers["x-dp-charge-id"]
        again = analyst.post("/v1/query", json={"sql": texts[1], "epsilon": 0.2})
        assert again.headers["x-dp-repeat"] == "true" and again.content == second.content  # its own repeat
        assert admin.get("/v1/ledger").json()["total"] == 2
        answered = admin.get("/v1/audit", params={"decision": "answered"}).json()["entries"]
        assert sorted(e["sql"] for e in answered) == texts  # each answer's entry records its own text
        assert admin.get("/v1/audit/verify").json()["ok"] is True
