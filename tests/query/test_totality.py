"""After admission nothing may fail on the data (issue #10): for every clamp bound the policy accepts, the
rewritten query runs on any data and the release completes, whatever the values are (NaN, ±inf, 2^53 + 1,
2^62, 2^63 and past), however many rows one unit has, under either noise.

An error that depends on one person's value after the charge is a one-bit leak per query: `SELECT SUM(x)
... WHERE uid = 42` would answer or fail depending on x.

Issue #26: at the loader's limits (max_rows 10 000, bounds ±1e15) a cell reaches 10^19 and a sum over units
passes 2^63 from 9224 units; the matrix below runs every path (rank filter, per cell, per query, the cap's
histogram, VAR) on DuckDB and on Spark at those limits, and checks sums past 2^63 exactly (docs/privacy.md §11.1).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import duckdb
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mechanisms.sampling import FixedSampler, SecureSampler
from proxy import pipeline
from proxy.engines.duckdb_engine import Engine
from proxy.query import auto_release
from proxy.query.auto.bounds import ChosenBounds
from proxy.query.auto.histograms import selection
from proxy.query.catalog import MAX_ABS_BOUND, Catalog, ColumnSpec, TableSchema
from proxy.query.errors import QueryError
from proxy.query.planner import QueryPlan, plan
from proxy.query.release.publish import release
from proxy.query.rewrite import store_layout
from proxy.query.rewrite.render import DUCKDB
from proxy.store.duckdb_store import StoreEngine
from tests.support import scratch_db

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
    "SELECT g, SUM(x) AS s, COUNT(*) AS n FROM t WHERE x <> 0 OR x IS NULL GROUP BY g",  # per cell on the store
    "SELECT g, VAR_POP(x) AS v, STDDEV(x) AS d FROM t GROUP BY g",  # refused where the range is too wide
)


# a column type and the values its rows hold (one heavy unit holds `heavy` copies of each)
typed_values = st.sampled_from(sorted(EXTREMES)).flatmap(lambda t: st.tuples(
    st.just(t), st.lists(st.sampled_from([*EXTREMES[t], None]), min_size=1, max_size=6)))


@settings(max_examples=int(os.environ.get("TOTALITY_EXAMPLES", "80")), deadline=None,
          derandomize=os.environ.get("TOTALITY_RANDOM") != "1")  # CI: the same examples every run
@example(case=("BIGINT", [2**62]), bounds=[-MAX_ABS_BOUND, MAX_ABS_BOUND], heavy=10_001, shape=SHAPES[3],
         mechanism="laplace", epsilon=1.0, max_rows=10_000, bounding="store", auto_bounds=False)  # issue #26 item 3
@given(
    case=typed_values,
    bounds=st.tuples(bound_values, bound_values).map(sorted),
    heavy=st.sampled_from([1, 50, 5000, 10_001]),
    shape=st.sampled_from(SHAPES),
    mechanism=st.sampled_from(["laplace", "gaussian"]),
    epsilon=st.sampled_from([1e-6, 0.1, 1.0]),
    max_rows=st.sampled_from([1, 9224, 10_000]),  # k at its limit: k · 1e15 passes 2^63 from k = 9224
    bounding=st.sampled_from(["per_query", "store"]),
    auto_bounds=st.booleans(),  # bounds = "auto": SUM and AVG capped per unit, after the cap's histogram
)
def test_no_query_fails_after_admission_on_any_data(
    case: tuple[str, list[object]], bounds: list[float], heavy: int, shape: str, mechanism: str, epsilon: float,
    max_rows: int, bounding: str, auto_bounds: bool,
) -> None:
    type_, picked = case
    try:
        column = ColumnSpec("x", type_, bounds=(bounds[0], bounds[1]), auto_bounds=auto_bounds)
    except ValueError:
        return  # refused when the policy loads (bounds holding no value of the type): nothing is ever admitted
    table = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
                                     column), max_rows=max_rows, max_groups=3)
    try:
        planned = plan(shape, Catalog((table,)), epsilon=epsilon, delta=1e-7, mechanism=mechanism,  # type: ignore[arg-type]
                       bounding=bounding)  # type: ignore[arg-type]
    except QueryError:
        return  # refused before admission: nothing charged, nothing run
    con = scratch_db.connect()
    try:
        schema = "src." if bounding == "store" else ""
        if bounding == "store":
            con.execute("ATTACH ':memory:' AS src")
        con.execute(f"CREATE TABLE {schema}t (uid BIGINT, g VARCHAR, x {type_})")
        for i, value in enumerate(picked):
            # one heavy unit holds `heavy` copies of the value: sums of up to 10001 values at the bound pass 2^63
            con.execute(f"INSERT INTO {schema}t SELECT ?, ?, ? FROM range(?)", [i % 2, "ab"[i % 2], value, heavy])
        if bounding == "store":
            con.execute(store_layout.build_sql(table, "key"))
        if planned.auto is not None and planned.auto.parts:  # the selection's histograms, then the query at its bounds
            text = selection(planned.analysis, planned.auto, bounding == "store", DUCKDB, ranked=planned.tree is None)
            chosen = auto_release.draw(planned.analysis, planned.auto, con.execute(text).fetchall(), SecureSampler())
            planned = auto_release.plan_at(planned, chosen)
        rows = con.execute(planned.sql).fetchall()  # the engine: no cast or overflow may fail
        out = release(rows, planned.analysis, planned.price, SecureSampler())  # noise: no range error
        assert out.columns
    finally:
        con.close()


# --- issue #26: no sum or cast past 2^63 after admission, on every engine and every path ------------------------
#
# Within the loader's limits (max_rows <= 10 000, clamp bounds within ±1e15) one unit's cell reaches
# k·1e15 = 10^19 > 2^63, and a sum over units passes 2^63 from 9224 units at 1e15. Every path must answer, and
# answer exactly where no bound binds.

K = 10_000  # the loader's largest max_rows
TOP = int(MAX_ABS_BOUND)  # the loader's largest clamp bound
SPREAD = 2**20  # VAR's widest accepted range is 2^21 units: squares reach 2^40 per row
TOTALITY = TableSchema("t", "uid", (
    ColumnSpec("uid", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
    ColumnSpec("h", "VARCHAR", groupable=True), ColumnSpec("x", "BIGINT", bounds=(-MAX_ABS_BOUND, MAX_ABS_BOUND)),
    ColumnSpec("a", "BIGINT", bounds=(0, MAX_ABS_BOUND), auto_bounds=True),  # SUM(a): a per-unit L1 cap (§10.2)
    ColumnSpec("v", "BIGINT", bounds=(-SPREAD, SPREAD)),
), max_rows=K, max_groups=2)
COLUMNS = "uid BIGINT, g VARCHAR, h VARCHAR, x BIGINT, a BIGINT, v BIGINT"
# group 'a': two heavy units (k + 1 rows at +1e15 and at -1e15); 'b': one heavy unit and a light one;
# 'c': ten light units of 1000 rows at 1e15 (10^19 in all, no bound binds); 'd': 9224 one-row units at 1e15
# (9.224e18 > 2^63 − 1 > 9223 units' sum, no bound binds). Light values are within their bounds: those sums must
# stay exact.
SOURCE = (
    f"SELECT 1 AS uid, 'a' AS g, 'p' AS h, {TOP} AS x, {TOP} AS a, {SPREAD} AS v FROM range({K + 1})",
    f"SELECT 2, 'a', 'p', -{TOP}, {TOP}, -{SPREAD} FROM range({K + 1})",
    f"SELECT 3, 'b', 'p', {TOP}, {TOP}, {SPREAD} FROM range({K + 1})",
    "SELECT 4, 'b', 'q', 7, 9, 3 FROM range(3)",
    f"SELECT 10 + range // 1000, 'c', 'p', {TOP}, {TOP}, {SPREAD} FROM range(10000)",
    f"SELECT 100 + range, 'd', 'q', {TOP}, {TOP}, -{SPREAD} FROM range(9224)",
)
EXACT = {"c": 10 * 1000 * TOP, "d": 9224 * TOP}  # SUM(x) where no bound binds: past 2^63, exact
PATHS = {  # query -> what it must run through on the store (the per-query rewrite runs each too)
    "SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS m FROM t GROUP BY g": "rank filter",
    "SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS m FROM t WHERE x <> 0 GROUP BY g": "per cell",
    "SELECT SUM(x) AS s FROM t WHERE x > 0": "per cell",  # issue #26 item 3, exactly
    "SELECT g, h, SUM(x) AS s FROM t GROUP BY g, h": "per cell, a window over each unit's cells",
    "SELECT g, SUM(a) AS s FROM t GROUP BY g": "cap histogram, rank filter",
    "SELECT g, SUM(a) AS s FROM t WHERE x <> 0 GROUP BY g": "cap histogram, per cell",
    "SELECT g, VAR_POP(v) AS var FROM t GROUP BY g": "per-query windows on the store",
}


def _answer(planned: QueryPlan, engine: Any) -> list[tuple[object, ...]]:
    """What the pipeline does after the charge (proxy/pipeline.py, run/auto_bounds.py): the selection, the query at
    the chosen bounds, the release. Returns the exact rows, sorted. The bounds are drawn without noise (the most
    likely ones), so that both engines run the query at the same bounds; the release draws real noise."""
    if planned.auto is not None:
        picking = auto_release.selection_text(planned, engine.target)
        chosen = pipeline.choose_bounds(planned, engine, picking, FixedSampler(), 600)
        planned = auto_release.plan_at(planned, chosen)
    rows = engine.run(pipeline.engine_sql(planned, engine), 600).rows
    assert release(rows, planned.analysis, planned.price, SecureSampler()).columns
    return sorted((tuple(int(v) if isinstance(v, Decimal) else v for v in row) for row in rows), key=repr)


def _plan(sql: str, bounding: str) -> QueryPlan:
    return plan(sql, Catalog((TOTALITY,)), epsilon=1.0, delta=1e-7, mechanism="laplace", salt=5,
                bounding=bounding)  # type: ignore[arg-type]


def _plain(sql: str, engine: Any) -> dict[str, int]:
    return {g: int(s) for g, s in engine.run(sql, 600).rows}


def _write_source(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"CREATE TABLE t ({COLUMNS})")
    for select in SOURCE:
        con.execute(f"INSERT INTO t {select}")


@pytest.fixture(scope="module")
def duckdb_engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("totality")
    with duckdb.connect(str(directory / "t.duckdb")) as con:
        _write_source(con)
    engines = {"per_query": Engine(directory / "t.duckdb", timeout_s=600),
               "store": StoreEngine("t", directory / "t.duckdb", Catalog((TOTALITY,)), directory, timeout_s=600,
                                    memory_limit="1GB")}
    yield engines
    for engine in engines.values():
        engine.close()


@pytest.mark.parametrize("bounding", ["store", "per_query"])
@pytest.mark.parametrize("sql", list(PATHS))
def test_duckdb_answers_every_path_at_the_loaders_limits(duckdb_engines: dict[str, Any], sql: str,
                                                         bounding: str) -> None:
    rows = _answer(_plan(sql, bounding), duckdb_engines[bounding])
    assert rows
    if "SUM(x)" in sql and sql.startswith("SELECT g, COUNT"):  # exact where no bound binds, past 2^63
        sums = {row[0]: row[3] for row in rows}
        assert {g: sums[g] for g in EXACT} == EXACT == {
            g: s for g, s in _plain("SELECT g, SUM(x) FROM t GROUP BY g", duckdb_engines["per_query"]).items()
            if g in EXACT}
        # a heavy unit's cell is k rows' worth: 'b' holds 10^19 + 21 on the rank filter and per cell alike
        assert sums["b"] == K * TOP + 21 and sums["a"] == 0


def test_one_heavy_unit_answers_on_the_store_per_cell_path(duckdb_engines: dict[str, Any]) -> None:
    """Issue #26 item 3: the per-cell path cast k·total/n to BIGINT before clamping it, so one unit of more than
    k rows at 1e15 made the query a charged `execution_failed` (Conversion Error: 1e+19 out of range for INT64)."""
    planned = _plan("SELECT SUM(x) AS s FROM t WHERE x > 0", "store")
    assert "__n <= 10000" in planned.sql  # the per-cell path
    [(_, total)] = _answer(planned, duckdb_engines["store"])
    # unit 1 and unit 3: k rows' worth each (10^19); unit 4: 21; 'c' and 'd' exact
    assert total == 2 * K * TOP + 21 + EXACT["c"] + EXACT["d"]


# --- the same on Spark (ANSI mode: SUM of a BIGINT fails past 2^63): few cases, one session and store ----------

SPARK_CASES = [(sql, "store") for sql in PATHS] + [
    ("SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS m FROM t GROUP BY g", "per_query"),
    ("SELECT g, SUM(a) AS s FROM t GROUP BY g", "per_query"),
    ("SELECT SUM(x) AS s FROM t WHERE g = 'd'", "per_query"),  # issue #26 item 4: 9224 units at 1e15
]


@pytest.fixture(scope="module")
def spark_engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    pytest.importorskip("pyspark")
    from proxy.engines.spark_config import SparkSource, SparkTable
    from proxy.engines.spark_engine import SparkEngine
    from proxy.store.spark_store import SparkStoreEngine
    from tests.support.spark_data import MASTER

    directory = tmp_path_factory.mktemp("totality-spark")
    path = directory / "t.parquet"
    with duckdb.connect() as con:
        _write_source(con)
        con.execute(f"COPY t TO '{path}' (FORMAT parquet)")
    source = SparkSource(MASTER, (SparkTable("t", "parquet", str(path)),))
    engines = {"per_query": SparkEngine("totality", source, timeout_s=600),
               "store": SparkStoreEngine("totality", source, Catalog((TOTALITY,)), directory, timeout_s=600)}
    yield engines
    for engine in engines.values():
        engine.close()


@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(("sql", "bounding"), SPARK_CASES)
def test_spark_answers_every_path_as_duckdb_does(spark_engines: dict[str, Any], duckdb_engines: dict[str, Any],
                                                 sql: str, bounding: str) -> None:
    """Spark sums in DECIMAL(38, 0) (render.py): the same exact rows as DuckDB's HUGEINT sums, past 2^63."""
    planned = _plan(sql, bounding)
    on_spark = _answer(planned, spark_engines[bounding])
    assert on_spark == _answer(planned, duckdb_engines[bounding]), sql
    if "g = 'd'" in sql:
        assert on_spark == [(9224, EXACT["d"])]  # 9224 units, their exact sum


