"""After admission nothing may fail on the data (issue #10): for every clamp bound the policy accepts, the
rewritten query runs on any data and the release completes, whatever the values are (NaN, ±inf, 2^53 + 1,
2^62, 2^63 and past), however many rows one unit has, under either noise.

An error that depends on one person's value after the charge is a one-bit leak per query: `SELECT SUM(x)
... WHERE uid = 42` would answer or fail depending on x.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms.sampling import SecureSampler
from proxy.query import plan
from proxy.query.catalog import MAX_ABS_BOUND, Catalog, ColumnSpec, TableSchema
from proxy.query.release import release
from tests import scratch_db

EXTREMES: dict[str, list[object]] = {
    "DOUBLE": [math.nan, math.inf, -math.inf, 2.0**53 + 2, 2.0**62, 2.0**63, -(2.0**64), 1e308, -1e308, 5e-324,
               -0.0, 1e15, -1e15],
    "REAL": [math.nan, math.inf, -math.inf, 3.4e38, -3.4e38, 2.0**62, 1e-45],
    "BIGINT": [2**53 + 1, 2**62, 2**63 - 1, -(2**63), 0],
    "HUGEINT": [2**63, 2**100, -(2**126), 2**127 - 1],
    "UBIGINT": [2**64 - 1, 2**63, 0],
    "DECIMAL(38,0)": [10**37, -(10**37), 2**53 + 1],
    "DECIMAL(18,3)": [10**14, -(10**14), 0.001],
}
bound_values = st.one_of(
    st.sampled_from([0.0, MAX_ABS_BOUND, -MAX_ABS_BOUND, 2.0**49, 1e-300, -1e-300, 0.5, 2.0**30, 2.0**30 + 1]),
    st.floats(-MAX_ABS_BOUND, MAX_ABS_BOUND, allow_nan=False),
)
SHAPES = (
    "SELECT SUM(x) AS s, AVG(x) AS a, COUNT(x) AS c, COUNT(*) AS n FROM t",
    "SELECT g, SUM(x) AS s, AVG(x) AS a FROM t GROUP BY g",
    "SELECT g, SUM(x) AS s FROM t WHERE x > 0 GROUP BY g HAVING s > 1 ORDER BY s DESC LIMIT 3",
)


@settings(max_examples=60, deadline=None)
@given(
    type_=st.sampled_from(sorted(EXTREMES)),
    bounds=st.tuples(bound_values, bound_values).map(sorted),
    values=st.data(),
    heavy=st.sampled_from([1, 50, 5000]),
    shape=st.sampled_from(SHAPES),
    mechanism=st.sampled_from(["laplace", "gaussian"]),
    epsilon=st.sampled_from([1e-6, 0.1, 1.0]),
)
def test_no_query_fails_after_admission_on_any_data(
    type_: str, bounds: list[float], values: st.DataObject, heavy: int, shape: str, mechanism: str, epsilon: float
) -> None:
    column = ColumnSpec("x", type_, bounds=(bounds[0], bounds[1]))
    table = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
                                     column), max_rows=10_000, max_groups=3)
    picked = values.draw(st.lists(st.sampled_from(EXTREMES[type_] + [None]), min_size=1, max_size=6))
    planned = plan(shape, Catalog((table,)), epsilon=epsilon, delta=1e-7, mechanism=mechanism)  # type: ignore[arg-type]

    con = scratch_db.connect()
    con.execute(f"CREATE TABLE t (uid BIGINT, g VARCHAR, x {type_})")
    for i, value in enumerate(picked):
        # one heavy unit holds `heavy` copies of the value: sums of up to 5000 values at the bound pass 2^62
        con.execute("INSERT INTO t SELECT ?, ?, ? FROM range(?)", [i % 2, "ab"[i % 2], value, heavy])
    rows = con.execute(planned.sql).fetchall()  # the engine: no cast or overflow may fail
    out = release(rows, planned.analysis, planned.price, SecureSampler())  # noise: no range error
    assert out.columns
    con.close()
