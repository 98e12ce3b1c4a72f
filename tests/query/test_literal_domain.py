"""A literal outside a declared public domain (issue #28, item 2): refused before any charge, with the nearest
declared values as a hint."""

from __future__ import annotations

import pytest

from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import LiteralOutsideDomain
from proxy.query.planner import plan

T = TableSchema("t", "u", (
    ColumnSpec("u", "BIGINT"),
    ColumnSpec("region", "VARCHAR", groupable=True, public_domain=("north", "south", "east")),
    ColumnSpec("n", "INTEGER", groupable=True, public_domain=(1, 2, 10)),
    ColumnSpec("price", "DECIMAL(5,2)", public_domain=(1.5, 2.25)),
    ColumnSpec("day", "DATE", groupable=True, date_bounds=("2024-01-01", "2024-01-31")),
    ColumnSpec("age", "INTEGER", bounds=(18, 90)),
))
CATALOG = Catalog((T,))


def _plan(sql: str):  # type: ignore[no-untyped-def]
    return plan(sql, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")


@pytest.mark.parametrize(("where", "column", "literal", "nearest"), [
    ("region = 'North'", "region", "'North'", ["north"]),  # equal ignoring case: the hint
    ("region <> 'SOUTH'", "region", "'SOUTH'", ["south"]),
    ("region IN ('north', 'sooth')", "region", "'sooth'", ["south", "north"]),  # the most alike text
    ("region NOT IN ('westish')", "region", "'westish'", []),
    ("'North' = region", "region", "'North'", ["north"]),  # either side
    ("n = 3", "n", "3", [2, 1]),  # for numbers the closest
    ("n IN (1, 9)", "n", "9", [10, 2]),
    ("price = 1.55", "price", "1.55", [1.5, 2.25]),
    ("COUNT_IF_FILTER", "region", "'East'", ["east"]),
])
def test_an_equality_with_an_undeclared_value_is_refused_naming_the_nearest(
    where: str, column: str, literal: str, nearest: list[object]
) -> None:
    sql = ("SELECT COUNT(*) FILTER (WHERE region = 'East') FROM t" if where == "COUNT_IF_FILTER"
           else f"SELECT COUNT(*) FROM t WHERE {where}")
    with pytest.raises(LiteralOutsideDomain) as refused:
        _plan(sql)
    error = refused.value
    assert error.code == "literal_outside_domain"
    assert (error.detail["column"], error.detail["literal"], error.detail["nearest"]) == (column, literal, nearest)
    assert column in error.message and literal in error.message
    if nearest:
        assert str(error.detail["hint"]).startswith("did you mean")


@pytest.mark.parametrize("where", [
    "region = 'north'", "region IN ('south', 'east')", "n = 10", "n = 10.0", "price = 1.50", "price = 2.250",
    "region > 'North'",  # a range reaches what it reaches: not an equality
    "region LIKE 'North%'",
    "day = '2023-12-31'",  # date bounds are a calendar, not a declared set of values: rows may lie outside
    "age = 17",  # clamp bounds likewise
    "NOT region IN ('north', 'south', 'east')",  # the undeclared values, on purpose
])
def test_declared_values_ranges_and_undeclared_columns_are_answered(where: str) -> None:
    _plan(f"SELECT COUNT(*) FROM t WHERE {where}")
