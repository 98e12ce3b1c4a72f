"""Two-level aggregation over units (proxy/query/per_unit/, docs/privacy.md §14): the release before noise equals
DuckDB's answer to the text as written when no clamp binds, on the source and on the bounding store; a clamp that
binds moves a unit's value to its public range; every other shape is refused naming its construct."""

from __future__ import annotations

import pytest

from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import QueryError
from proxy.query.planner import plan
from tests.support import differential as d

CUSTOMER = TableSchema("customer", "c_custkey", (
    ColumnSpec("c_custkey", "BIGINT"),
    ColumnSpec("c_seg", "VARCHAR", unit_level=True, groupable=True, public_domain=("A", "B")),
), one_row_per_unit=True)
ORDERS = TableSchema("orders", "o_custkey", (
    ColumnSpec("o_orderkey", "BIGINT"), ColumnSpec("o_custkey", "BIGINT"), ColumnSpec("o_comment", "VARCHAR"),
    ColumnSpec("o_total", "DECIMAL(10,2)", bounds=(0, 100)), ColumnSpec("o_note", "DOUBLE"),
), max_rows=6, max_groups=2)
CATALOG = Catalog((CUSTOMER, ORDERS))

CUSTOMERS = [(1, "A"), (2, "B"), (3, "A"), (4, "B"), (5, "A")]  # 5 has no order
ORDER_ROWS = [(10, 1, "plain", 10.5, 0.0), (11, 1, "special requests", 20.0, 0.0), (12, 1, "plain", 1.25, 0.0),
              (13, 2, "plain", 99.0, 0.0), (14, 3, "special then requests", 5.0, 0.0), (15, 3, "x", 7.0, 0.0),
              (16, 4, "y", 0.0, 0.0), (17, 4, "z", 3.0, 0.0)]
TABLES = {"customer": ("c_custkey BIGINT, c_seg VARCHAR", CUSTOMERS),
          "orders": ("o_orderkey BIGINT, o_custkey BIGINT, o_comment VARCHAR, o_total DECIMAL(10,2), o_note DOUBLE",
                     ORDER_ROWS)}

EXACT = [
    # TPC-H Q13's text, with its column-alias list
    "SELECT c_count, COUNT(*) AS custdist FROM (SELECT c_custkey, COUNT(o_orderkey) FROM customer LEFT OUTER JOIN "
    "orders ON c_custkey = o_custkey AND o_comment NOT LIKE '%special%requests%' GROUP BY c_custkey) AS c_orders "
    "(c_custkey, c_count) GROUP BY c_count ORDER BY custdist DESC, c_count DESC",
    "SELECT n, COUNT(*) FROM (SELECT o_custkey, COUNT(*) AS n FROM orders GROUP BY o_custkey) AS per GROUP BY n",
    "WITH per AS (SELECT c.c_custkey AS u, COUNT(*) AS n FROM customer c JOIN orders o ON c.c_custkey = o.o_custkey "
    "WHERE c.c_seg = 'A' GROUP BY c.c_custkey) SELECT n, COUNT(*) AS users FROM per GROUP BY n",
    "SELECT COUNT(*), SUM(n), AVG(n) FROM (SELECT o_custkey, COUNT(*) AS n FROM orders WHERE o_total > 2 "
    "GROUP BY o_custkey) AS per WHERE n >= 2",
    "SELECT COUNT(*) AS users, SUM(t) AS total FROM (SELECT c_custkey, SUM(o_total) AS t FROM customer LEFT JOIN "
    "orders ON c_custkey = o_custkey GROUP BY c_custkey) AS per",
    "SELECT t, COUNT(*) FROM (SELECT o_custkey, SUM(o_total) AS t FROM orders GROUP BY o_custkey) AS per GROUP BY t",
    "SELECT n, COUNT(*) FROM (SELECT o_custkey AS who, COUNT(o_comment) AS n FROM orders WHERE o_comment LIKE 'p%' "
    "GROUP BY o_custkey) AS per GROUP BY n",
]


@pytest.fixture
def db():
    database = d.Database(TABLES, CATALOG)
    yield database
    database.close()


@pytest.mark.parametrize("bounding", ["per_query", "store"])
@pytest.mark.parametrize("query", EXACT)
def test_the_release_before_noise_is_duckdbs_answer_when_no_clamp_binds(db, query: str, bounding: str) -> None:
    p = d.planned(query, "duckdb", bounding, CATALOG)  # type: ignore[arg-type]
    product = d.exact_release(db.run(p.sql, "store" if bounding == "store" else "src"), p)
    reference = d.reference_rows(db, query, "duckdb")
    keys = d.key_positions(p)
    present = {d.normal_key(r, keys) for r in reference}
    # a public domain (the counts 0..C) releases its empty groups too: DuckDB has no row for them
    product = [r for r in product if d.normal_key(r, keys) in present or not d.empty(r, keys)]
    ordered = bool(p.analysis.order)
    assert d.rows_match(product if ordered else d.sort_rows(product),
                        reference if ordered else d.sort_rows(reference), d.sums(p)), (product, reference)


