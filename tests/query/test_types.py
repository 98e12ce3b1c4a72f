"""Every type a policy accepts, against DuckDB itself (issue #10): an axis in WHERE, a public-domain key, a
private key and a clamped measure, and what the policy loader refuses.

The scope of a query is computed in Python (analyse/cell_space.py) and must contain every unit for which DuckDB
finds the rewritten WHERE true; public keys must match the groups DuckDB returns. Each type's data holds the
values that used to break this: float32 neighbours of a decimal literal, 2**53 + 1 in a DECIMAL(38,0), 'n' beside
'N' in a COLLATE NOCASE column, -0.0, NaN, ±inf, values out of the domain and NULL.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mechanisms.sampling import FixedSampler, SecureSampler
from proxy.policy.load import PolicyFileError, load_policy
from proxy.query import types
from proxy.query.analyse.analysis import analyse
from proxy.query.analyse.cell_space import cell_space
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import EmptyScope, LiteralOutsideDomain
from proxy.query.parse.statement import parse
from proxy.query.planner import plan
from proxy.query.release.publish import release
from tests.support import scratch_db


@dataclass(frozen=True)
class Case:
    sql_type: str  # as the DuckDB table declares it (collation included)
    declared: str  # as the policy declares it
    domain: tuple[object, ...]
    data: tuple[object, ...]  # one unit per value
    literals: tuple[str, ...]  # compared with the column in WHERE


F32_01 = 0.10000000149011612  # float32(0.1), as DuckDB holds a REAL 0.1
CASES = (
    Case("TINYINT", "TINYINT", (1, 2, 3), (1, 2, 3, -128, 127, None), ("2", "2.5", "-1", "1000", "-1000", "3")),
    Case("SMALLINT", "SMALLINT", (1, 2), (1, 2, -32768, 32767, None), ("1", "1.5", "40000", "-40000")),
    Case("INTEGER", "INT", (1, 2), (1, 2, 2**31 - 1, None), ("2", "0.5", "2147483647", "3e9")),
    Case("BIGINT", "BIGINT", (1, 2**53 + 1), (1, 2**53, 2**53 + 1, 2**63 - 1, None),
         ("9007199254740993", "9007199254740992", "9007199254740992.5", "1e18", "1")),
    Case("HUGEINT", "HUGEINT", (1, 2**53 + 1), (1, 2**53 + 1, 2**100, -(2**100), None),
         ("9007199254740993", "1", "1e18", "-1e18")),
    Case("UTINYINT", "UTINYINT", (0, 255), (0, 1, 255, None), ("0", "-1", "255", "256", "0.5")),
    Case("USMALLINT", "USMALLINT", (0, 7), (0, 7, 65535, None), ("7", "-3", "65536")),
    Case("UINTEGER", "UINTEGER", (5,), (5, 6, 2**32 - 1, None), ("5", "5.5", "-5")),
    Case("UBIGINT", "UBIGINT", (2**53 + 1,), (2**53, 2**53 + 1, 2**64 - 1, None),
         ("9007199254740993", "9007199254740992", "-1", "1e18")),
    Case("REAL", "REAL", (0.1, 0.5), (0.1, 0.5, 0.30000001192092896, -0.0, math.nan, math.inf, None),
         ("0.1", "0.1000000015", "0.10000000149011612", "0.5", "0.3", "0", "-0.0", "1e-1")),
    Case("DOUBLE", "DOUBLE", (0.1, 0.0), (0.1, 0.30000000000000004, -0.0, 0.0, math.nan, -math.inf, None),
         ("0.1", "0.30000000000000004", "0.3", "0", "-0.0", "1e-1", "0.1000000000000000055511151231257827")),
    Case("DECIMAL(38,0)", "DECIMAL(38,0)", (1, 2**53 + 1), (1, 2**53, 2**53 + 1, None),
         ("9007199254740993", "9007199254740992", "9007199254740992.5", "1")),
    Case("DECIMAL(5,2)", "DECIMAL(5,2)", (0.1, 1.25), (Decimal("0.10"), Decimal("1.25"), Decimal("1.26"),
         Decimal("-999.99"), None), ("0.1", "0.125", "1.25", "1.255", "1000", "-1000", "0.10")),
    Case("VARCHAR", "VARCHAR", ("N", "S"), ("N", "n", "S", "zz", None), ("'N'", "'n'", "'S'", "'zz'")),
    Case("VARCHAR COLLATE NOCASE", "VARCHAR", ("N", "S"), ("N", "n", "S", "s", None), ("'N'", "'n'", "'s'")),
    Case("DATE", "DATE", ("2024-01-01", dt.date(2024, 1, 2)), (dt.date(2024, 1, 1), dt.date(2024, 1, 2),
         dt.date(2030, 5, 5), None), ("'2024-01-01'", "DATE '2024-01-02'", "'2030-05-05'", "'2023-12-31'")),
    Case("BOOLEAN", "BOOLEAN", (True,), (True, False, None), ("TRUE", "FALSE")),
)
IDS = [c.sql_type for c in CASES]
NUMERIC = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
           "UBIGINT", "REAL", "DOUBLE", "DECIMAL(38,0)", "DECIMAL(5,2)"}


def _table(case: Case) -> TableSchema:
    return TableSchema("t", "uid", (
        ColumnSpec("uid", "BIGINT"),
        ColumnSpec("c", case.declared, unit_level=True, groupable=True, public_domain=case.domain),
        ColumnSpec("p", case.declared, groupable=True),  # the same values, as a private key
    ), max_rows=2)


@pytest.fixture(scope="module", params=CASES, ids=IDS)
def typed(request: pytest.FixtureRequest) -> Iterator[tuple[Case, duckdb.DuckDBPyConnection]]:
    """One unit per data value, with two rows each (so bounding has something to bound)."""
    case: Case = request.param
    con = scratch_db.connect()
    con.execute(f"CREATE TABLE t (uid BIGINT, c {case.sql_type}, p {case.sql_type})")
    for uid, value in enumerate(case.data):
        for _ in range(2):
            con.execute("INSERT INTO t VALUES (?, ?, ?)", [uid, value, value])
    yield case, con
    con.close()


def _cell(case: Case, con: duckdb.DuckDBPyConnection, uid: int) -> int:
    """The unit's cell, found by DuckDB: the domain value its value equals under binary comparison."""
    space = cell_space(_table(case))
    (axis,) = space.axes
    value = con.execute("SELECT c FROM t WHERE uid = ? LIMIT 1", [uid]).fetchone()[0]  # type: ignore[index]
    if value is None:
        return axis.size - 1
    for index, _ in enumerate(axis.values):
        where = analyse(parse(f"SELECT COUNT(*) FROM t WHERE c = {_sql(case, axis.values[index])}"),
                        Catalog((_table(case),))).where
        assert where is not None
        if con.execute(f"SELECT COUNT(*) FROM t WHERE uid = ? AND {where.sql('duckdb')}", [uid]).fetchone()[0]:  # type: ignore[index]
            return index
    return len(axis.values)  # OTHER


