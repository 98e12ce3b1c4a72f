"""`SET dp.mechanism = auto` over the PostgreSQL protocol (docs/privacy.md §2.1): a daily series answered
with the Gaussian, a release of one group per user with Laplace; `SHOW dp.last_answer` names the one used."""

from __future__ import annotations

from tests.wire.test_clients import Wire, connect, wire  # noqa: F401  (`wire`: the module's server)


def test_auto_chooses_per_query_and_the_last_answer_says_which(wire: Wire) -> None:  # noqa: F811
    with connect(wire) as conn:
        conn.execute("SET dp.mechanism = auto")
        conn.execute("SET dp.delta = 0.000001")
        assert conn.execute("SELECT current_setting('dp.mechanism')").fetchone() == ("auto",)
        used = {}
        for name, sql in (("day", "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"),
                          ("region", "SELECT region, COUNT(*) AS n FROM visits GROUP BY region")):
            before = wire.charges()
            conn.execute(sql).fetchall()  # answered (the daily groups may all be under the threshold), charged once
            assert wire.charges() == before + 1
            cursor = conn.execute("SHOW dp.last_answer")
            columns = [c.name for c in cursor.description]
            used[name] = dict(zip(columns, cursor.fetchone(), strict=True))["mechanism"]
        assert used == {"day": "gaussian", "region": "laplace"}