def test_the_premises_of_the_totality_argument_hold() -> None:
    """docs/privacy.md §11.1 bounds every value after admission from these limits: raising one must fail here
    first, not after a charge."""
    from proxy.query.analyse.measures import MAX_SPREAD_STEPS, fixed_point
    from proxy.query.auto import total as auto_total
    from proxy.query.rewrite import cells

    # P1: a grid value is within 2^50 for every bound the loader accepts (fine grids: within 2^30)
    for lo, hi, type_ in ((-MAX_ABS_BOUND, MAX_ABS_BOUND, "BIGINT"), (-MAX_ABS_BOUND, MAX_ABS_BOUND, "DOUBLE"),
                          (0.0, 2.0**-40, "DOUBLE"), (-1e-300, 5e-324, "DOUBLE"), (0.5, 2.0**30 + 1, "DOUBLE")):
        _, glo, ghi = fixed_point(ColumnSpec("x", type_, bounds=(lo, hi)))
        assert max(abs(glo), abs(ghi)) <= 2**50
    with pytest.raises(ValueError, match="within"):
        ColumnSpec("x", "BIGINT", bounds=(0, MAX_ABS_BOUND * 1.01))
    # P2: max_rows and max_groups at most 10^4
    with pytest.raises(ValueError, match="10000"):
        TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"),), max_rows=10_001)
    # P3, P4: squares on at most 2^21 steps; caps at most 2^62
    assert MAX_SPREAD_STEPS == 2**21 and auto_total.MAX_CAP == 2**62
    # the per-cell cast: k rows' worth of the widest centred value (2^51) lies within its DOUBLE clamp, which
    # both HUGEINT and Spark's DECIMAL(38, 0) hold
    assert 10_000 * 2**51 < cells.CAST_LIMIT < 10**38
    # P5 with P1-P2: fewer than 2^63 rows, each adding at most 2^51, never reach DECIMAL(38, 0)'s or HUGEINT's limit
    assert 2**63 * 2**51 < 10**38 < 2**127