def _sql(case: Case, value: object) -> str:
    if isinstance(value, str):
        return f"'{value}'"
    return "TRUE" if value is True else "FALSE" if value is False else str(value)


def _atoms(case: Case) -> st.SearchStrategy[str]:
    literal = st.sampled_from(case.literals)
    ops = ("=", "<>") if case.declared == "BOOLEAN" else ("=", "<>", "<", "<=", ">", ">=")
    compare = st.tuples(st.sampled_from(ops), literal).map(lambda t: f"c {t[0]} {t[1]}")
    many = st.lists(literal, min_size=1, max_size=3).map(lambda xs: f"c IN ({', '.join(xs)})")
    pair = st.tuples(literal, literal).map(lambda t: f"c BETWEEN {t[0]} AND {t[1]}")
    atoms = [compare, many, st.just("c IS NULL")] + ([pair] if case.declared != "BOOLEAN" else [])
    return st.one_of(*atoms)


def _clauses(case: Case) -> st.SearchStrategy[str]:
    return st.recursive(_atoms(case), lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda p: f"({p[0]}) AND ({p[1]})"),
        st.tuples(inner, inner).map(lambda p: f"({p[0]}) OR ({p[1]})"),
        inner.map(lambda p: f"NOT ({p})"),
    ), max_leaves=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_unit_duckdb_finds_in_a_where_is_in_its_scope(
    typed: tuple[Case, duckdb.DuckDBPyConnection], data: st.DataObject
) -> None:
    case, con = typed
    where = data.draw(_clauses(case))
    catalog = Catalog((_table(case),))
    try:
        planned = plan(f"SELECT COUNT(*) FROM t WHERE {where}", catalog, epsilon=1.0, delta=0.0,
                       mechanism="laplace")
    except LiteralOutsideDomain:  # a literal no declared value equals: refused for free (issue #28)
        return
    except EmptyScope:  # refused for free: then DuckDB must find no unit either
        rebuilt = analyse(parse(f"SELECT COUNT(*) FROM t WHERE {where}"), catalog).where
        assert rebuilt is not None
        assert con.execute(f"SELECT COUNT(*) FROM t WHERE {rebuilt.sql('duckdb')}").fetchone() == (0,)
        return
    analysis = planned.analysis
    assert analysis.where is not None
    # per unit, as DuckDB evaluates the rewritten predicate (one value per unit: canonical = the value)
    found = con.execute(f"SELECT DISTINCT uid FROM t WHERE {analysis.where.sql('duckdb')}").fetchall()
    for (uid,) in found:
        cell = _cell(case, con, uid)
        assert analysis.scope.cells is None or cell in analysis.scope.cells, (where, case.data[uid])
    rows = con.execute(planned.sql).fetchall()  # the whole rewrite runs on every type, without error
    assert rows[0][0] == len(found)  # the distinct units counted are exactly those DuckDB found


