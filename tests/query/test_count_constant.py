"""COUNT(1), COUNT(-1), COUNT('x') count every row, as COUNT(*) (BI tools emit them).

Regression: COUNT(1) was refused ("LITERAL inside an aggregate would defeat clamping") while SUM(1) was
answered. It must plan to the same bounded query and the same charge as COUNT(*), and its value before noise
must be DuckDB's COUNT(1) when no bound binds.
"""

from __future__ import annotations

import pytest

from proxy.query.analyse.analysis import analyse
from proxy.query.errors import UnsupportedQuery
from proxy.query.parse.statement import parse
from proxy.query.planner import plan
from proxy.query.rewrite.per_query import rewrite
from tests.query.test_precedence import CATALOG, CON


def _plan(sql: str):  # type: ignore[no-untyped-def]
    return plan(sql, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")


@pytest.mark.parametrize("constant", ["1", "-1", "0", "'x'", "TRUE", "2.5"])
def test_count_of_a_constant_is_count_star(constant: str) -> None:
    ours = _plan(f"SELECT i, COUNT({constant}) AS n FROM t GROUP BY i")
    star = _plan("SELECT i, COUNT(*) AS n FROM t GROUP BY i")
    assert ours.sql == star.sql
    assert ours.price.event == star.price.event
    query = f"SELECT b, COUNT({constant}) AS n FROM t WHERE d > 0 GROUP BY b"
    rows = CON.execute(rewrite(analyse(parse(query), CATALOG, canonical_units=True), 5)).fetchall()
    assert sorted((key, n) for key, _, n in rows) == sorted(CON.execute(query).fetchall())


def test_count_of_null_is_refused_with_what_to_write() -> None:
    with pytest.raises(UnsupportedQuery) as caught:
        _plan("SELECT COUNT(NULL) FROM t")
    assert caught.value.detail["construct"] == "COUNT(NULL)"
    assert "COUNT(*)" in caught.value.message
