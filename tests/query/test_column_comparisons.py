"""A column compared with a column in WHERE (analyse/where.py: columns_compared), against DuckDB: for every pair of
comparable declared types (numbers of every width and DECIMAL scale, DATE, text, BOOLEAN) and every operator,
the rebuilt predicate holds on exactly the rows where DuckDB's own `a <op> b` holds, on hostile values (NULL,
NaN, ±inf, each type's extremes); where DuckDB's comparison itself fails on a row (a value beyond its common
type), the rebuilt one is NULL there, never an error. End to end, TPC-H's `l_commitdate < l_receiptdate` counts
exactly what DuckDB counts when the bounds do not bind; columns of different kinds are refused, free."""

from __future__ import annotations

import itertools
import math

import duckdb
import pytest
from sqlglot import exp

from proxy.query.analyse.where import columns_compared
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import QueryError
from proxy.query.planner import plan

VALUES: dict[str, tuple[str | None, ...]] = {  # DuckDB literals of each type: extremes, zero, NULL
    "INTEGER": ("-2147483648", "0", "2", "2147483647", None),
    "BIGINT": ("-9223372036854775808", "2", "9223372036854775807", None),
    "HUGEINT": ("-170141183460469231731687303715884105727", "2", "170141183460469231731687303715884105727"),
    "UBIGINT": ("0", "2", "18446744073709551615"),
    "DECIMAL(12,2)": ("-9999999999.99", "1.99", "2.00", "9999999999.99", None),
    "DECIMAL(38,2)": ("-999999999999999999999999999999999999.99", "2.00", "999999999999999999999999999999999999.99"),
    "DECIMAL(18,4)": ("-99999999999999.9999", "1.9999", "2.0000"),
    "DOUBLE": ("'-inf'", "'nan'", "1.9999999999", "2.0", "'inf'", None),
    "FLOAT": ("'-inf'", "'nan'", "2.0", "3.4e38", None),
    "DATE": ("'0001-01-01'", "'1998-12-01'", "'1998-12-02'", "'9999-12-31'", None),
    "VARCHAR": ("''", "'A'", "'a'", "'é'", "'a '", None),
    "BOOLEAN": ("false", "true", None),
}
FAMILY = {"DATE": "date", "VARCHAR": "string", "BOOLEAN": "boolean"}
PAIRS = [(a, b) for a, b in itertools.product(VALUES, VALUES) if FAMILY.get(a, "number") == FAMILY.get(b, "number")]
OPERATORS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


@pytest.mark.parametrize(("a", "b"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_each_row_compares_as_duckdb_compares_it(a: str, b: str) -> None:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (x {a}, y {b})")
    rows = list(itertools.product(VALUES[a], VALUES[b]))
    for x, y in rows:
        con.execute(f"INSERT INTO t VALUES (CAST({x or 'NULL'} AS {a}), CAST({y or 'NULL'} AS {b}))")
    for op in OPERATORS:
        rebuilt = columns_compared(op, ColumnSpec("x", a), ColumnSpec("y", b)).sql("duckdb")
        ours = con.execute(f"SELECT rowid, {rebuilt} FROM t ORDER BY rowid").fetchall()
        for rowid, got in ours:
            symbol = op(this=exp.column("x"), expression=exp.column("y")).sql("duckdb")
            if FAMILY.get(a) == "string":  # text compares under binary collation everywhere in the product
                symbol = symbol.replace('"x"', 'x COLLATE "binary"').replace('"y"', 'y COLLATE "binary"')
            try:
                (want,) = con.execute(f"SELECT {symbol} FROM t WHERE rowid = {rowid}").fetchone()  # type: ignore[misc]
            except duckdb.Error:
                want = None  # DuckDB cannot compare this row: the rebuilt comparison is NULL, not an error
            assert got == want, (a, b, op.__name__, rows[rowid])


def test_columns_of_different_kinds_are_refused() -> None:
    for a, b in (("DATE", "VARCHAR"), ("INTEGER", "DATE"), ("BOOLEAN", "INTEGER"), ("VARCHAR", "DOUBLE")):
        with pytest.raises(QueryError) as err:
            columns_compared(exp.LT, ColumnSpec("x", a), ColumnSpec("y", b))
        assert (err.value.code, err.value.detail["construct"]) == ("policy", "WHERE")


LINEITEM = TableSchema("lineitem", "l_orderkey", (
    ColumnSpec("l_orderkey", "BIGINT"), ColumnSpec("l_commitdate", "DATE"), ColumnSpec("l_receiptdate", "DATE"),
    ColumnSpec("l_extendedprice", "DECIMAL(15,2)", bounds=(0, 200000)), ColumnSpec("l_discount", "DECIMAL(15,2)"),
    ColumnSpec("l_tax", "DECIMAL(15,2)")), max_rows=10)


@pytest.mark.parametrize("where", [
    "l_commitdate < l_receiptdate", "l_receiptdate <= l_commitdate", "l_commitdate = l_receiptdate",
    "l_discount > l_tax", "l_tax <> l_discount AND l_commitdate >= l_receiptdate", "NOT l_discount < l_tax",
    "l_discount < l_extendedprice",
])
def test_a_dp_query_with_a_column_comparison_counts_what_duckdb_counts(where: str) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE lineitem AS SELECT i AS l_orderkey, DATE '1998-01-01' + (i * 7 % 30)::INTEGER AS "
                "l_commitdate, DATE '1998-01-01' + (i * 11 % 30)::INTEGER AS l_receiptdate, "
                "(i % 97 * 10.25)::DECIMAL(15,2) AS l_extendedprice, (i % 11 / 100)::DECIMAL(15,2) AS l_discount, "
                "(i % 9 / 100)::DECIMAL(15,2) AS l_tax FROM range(500) t(i)")
    con.execute("UPDATE lineitem SET l_commitdate = NULL WHERE l_orderkey % 13 = 0")
    planned = plan(f"SELECT COUNT(*) AS n, SUM(l_extendedprice) AS s FROM lineitem WHERE {where}", Catalog((LINEITEM,)),
                   epsilon=1.0, delta=0.0, mechanism="laplace")
    exact = con.execute(f"SELECT COUNT(*), SUM(l_extendedprice) FROM lineitem WHERE {where}").fetchone()
    assert exact is not None and 0 < exact[0] < 500
    # the bounded SQL's pre-noise measures (one row per unit: nothing binds): units, rows, the sum on its grid
    units, count, total = con.execute(planned.sql).fetchone()  # type: ignore[misc]
    assert units == count == exact[0]
    scale = math.log2(total / exact[1])  # the sum's fixed-point grid is a power of two
    assert scale == int(scale), (total, exact)
