"""Subqueries and CTEs whose inner query joins tables (TPC-H Q7, Q8, Q9's shape; proxy/query/parse/flatten_joins.py):
each wrapped text plans as the same question written directly, its release before noise is DuckDB's own answer to
the wrapped text as written (bounds that never bind), and whatever would change the meaning is refused."""

from __future__ import annotations

import datetime
import random
from collections.abc import Iterator

import pytest

from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
from proxy.query.errors import QueryError
from proxy.query.planner import plan
from tests.support import differential as diff

T = TableSchema("t", "uid", (
    ColumnSpec("uid", "BIGINT"), ColumnSpec("k", "INTEGER", groupable=True),
    ColumnSpec("k2", "INTEGER", groupable=True, unit_level=True), ColumnSpec("x", "DOUBLE", bounds=(0.0, 10.0)),
    ColumnSpec("day", "DATE", groupable=True),
), max_rows=1000, max_groups=1000)
DIM = PublicTable("dim", (ColumnSpec("k", "INTEGER", groupable=True),
                          ColumnSpec("label", "VARCHAR", groupable=True, public_domain=("a", "b", "c")),
                          ColumnSpec("zone", "INTEGER", groupable=True)), ("k",), unique=True)
ZONE = PublicTable("zone", (ColumnSpec("zone", "INTEGER", groupable=True),
                            ColumnSpec("zname", "VARCHAR", groupable=True)), ("zone",), unique=True)
CATALOG = Catalog((T,), public=(DIM, ZONE))

# (wrapped, direct): the direct text is the flattened query as an analyst would write it (a computed value in
# parentheses, as it is substituted)
SAME = [
    # Q7: one public table twice, a computed key and a computed measure, ordered by output names
    ("SELECT sl, cl, yr, SUM(v) AS s FROM (SELECT d1.label AS sl, d2.label AS cl, EXTRACT(year FROM day) AS yr, "
     "x * 2 AS v FROM t, dim d1, dim d2 WHERE t.k = d1.k AND t.k2 = d2.k AND x > 1) AS q "
     "GROUP BY sl, cl, yr ORDER BY sl, cl, yr",
     "SELECT d1.label AS sl, d2.label AS cl, (EXTRACT(year FROM day)) AS yr, SUM((x * 2)) AS s FROM t, dim d1, "
     "dim d2 WHERE t.k = d1.k AND t.k2 = d2.k AND x > 1 GROUP BY d1.label, d2.label, (EXTRACT(year FROM day)) "
     "ORDER BY sl, cl, yr"),
    # Q8: a public table first that connects to the next table only through a later one; a ratio of sums
    ("SELECT yr, SUM(CASE WHEN nation = 'a' THEN v ELSE 0 END) / SUM(v) AS share FROM (SELECT EXTRACT(year FROM "
     "day) AS yr, x AS v, d2.label AS nation FROM dim d1, zone, t, dim d2 WHERE d1.k = t.k AND t.k2 = d2.k AND "
     "d1.zone = zone.zone AND zone.zname = 'east') AS q GROUP BY yr ORDER BY yr",
     "SELECT (EXTRACT(year FROM day)) AS yr, SUM(CASE WHEN d2.label = 'a' THEN x ELSE 0 END) / SUM(x) AS share "
     "FROM t JOIN dim d1 ON d1.k = t.k JOIN zone ON d1.zone = zone.zone JOIN dim d2 ON t.k2 = d2.k "
     "WHERE zone.zname = 'east' GROUP BY (EXTRACT(year FROM day)) ORDER BY yr"),
    # a CTE with an explicit LEFT JOIN; both WHERE clauses filter the joined rows
    ("WITH q AS (SELECT d.label AS lab, x FROM t LEFT JOIN dim d ON t.k = d.k WHERE x < 9) "
     "SELECT lab, COUNT(*) AS n, SUM(x) AS s FROM q WHERE lab <> 'c' GROUP BY lab",
     "SELECT d.label AS lab, COUNT(*) AS n, SUM(x) AS s FROM t LEFT JOIN dim d ON t.k = d.k "
     "WHERE x < 9 AND d.label <> 'c' GROUP BY d.label"),
    # columns read under the subquery's alias, a value the outer query never reads
    ("SELECT q.lab, COUNT(DISTINCT q.u) AS units FROM (SELECT dim.label AS lab, t.uid AS u, x / 0 AS never "
     "FROM t, dim WHERE dim.k = t.k) AS q GROUP BY q.lab",
     "SELECT dim.label AS lab, COUNT(DISTINCT t.uid) AS units FROM t JOIN dim ON dim.k = t.k GROUP BY dim.label"),
]


def _rows() -> dict[str, tuple[str, list[tuple[object, ...]]]]:
    rng = random.Random(3)
    days = [datetime.date(1994 + y, 1 + m, 1) for y in range(3) for m in (0, 6)]
    units = [rng.randrange(30) for _ in range(300)]  # k2 is unit-level: one value per unit, as declared
    t = [(u, rng.randrange(5), u % 5, round(rng.uniform(0, 10), 2), rng.choice(days)) for u in units]
    t += [(99, None, 1, 3.0, days[0]), (98, 4, None, None, None)]  # NULL keys and values
    dim = [(0, "a", 0), (1, "b", 0), (2, "c", 1), (3, "a", 1)]  # k = 4 matches nothing: INNER drops it
    return {"t": ("uid BIGINT, k INTEGER, k2 INTEGER, x DOUBLE, day DATE", t),
            "dim": ("k INTEGER, label VARCHAR, zone INTEGER", dim),
            "zone": ("zone INTEGER, zname VARCHAR", [(0, "east"), (1, "west")])}