def _expected(case: Case, key: object) -> int:
    """Units whose value equals a domain key, compared as the declared type (float32 for REAL)."""
    want = types.canonical(case.declared, key)
    return sum(1 for v in case.data if v is not None and types.canonical(case.declared, v) == want)


def test_public_domain_keys_match_the_engines_groups(typed: tuple[Case, duckdb.DuckDBPyConnection]) -> None:
    # issue #10: DATE, REAL and DECIMAL keys never matched the policy's domain values: every group was noise
    case, con = typed
    planned = plan("SELECT c, COUNT(DISTINCT uid) AS n FROM t GROUP BY c", Catalog((_table(case),)),
                   epsilon=1.0, delta=0.0, mechanism="laplace")
    out = release(con.execute(planned.sql).fetchall(), planned.analysis, planned.price, FixedSampler((0,)))
    assert len(out.rows) == len(case.domain)
    for (key, count), declared in zip(out.rows, case.domain, strict=True):
        assert count == _expected(case, declared), (key, declared)
    assert any(count for _, count in out.rows)


def test_private_keys_are_released_as_their_type(typed: tuple[Case, duckdb.DuckDBPyConnection]) -> None:
    case, con = typed
    planned = plan("SELECT p, COUNT(*) AS n FROM t GROUP BY p", Catalog((_table(case),)), epsilon=1.0,
                   delta=1e-6, mechanism="laplace")
    threshold = planned.price.selection.threshold  # type: ignore[union-attr]
    out = release(con.execute(planned.sql).fetchall(), planned.analysis, planned.price, FixedSampler((threshold,)))
    keys = [k for k, _ in out.rows]
    distinct = {repr(types.canonical(case.declared, v)) for v in case.data}  # -0.0 and 0.0 are one group
    assert len(keys) == len(set(map(repr, keys))) == len(distinct)
    assert all(not (isinstance(k, float) and math.copysign(1.0, k) < 0 and k == 0) for k in keys)  # no -0.0
    units = Counter(repr(types.canonical(case.declared, v)) for v in case.data)
    for key, count in out.rows:  # each unit's two rows (max_rows = 2)
        assert count == 2 * units[repr(types.canonical(case.declared, key))] + threshold, key


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)


