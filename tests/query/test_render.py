"""Rendering for Spark without a Spark session: computed values (DuckDB's TRY) become Spark SQL that cannot
fail under ANSI mode, what cannot be rendered so is refused before admission, and joins render over the
engine's names for the declared tables."""

from __future__ import annotations

import pytest
from sqlglot import exp, parse_one

from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import UnsupportedQuery
from proxy.query.planner import plan
from proxy.query.rewrite.render import Target, render

T = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("f", "DOUBLE", groupable=True),
                             ColumnSpec("n", "INTEGER", groupable=True), ColumnSpec("s", "VARCHAR", groupable=True)),
                max_groups=2, max_rows=2)
OWNERS = TableSchema("o", "uid", (ColumnSpec("uid", "BIGINT"),
                                  ColumnSpec("p", "VARCHAR", unit_level=True, groupable=True)), max_rows=1)
CATALOG = Catalog((T, OWNERS))
TARGET = Target("spark", (("t", "__dp_t"), ("o", "__dp_o")))


def _spark(sql: str) -> str:
    planned = plan(sql, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=3)
    assert planned.tree is not None
    return render(planned.tree, TARGET)


def test_a_computed_key_becomes_try_forms_that_cannot_fail_on_spark() -> None:
    sql = _spark("SELECT CAST(FLOOR(-f / n) * 10 AS BIGINT) AS k, COUNT(*) FROM t GROUP BY 1")
    computed = parse_one(sql, read="spark").find(exp.Subquery)
    assert computed is not None
    # the operand -f is parenthesised (precedence is kept in the tree: computed._operand)
    assert "TRY_CAST(TRY_MULTIPLY(CASE WHEN TRY_DIVIDE((TRY_SUBTRACT(0, " in computed.sql("spark")
    # nothing that fails under ANSI mode is left in the computed value: no CAST, + - * / or unary minus
    inner = computed.this.expressions[-1]
    failing = (exp.Cast, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg)
    assert not [n for n in inner.walk() if type(n) in failing and not isinstance(n.this, exp.Literal)]
    assert "TRY(" not in sql


def test_what_spark_cannot_compute_totally_is_refused_before_admission() -> None:
    with pytest.raises(UnsupportedQuery, match=r"Lower in a computed value is not rendered for Spark"):
        _spark("SELECT LOWER(s), COUNT(*) FROM t GROUP BY LOWER(s)")


def test_a_join_on_the_unit_renders_over_the_engines_names() -> None:
    sql = _spark("SELECT o.p, COUNT(*) FROM t JOIN o USING (uid) GROUP BY o.p")
    assert "FROM `__dp_t` AS __b INNER JOIN `__dp_o` AS __o ON" in sql


@pytest.mark.parametrize("sql", [
    "SELECT TRY(reflect('java.lang.System', 'getenv', 'HOME')) FROM t",
    "SELECT TRY(CAST(java_method('java.lang.Runtime', 'getRuntime') AS INT)) FROM t",
    "SELECT TRY(input_file_name()) FROM t",
    "SELECT COUNT(*) FROM t JOIN parquet.`/etc/passwd` AS p ON t.uid = p.uid",
    "SELECT COUNT(*) FROM t JOIN o ON t.uid = o.uid JOIN other ON other.uid = t.uid",
    "SELECT COUNT(*) FROM t CROSS JOIN LATERAL (SELECT * FROM o) AS x",
    "SELECT TRY(CAST(s AS INT) % 2) FROM t",
])
def test_spark_specific_sql_inside_computed_values_and_joins_is_refused(sql: str) -> None:
    with pytest.raises(UnsupportedQuery, match="Spark runs only generated SQL"):
        render(parse_one(sql, read="spark"), TARGET)


def test_a_scoped_join_reads_canonical_values_per_table_on_spark() -> None:
    """Each table's canonical values are computed over its own rows before the join (issue #26): on Spark too,
    over the engine's names, through the same check."""
    t = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"),
                                 ColumnSpec("r", "VARCHAR", unit_level=True, public_domain=("N", "S"))), max_rows=2)
    o = TableSchema("o", "uid", (ColumnSpec("uid", "BIGINT"),
                                 ColumnSpec("p", "VARCHAR", unit_level=True, public_domain=("a", "b"))), max_rows=1)
    planned = plan("SELECT COUNT(*) FROM t JOIN o USING (uid) WHERE o.p = 'a' AND r = 'N'", Catalog((t, o)),
                   epsilon=1.0, delta=0.0, mechanism="laplace")
    assert planned.tree is not None and planned.scope is not None and planned.scope.count == 1
    sql = render(planned.tree, TARGET)
    assert ("FROM (SELECT `uid` AS `uid`, MIN(`r`) OVER (PARTITION BY `uid`) AS `r` FROM `__dp_t`) AS __b INNER JOIN "
            "(SELECT `uid` AS `uid`, MIN(`p`) OVER (PARTITION BY `uid`) AS `p` FROM `__dp_o`) AS __o ON") in sql
