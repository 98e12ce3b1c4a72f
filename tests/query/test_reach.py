"""Reachable groups (issue #28, item 1): a public-domain key releases only the values its WHERE can reach.

Checked against DuckDB: on a table holding every combination of declared values (and NULLs), the groups DuckDB
finds for the WHERE are always among the released ones, and exactly them when the WHERE reads only the key.
The charge never grows: the same event as with the full domain.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mechanisms.sampling import FixedSampler
from proxy.query.analyse.analysis import analyse
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import LiteralOutsideDomain, NoReachableGroup
from proxy.query.parse.statement import parse
from proxy.query.planner import plan
from proxy.query.price.charge import price
from proxy.query.release.publish import release

REGIONS = ("north", "south", "east", "west", "central")
T = TableSchema("t", "u", (
    ColumnSpec("u", "BIGINT"),
    ColumnSpec("r", "VARCHAR", groupable=True, public_domain=REGIONS),
    ColumnSpec("n", "INTEGER", groupable=True, public_domain=(1, 2, 3, 4, 5)),
    ColumnSpec("day", "DATE", groupable=True, date_bounds=("2024-02-25", "2024-03-05")),
    ColumnSpec("x", "INTEGER", bounds=(0, 9)),
), max_groups=3, max_rows=2)
CATALOG = Catalog((T,))


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    """Every combination of the declared values of r and n, with NULLs, a few x and days: one unit per row."""
    db = duckdb.connect()
    db.execute("CREATE TABLE t (u BIGINT, r VARCHAR, n INTEGER, day DATE, x INTEGER)")
    rows = [(i, r, n, f"2024-0{2 + (i % 10 > 3)}-{(25 + i % 10) if i % 10 <= 3 else i % 10 - 3:02d}", i % 4)
            for i, (r, n) in enumerate(itertools.product((*REGIONS, None), (1, 2, 3, 4, 5, None)))]
    db.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", rows)
    return db


def _plan(sql: str):  # type: ignore[no-untyped-def]
    return plan(sql, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")


def test_an_in_list_releases_exactly_its_values_in_declared_order(con: duckdb.DuckDBPyConnection) -> None:
    p = _plan("SELECT r, COUNT(*) AS c FROM t WHERE r IN ('south', 'north') GROUP BY r")
    assert p.analysis.domains == (("north", "south"),)
    released = release(con.execute(p.sql).fetchall(), p.analysis, p.price, FixedSampler((0,)))
    exact = con.execute("SELECT r, COUNT(*) FROM t WHERE r IN ('south', 'north') GROUP BY r ORDER BY r").fetchall()
    assert sorted(released.rows) == sorted(exact)  # no noise, non-binding bounds: DuckDB's answer, no other group
    assert [r for r, _ in released.rows] == ["north", "south"]


@pytest.mark.parametrize(("where", "reached"), [
    ("r = 'north' OR x > 3", REGIONS),  # x is unknown here: every region can pass
    ("r = 'north' AND x > 3", ("north",)),
    ("NOT r IN ('north', 'south')", ("east", "west", "central")),
    ("r <> 'east' AND (r = 'west' OR r = 'east')", ("west",)),
    ("r BETWEEN 'e' AND 'o'", ("north", "east")),  # text order under binary collation, as DuckDB compares
    ("r > 'r'", ("south", "west")),
    ("r LIKE '%st'", ("east", "west")),
    ("r IN ('north') OR NOT (x > 3 AND r = 'east')", REGIONS),
    ("r = 'north' OR x > 3 AND r = 'east'", ("north", "east")),
])
def test_the_where_cuts_a_text_domain(where: str, reached: tuple[str, ...]) -> None:
    assert _plan(f"SELECT r, COUNT(*) FROM t WHERE {where} GROUP BY r").analysis.domains == (reached,)


def test_an_ordered_domain_is_cut_by_ranges() -> None:
    p = _plan("SELECT n, day, COUNT(*) FROM t WHERE n BETWEEN 2 AND 3.5 AND day >= '2024-03-04' GROUP BY n, day")
    assert p.analysis.domains == ((2, 3), ("2024-03-04", "2024-03-05"))


def test_a_computed_key_is_cut_where_a_conjunct_confines_its_column() -> None:
    p = _plan("SELECT date_trunc('month', day) AS m, COUNT(*) FROM t WHERE day BETWEEN '2024-03-01' AND '2024-03-03' "
              "GROUP BY 1")
    assert p.analysis.domains == (("2024-03-01",),)
    p = _plan("SELECT upper(r) AS m, COUNT(*) FROM t WHERE r IN ('east', 'west') GROUP BY 1")
    assert p.analysis.domains == (("EAST", "WEST"),)
    # a WHERE that does not confine the column to a list keeps the derived domain whole (conservative)
    p = _plan("SELECT upper(r) AS m, COUNT(*) FROM t WHERE r <> 'east' GROUP BY 1")
    assert p.analysis.domains == (tuple(sorted(v.upper() for v in REGIONS)),)


@pytest.mark.parametrize("where", ["r = 'north' AND r <> 'north'", "r IS NULL", "n > 5", "n IN (2, 3) AND n > 3"])
def test_a_where_that_reaches_no_value_of_a_key_is_refused_for_free(where: str) -> None:
    with pytest.raises(NoReachableGroup) as refused:
        _plan(f"SELECT r, n, COUNT(*) FROM t WHERE {where} GROUP BY r, n")
    assert refused.value.code == "no_reachable_group" and refused.value.detail["construct"] == "GROUP BY"


def test_without_group_by_nothing_changes() -> None:
    assert _plan("SELECT COUNT(*) FROM t WHERE r IN ('north')").analysis.domains == ()


@pytest.mark.parametrize("sql", [
    "SELECT r, COUNT(*), SUM(x) FROM t WHERE r IN ('north', 'south') GROUP BY r",
    "SELECT r, n, AVG(x) FROM t WHERE r = 'east' AND n BETWEEN 2 AND 3 GROUP BY r, n",
    "SELECT day, COUNT(*) FROM t WHERE day > '2024-03-01' GROUP BY day",
])
def test_the_charge_is_never_more_than_with_the_whole_domain(sql: str) -> None:
    cut = analyse(parse(sql), CATALOG)
    whole = dataclasses.replace(cut, domains=tuple(T.column(k).domain for k in cut.keys))  # type: ignore[union-attr]
    assert cut.domains != whole.domains
    for mechanism in ("laplace", "gaussian"):
        a = price(cut, epsilon=1.0, delta=1e-6, mechanism=mechanism)
        b = price(whole, epsilon=1.0, delta=1e-6, mechanism=mechanism)
        # today the same charge; with L0 = min(g, d) (price/charge.py) fewer reachable groups may cost less
        assert a.epsilon <= b.epsilon and a.delta <= b.delta and a.composition == b.composition
        assert [(s.measure, s.mechanism) for s in a.noise] == [(s.measure, s.mechanism) for s in b.noise]
        assert all(x.scale <= y.scale for x, y in zip(a.noise, b.noise, strict=True))


_ATOMS = st.one_of(
    st.sampled_from((*REGIONS, "zz")).map(lambda v: f"r = '{v}'"),
    st.sampled_from(REGIONS).map(lambda v: f"r <> '{v}'"),
    st.lists(st.sampled_from(REGIONS), min_size=1, max_size=3).map(lambda vs: "r IN (" + ", ".join(
        f"'{v}'" for v in vs) + ")"),
    st.sampled_from(("r IS NULL", "r IS NOT NULL", "r > 'm'", "r LIKE '%th'", "n IS NULL")),
    st.tuples(st.sampled_from(("=", "<>", "<", ">=")), st.integers(0, 6)).map(lambda t: f"n {t[0]} {t[1]}"),
    st.integers(1, 5).map(lambda v: f"n BETWEEN {v} AND {v + 1}"),
    st.integers(0, 4).map(lambda v: f"x > {v}"),
)
_WHERES = st.recursive(_ATOMS, lambda inner: st.one_of(
    st.tuples(inner, inner).map(lambda p: f"({p[0]}) AND ({p[1]})"),
    st.tuples(inner, inner).map(lambda p: f"({p[0]}) OR ({p[1]})"),
    inner.map(lambda p: f"NOT ({p})"),
), max_leaves=4)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=_WHERES)
def test_every_group_duckdb_finds_is_released(con: duckdb.DuckDBPyConnection, where: str) -> None:
    sql = f"SELECT r, n, COUNT(*) FROM t WHERE {where} GROUP BY r, n"
    exact = con.execute(sql).fetchall()
    in_domain = {(r, n) for r, n, _ in exact if r is not None and n is not None}
    try:
        analysis = analyse(parse(sql), CATALOG)
    except NoReachableGroup:
        assert not in_domain, where
        return
    except LiteralOutsideDomain:  # `r = 'zz'`, `n = 0`: refused for free (test_literal_domain.py)
        return
    regions, numbers = analysis.domains
    assert {r for r, _ in in_domain} <= set(regions) and {n for _, n in in_domain} <= set(numbers), where
    reads = {c for c in ("r", "n", "x") if re.search(rf"\b{c}\b", where)}
    if len(reads) == 1 and "x" not in reads:  # the table holds every (r, n): a WHERE on one key is cut exactly
        assert set(regions) == {r for r, _ in in_domain} and set(numbers) == {n for _, n in in_domain}, where


@functools.cache
def _off_declared() -> duckdb.DuckDBPyConnection:
    db = duckdb.connect()
    db.execute("CREATE TABLE t (u BIGINT, r VARCHAR, n INTEGER, day DATE, x INTEGER)")
    rows = [(i, r, n, "2024-03-01", i % 4) for i, (r, n) in enumerate(itertools.product(
        (*REGIONS, "zz", None), (0, 1, 2, 3, 4, 5, 7, 9, None)))]
    db.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", rows)
    return db


@settings(max_examples=120, deadline=None)
@given(where=_WHERES)
def test_a_computed_key_releases_every_group_duckdb_finds_even_off_the_declared_values(where: str) -> None:
    """Rows whose column lies outside its declared values (n = 0, 7, 9) still reach a computed key's public
    values: the cut reads only what a conjunct confines every passing row to, never the declarations."""
    sql = f"SELECT CASE WHEN n > 2 THEN 'hi' ELSE 'lo' END AS b, COUNT(*) FROM t WHERE {where} GROUP BY 1"
    found = {b for b, _ in _off_declared().execute(sql).fetchall()}
    try:
        analysis = analyse(parse(sql), CATALOG)
    except NoReachableGroup:
        assert not found, where
        return
    except LiteralOutsideDomain:  # refused for free (test_literal_domain.py)
        return
    (domain,) = analysis.domains
    assert found <= set(domain), (where, found, domain)