@pytest.mark.parametrize("case", [c for c in CASES if c.sql_type in NUMERIC], ids=[c for c in IDS if c in NUMERIC])
def test_clamped_sums_run_on_every_numeric_type(case: Case) -> None:
    con = scratch_db.connect()
    con.execute(f"CREATE TABLE t (uid BIGINT, c {case.sql_type}, p {case.sql_type})")
    for uid, value in enumerate(case.data):
        con.execute("INSERT INTO t VALUES (?, ?, ?)", [uid, value, value])
    table = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("c", case.declared, bounds=(-2, 3))))
    planned = plan("SELECT SUM(c) AS s, AVG(c) AS a FROM t", Catalog((table,)), epsilon=1.0, delta=0.0,
                   mechanism="laplace")
    out = release(con.execute(planned.sql).fetchall(), planned.analysis, planned.price, FixedSampler((0,)))
    clamped = [min(3.0, max(-2.0, float(v))) for v in case.data if v is not None and not _is_nan(v)]
    (total, _), = out.rows
    # NaN clamps to a bound too (DuckDB orders NaN above every number): allow it either way
    nan_slack = 3.0 if any(_is_nan(v) for v in case.data) else 0.0
    assert abs(total - sum(clamped)) <= nan_slack + 1e-6 * len(case.data)


def test_a_collated_unit_column_does_not_merge_units() -> None:
    con = scratch_db.connect()
    con.execute("CREATE TABLE t (uid VARCHAR COLLATE NOCASE, c VARCHAR, p VARCHAR)")
    con.execute("INSERT INTO t VALUES ('a', 'x', 'x'), ('A', 'x', 'x'), ('b', 'x', 'x')")
    table = TableSchema("t", "uid", (ColumnSpec("uid", "VARCHAR"), ColumnSpec("c", "VARCHAR")), max_rows=1)
    planned = plan("SELECT COUNT(DISTINCT uid) AS u, COUNT(*) AS n FROM t", Catalog((table,)), epsilon=1.0,
                   delta=0.0, mechanism="laplace")
    (row,) = con.execute(planned.sql).fetchall()
    assert row[0] == 3  # 'a' and 'A' are two people: under NOCASE the bounding used to see one


def test_null_units_are_dropped_not_pooled() -> None:
    con = scratch_db.connect()
    con.execute("CREATE TABLE t (uid BIGINT, c VARCHAR, p VARCHAR)")
    con.execute("INSERT INTO t VALUES (NULL, 'x', 'x'), (NULL, 'y', 'y'), (1, 'x', 'x')")
    table = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"),), max_rows=5)
    planned = plan("SELECT COUNT(*) AS n FROM t", Catalog((table,)), epsilon=1.0, delta=0.0, mechanism="laplace")
    assert con.execute(planned.sql).fetchall()[0][:2] == (1, 1)


# --- what the loader refuses ---------------------------------------------------------------------------


POLICY = """
ledger = "ledger.sqlite"
[datasets.d]
path = "data.duckdb"
[datasets.d.tables.t]
privacy_unit = "uid"
columns.uid = {{ type = "{unit}" }}
columns.c = {{ {column} }}
[analysts.a]
role = "analyst"
key_sha256 = "{key}"
budgets = {{ d = {{ epsilon = 1.0, delta = 1e-6 }} }}
"""