@pytest.fixture(scope="module")
def db() -> Iterator[diff.Database]:
    database = diff.Database(_rows(), CATALOG)
    yield database
    database.close()


def _plan(sql: str) -> diff.QueryPlan:
    return plan(sql, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=5)


@pytest.mark.parametrize(("wrapped", "direct"), SAME)
def test_a_flattened_join_plans_as_the_direct_query(wrapped: str, direct: str) -> None:
    a, b = _plan(wrapped), _plan(direct)
    assert a.sql == b.sql and a.price == b.price and a.scope == b.scope
    assert [o.name for o in a.analysis.outputs] == [o.name for o in b.analysis.outputs]


@pytest.mark.parametrize("bounding", ["per_query", "store"])
@pytest.mark.parametrize(("wrapped", "direct"), SAME)
def test_a_flattened_join_answers_as_duckdb_answers_the_wrapped_text(
        db: diff.Database, wrapped: str, direct: str, bounding: diff.Bounding) -> None:
    planned = diff.planned(wrapped, "duckdb", bounding, CATALOG)
    product = diff.product_rows(db, wrapped, "duckdb", bounding)
    reference = diff.reference_rows(db, wrapped, "duckdb")
    assert reference  # the comparison is not vacuous
    keys = diff.key_positions(planned)
    present = {diff.normal_key(r, keys) for r in reference}
    # a public domain releases its empty groups too: DuckDB has no row for them
    product = [r for r in product if diff.normal_key(r, keys) in present or not diff.empty(r, keys)]
    ordered = planned.analysis.order != ()
    if not ordered:
        product, reference = diff.sort_rows(product), diff.sort_rows(reference)
    assert diff.rows_match(product, reference, diff.sums(planned)), (product, reference)


def test_the_comparison_can_fail(db: diff.Database) -> None:
    """The same flattened query with its inner WHERE lost would answer otherwise: the differential test bites."""
    wrapped = SAME[0][0]
    reference = diff.reference_rows(db, wrapped, "duckdb")
    loose = diff.product_rows(db, wrapped.replace(" AND x > 1", ""), "duckdb", "per_query")
    assert not diff.rows_match(loose, reference, {3})


@pytest.mark.parametrize(("sql", "construct"), [
    ("SELECT COUNT(*) FROM (SELECT * FROM t, dim WHERE t.k = dim.k) q", "*"),
    ("SELECT COUNT(*) FROM (SELECT t.*, dim.label FROM t, dim WHERE t.k = dim.k) q", "*"),
    ("SELECT COUNT(*) FROM (SELECT d1.label AS l, d2.label AS l FROM t, dim d1, dim d2 "
     "WHERE t.k = d1.k AND t.k2 = d2.k) q", "SUBQUERY"),  # two outputs of one name
    ("SELECT COUNT(*) FROM (SELECT DISTINCT dim.label FROM t, dim WHERE t.k = dim.k) q", "DISTINCT"),
    ("SELECT COUNT(*) FROM (SELECT dim.label AS l FROM t, dim WHERE t.k = dim.k LIMIT 5) q", "LIMIT"),
    ("SELECT COUNT(*) FROM (SELECT dim.label AS l FROM t, dim WHERE t.k = dim.k GROUP BY dim.label) q",
     "GROUP BY"),
    ("SELECT COUNT(*) FROM (SELECT dim.label AS l FROM t, dim WHERE t.k = dim.k ORDER BY 1) q", "ORDER BY"),
    ("SELECT s FROM (SELECT SUM(x) AS s FROM t, dim WHERE t.k = dim.k) q", "SUBQUERY"),
    ("SELECT COUNT(*) FROM (SELECT t.uid AS u FROM t, dim WHERE t.k = dim.k) q JOIN zone z ON q.u = z.zone",
     "JOIN"),  # a join beside the subquery
    ("SELECT SUM(x) FROM (SELECT dim.label AS l FROM t, dim WHERE t.k = dim.k) q", "COLUMN"),  # not selected
    ("SELECT SUM(t.x) FROM (SELECT t.x AS x FROM t, dim WHERE t.k = dim.k) q", "COLUMN"),  # an inner alias
    ("SELECT l AS lab2, COUNT(*) FROM (SELECT dim.label AS l FROM t, dim WHERE t.k = dim.k) q GROUP BY lab2",
     "COLUMN"),  # an outer alias outside ORDER BY: flattened, it could name a column of an inner table
    ("SELECT l AS v, COUNT(*) AS n FROM (SELECT dim.label AS l, x AS v FROM t, dim WHERE t.k = dim.k) q "
     "GROUP BY l ORDER BY v", "ORDER BY"),  # the output v, not the inner v
    ("SELECT COUNT(*) FROM (SELECT a.x AS x FROM t a, t b WHERE a.uid = b.uid) q", "JOIN"),  # protected twice
    ("SELECT COUNT(*) FROM (SELECT dim.label AS l FROM t, (SELECT * FROM dim) dim WHERE t.k = dim.k) q",
     "SUBQUERY"),
    ("SELECT COUNT(*) FROM (SELECT dim.label AS l FROM t, dim) q", "CROSS JOIN"),
])
def test_what_would_change_the_meaning_is_refused(sql: str, construct: str) -> None:
    with pytest.raises(QueryError) as err:
        _plan(sql)
    assert err.value.detail.get("construct") == construct, (err.value, err.value.detail)
