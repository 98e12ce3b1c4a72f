"""The allow-list and the analysis: what is accepted, what is rejected, and with which code."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from proxy.query.analyse.analysis import analyse
from proxy.query.errors import QueryError
from proxy.query.parse.statement import parse
from tests.support.catalogs import CATALOG


def _rejected_cases() -> list[tuple[str, str, str]]:
    lines = (Path(__file__).parent.parent / "fixtures" / "rejected.sql").read_text().splitlines()
    cases = []
    for header, query in itertools.pairwise(lines):
        if header.startswith("-- code:"):
            code, _, construct = header.removeprefix("-- code:").partition("construct:")
            cases.append((query, code.strip(), construct.strip()))
    return cases


REJECTED = _rejected_cases()


def test_fixture_has_cases() -> None:
    assert len(REJECTED) >= 45


@pytest.mark.parametrize(("sql", "code", "construct"), REJECTED, ids=[c[0][:50] for c in REJECTED])
def test_rejected(sql: str, code: str, construct: str) -> None:
    with pytest.raises(QueryError) as caught:
        analyse(parse(sql), CATALOG)
    assert caught.value.code == code
    assert caught.value.detail.get("construct") == construct
    assert str(caught.value)  # a message that names the problem


def test_disjoint_when_all_keys_unit_level() -> None:
    a = analyse(parse("SELECT region, age, COUNT(*) FROM visits GROUP BY region, age"), CATALOG)
    assert (a.max_groups, a.disjoint, a.partitions) == (1, True, "private")


def test_row_level_key_uses_table_l0() -> None:
    a = analyse(parse("SELECT category, COUNT(*) FROM visits GROUP BY category"), CATALOG)
    assert (a.max_groups, a.disjoint, a.partitions) == (3, False, "public")
    assert a.domains == (("a", "b", "c"),)


def test_no_group_by_is_one_partition() -> None:
    a = analyse(parse("SELECT COUNT(*), SUM(amount) FROM visits WHERE flag"), CATALOG)
    assert (a.keys, a.max_groups, a.partitions) == ((), 1, "none")


def test_avg_shares_count_measure_with_count_column() -> None:
    a = analyse(parse("SELECT AVG(amount), COUNT(amount), SUM(amount) FROM visits"), CATALOG)
    assert [m.kind for m in a.measures] == ["centred_sum", "values", "sum"]


def test_where_is_rebuilt_from_checked_literals() -> None:
    a = analyse(
        parse("SELECT COUNT(*) FROM visits v WHERE 30 > v.age AND day >= DATE '2026-01-01' AND page LIKE 'a%'"
              " AND region IN ('N', 'S') AND amount BETWEEN -1 AND 2.5 AND NOT flag AND secret IS NULL"),
        CATALOG,
    )
    assert a.where is not None
    assert a.where.sql(dialect="duckdb") == (
        "\"age\" < 30 AND \"day\" >= CAST('2026-01-01' AS DATE) AND \"page\" COLLATE \"binary\" LIKE 'a%'"
        " AND \"region\" COLLATE \"binary\" IN ('N', 'S')"
        " AND \"amount\" BETWEEN CAST('-1.0' AS DOUBLE) AND CAST('2.5' AS DOUBLE)"
        " AND NOT \"flag\" AND \"secret\" IS NULL"
    )


def test_having_order_limit_and_aliases() -> None:
    a = analyse(
        parse("SELECT region, COUNT(*) AS n, SUM(amount) / COUNT(*) AS mean FROM visits GROUP BY region "
              "HAVING n > 10 ORDER BY mean DESC, 1 LIMIT 2"),
        CATALOG,
    )
    assert [o.name for o in a.outputs] == ["region", "n", "mean"]
    assert a.limit == 2 and len(a.order) == 2 and a.order[0][1] is True