@pytest.mark.parametrize(("unit", "column", "problem"), [
    ("BIGINT", 'type = "TIMESTAMP"', "unsupported type 'TIMESTAMP'"),
    ("BIGINT", 'type = "DECIMAL(40,2)"', "DECIMAL(p, s) needs 1 <= p <= 38"),
    ("BIGINT", 'type = "DOUBLE", bounds = [0, 1e16]', "within ±1e+15"),
    ("BIGINT", 'type = "BIGINT", bounds = [-9.3e18, 0]', "within ±1e+15"),
    ("BIGINT", 'type = "REAL", groupable = true, public_domain = [0.1, 0.10000000149011612]', "duplicate"),
    ("BIGINT", 'type = "DECIMAL(5,2)", groupable = true, public_domain = [0.125]', "DECIMAL(5,2) values"),
    ("BIGINT", 'type = "DOUBLE", groupable = true, public_domain = [nan]', "finite DOUBLE values"),
    ("BIGINT", 'type = "TINYINT", groupable = true, public_domain = [1, 300]', "TINYINT values"),
    ("DOUBLE", 'type = "DOUBLE"', "privacy_unit 'uid' must be an integer"),
    ("BOOLEAN", 'type = "DOUBLE"', "privacy_unit 'uid' must be an integer"),
])
def test_the_policy_loader_refuses_what_the_scope_cannot_follow(
    tmp_path: Path, unit: str, column: str, problem: str
) -> None:
    (tmp_path / "data.duckdb").write_bytes(b"")
    path = tmp_path / "policy.toml"
    path.write_text(POLICY.format(unit=unit, column=column, key="0" * 64))
    with pytest.raises(PolicyFileError) as err:
        load_policy(path)
    assert problem in str(err.value), str(err.value)


def test_declared_types_are_normalised() -> None:
    assert ColumnSpec("x", "real").type == "FLOAT"
    assert ColumnSpec("x", "numeric(10, 2)", public_domain=(1.5,)).public_domain == (Decimal("1.50"),)
    assert ColumnSpec("x", "REAL", public_domain=(0.1,)).public_domain == (F32_01,)
    assert ColumnSpec("x", "DATE", public_domain=(dt.date(2024, 1, 1),)).public_domain == ("2024-01-01",)


def test_secure_release_is_total_on_the_extremes() -> None:
    # exact values past the sampler's range are clipped (1-Lipschitz) rather than raising after admission
    table = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"),))
    planned = plan("SELECT COUNT(*) AS n FROM t", Catalog((table,)), epsilon=1.0, delta=0.0, mechanism="laplace")
    out = release([(2**70, 2**100)], planned.analysis, planned.price, SecureSampler())
    assert out.rows[0][0] > 2**61


@pytest.mark.parametrize("type_name", ["DECIMAL(38,20)", "DECIMAL(38,10)", "DECIMAL(29,11)", "DECIMAL(38,0)"])
def test_a_wide_decimals_range_is_exact_so_a_literal_at_its_edge_never_fails_after_admission(type_name: str) -> None:
    """Regression: types.grid computed DECIMAL(p,s)'s largest value in Decimal's default 28 digits, rounding
    10^18 - 10^-20 (DECIMAL(38,20)) up to 10^18; `d <= 1000000000000000000` then planned as in range and was
    admitted, and DuckDB failed on CAST('1000000000000000000' AS DECIMAL(38,20)): a charged execution_failed."""
    precision, scale = (int(x) for x in type_name[8:-1].split(","))
    _, low, high = types.grid(type_name)  # type: ignore[misc]
    assert high == Decimal(f"{10**precision - 1}E-{scale}") and low == -high  # the constructor is exact
    edge = min(Decimal(10) ** (precision - scale), Decimal(10) ** 18)  # the parser reads |x| <= 1e18
    table = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("d", type_name, unit_level=True)))
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (uid BIGINT, d {type_name})")
    con.execute("INSERT INTO t VALUES (1, 1), (2, NULL)")
    for op in ("<=", "<", ">=", ">", "=", "<>"):
        planned = plan(f"SELECT COUNT(*) AS n FROM t WHERE d {op} {edge}", Catalog((table,)), epsilon=1.0,
                       delta=1e-6, mechanism="laplace", bounding="per_query")
        con.execute(planned.sql).fetchall()