@pytest.mark.parametrize("upper", [0.75, 0.5, 1.0, 3.0, 700.0, 99_999.0])
@pytest.mark.parametrize("shape", ["SELECT SUM(x) AS s FROM t", "SELECT g, AVG(x) AS a FROM t GROUP BY g",
                                   "SELECT g, VAR_POP(x) AS v FROM t GROUP BY g"])
def test_a_chosen_clamp_is_noised_within_its_charge_under_gaussian_noise(upper: float, shape: str) -> None:
    """A clamp tighter than the declared one, on its own finer fixed-point grid, had a larger integer sensitivity
    than the one charged, and the Gaussian σ search failed after the charge (for about half the clamps: those
    whose magnitude's mantissa is above the declared one's). A chosen clamp takes the finest grid on which no
    integer sensitivity exceeds the charged one (bounds._finest_grids); a tight clamp keeps its precision."""
    x = ColumnSpec("x", "DOUBLE", bounds=(0.0, 100_000.0), auto_bounds=True)
    table = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True), x),
                        max_rows=100, max_groups=3)
    planned = plan(shape, Catalog((table,)), epsilon=1.0, delta=1e-7, mechanism="gaussian", salt=1)
    assert planned.auto is not None
    limit = {n.measure: n for n in planned.price.noise}
    g = planned.analysis.max_groups
    at = auto_release.plan_at(planned, ChosenBounds((), 100, g, clamps=(("x", 0.0, upper),)))
    for spec in at.price.noise:
        assert spec.grid >= limit[spec.measure].grid  # at least as fine as the declared clamp's grid
        assert 0 < spec.sensitivity <= limit[spec.measure].sensitivity  # in integers: what the noise's privacy is of
        assert spec.sensitivity * 16 > limit[spec.measure].sensitivity  # one halving more would fit: as fine as allowed