def test_a_histogram_of_counts_is_released_over_the_public_domain_0_to_max_rows_at_sensitivity_1() -> None:
    p = plan(EXACT[0], CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")
    a = p.analysis
    assert (a.partitions, a.domains, a.max_groups, a.table.max_rows) == ("public", (tuple(range(7)),), 1, 1)
    assert [n.sensitivity for n in p.price.noise] == [1.0] and p.price.selection is None
    assert p.scope is None  # every unit: the per-unit values are no cells of the dataset's space
    assert p.price.epsilon == 1.0


def test_a_sum_of_inner_sums_has_the_clamp_width_as_sensitivity_and_private_keys_are_thresholded() -> None:
    total = plan(EXACT[4], CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")
    spec = total.analysis.table.column("t")
    assert spec is not None and spec.bounds == (0.0, 600.0)  # 6 orders of at most 100.00
    assert [n.sensitivity / n.grid for n in total.price.noise] == [1.0, 600.0]  # COUNT(*) 1, SUM(t) the clamp
    histogram = plan(EXACT[5], CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")
    assert histogram.analysis.partitions == "private" and histogram.price.selection is not None


def test_a_unit_with_more_rows_than_max_rows_is_clamped_to_max_rows() -> None:
    many = {"customer": TABLES["customer"],
            "orders": (TABLES["orders"][0], [(i, 1, "plain", 100.0, 0.0) for i in range(20)])}
    database = d.Database(many, CATALOG)
    try:
        p = d.planned(EXACT[1], "duckdb", "per_query", CATALOG)
        assert d.exact_release(database.run(p.sql, "src"), p)[6] == (6, 1)  # 20 orders: the count clamped to 6
        s = d.planned(EXACT[4], "duckdb", "per_query", CATALOG)
        assert [d.normal(v) for v in d.exact_release(database.run(s.sql, "src"), s)[0]] == [5.0, 600.0]
    finally:
        database.close()


def test_rows_of_no_unit_are_dropped_never_pooled_into_one_unit() -> None:
    nobody = {"customer": TABLES["customer"],
              "orders": (TABLES["orders"][0], ORDER_ROWS + [(18 + i, None, "x", 1.0, 0.0) for i in range(3)])}
    database = d.Database(nobody, CATALOG)
    try:
        p = d.planned(EXACT[1], "duckdb", "per_query", CATALOG)
        released = {r[0]: r[1] for r in d.exact_release(database.run(p.sql, "src"), p) if r[1]}
        assert released == {1: 1, 2: 2, 3: 1}  # DuckDB's answer has a NULL unit with n = 3 besides
    finally:
        database.close()


@pytest.mark.parametrize(("query", "construct"), [
    ("SELECT n, COUNT(*) FROM (SELECT o_comment, COUNT(*) AS n FROM orders GROUP BY o_comment) AS q GROUP BY n",
     "GROUP BY"),
    ("SELECT n, COUNT(*) FROM (SELECT o_custkey, COUNT(*) AS n FROM orders GROUP BY o_custkey, o_comment) AS q "
     "GROUP BY n", "GROUP BY"),
    ("SELECT COUNT(*) FROM (SELECT c_custkey, COUNT(*) AS n FROM customer LEFT JOIN orders ON c_custkey = o_custkey "
     "GROUP BY o_custkey) AS q", "GROUP BY"),  # a LEFT JOIN's joined unit is NULL for a customer with no order
    ("SELECT SUM(t) FROM (SELECT o_custkey, SUM(o_note) AS t FROM orders GROUP BY o_custkey) AS q", "SUM"),
    ("SELECT SUM(t) FROM (SELECT o_custkey, MAX(o_total) AS t FROM orders GROUP BY o_custkey) AS q", "SELECT"),
    ("SELECT COUNT(*) FROM (SELECT o_custkey, COUNT(DISTINCT o_comment) AS t FROM orders GROUP BY o_custkey) AS q",
     "SELECT"),
    ("SELECT n, COUNT(*) FROM (SELECT m AS n, COUNT(*) AS k FROM (SELECT o_custkey, COUNT(*) AS m FROM orders GROUP "
     "BY o_custkey) AS a GROUP BY m) AS b GROUP BY n", "nesting"),
    ("SELECT COUNT(*) FROM (SELECT o_custkey, COUNT(*) AS n FROM orders GROUP BY o_custkey HAVING COUNT(*) > 1) "
     "AS q", "HAVING"),
    ("SELECT COUNT(*) FROM (SELECT c_custkey, COUNT(*) AS n FROM customer LEFT JOIN orders ON c_custkey = o_custkey "
     "WHERE o_total > 3 GROUP BY c_custkey) AS q", "LEFT JOIN"),
    ("SELECT COUNT(*) FROM (SELECT c_custkey, COUNT(*) AS n FROM customer JOIN orders ON c_custkey = o_orderkey "
     "GROUP BY c_custkey) AS q", "JOIN ON"),
    ("SELECT COUNT(*) FROM (SELECT o_custkey, COUNT(*) FROM orders GROUP BY o_custkey) AS q", "SELECT"),
    ("SELECT o_custkey, COUNT(*) FROM (SELECT o_custkey, COUNT(*) AS n FROM orders GROUP BY o_custkey) AS q "
     "GROUP BY o_custkey", "GROUP BY"),  # the unit is no key of the outer query either
    ("SELECT n, COUNT(*) FROM (SELECT o_custkey, COUNT(*) AS n FROM orders GROUP BY o_custkey) AS q JOIN customer "
     "ON q.o_custkey = c_custkey GROUP BY n", "JOIN"),
])
def test_other_shapes_are_refused_naming_the_construct(query: str, construct: str) -> None:
    with pytest.raises(QueryError) as err:
        plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")
    assert err.value.detail.get("construct") == construct, err.value.message
