"""The planner's memos (proxy/query/plan_cache.py, issue #32): a memoised plan is exactly the plan made afresh,
for every query of the corpus, and nothing done with a plan afterwards changes the trees the memos share."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from mechanisms.sampling import FixedSampler
from proxy.cli.demo import build_demo
from proxy.engines.duckdb_engine import Engine
from proxy.pipeline import engine_sql
from proxy.query import plan_cache, planner
from proxy.query.auto_release import plan_at, selection_text
from proxy.query.catalog import Catalog
from proxy.query.errors import QueryError
from proxy.query.plan_cache import labels
from proxy.query.planner import plan, plan_public, repeat_identity
from proxy.query.release.publish import release
from proxy.query.rewrite.render import DUCKDB, Target
from tests.support.demo_catalog import DEMO

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from sql_corpus import corpus

SPARK = Target("spark", (("visits", "dp_1_visits"), ("users", "dp_1_users"), ("departments", "dp_1_dep")))


class _On:
    def __init__(self, target: Target) -> None:
        self.target = target


def _auto(catalog: Catalog) -> Catalog:
    tables = tuple(dataclasses.replace(t, auto_max_rows=True, max_rows=64) for t in catalog.tables)
    return dataclasses.replace(catalog, tables=tables)


AUTO = _auto(DEMO)


def _derived(make: Callable[[], object]) -> str:
    try:
        return repr(make())
    except QueryError as error:  # refused alike each time (Spark runs fewer shapes than DuckDB)
        return f"refused {error.code}: {error}"


def _downstream(planned: planner.QueryPlan) -> tuple[str, ...]:
    """Everything the request path derives from a plan before the data: each engine's SQL, the selection, the plan
    at a chosen bound, the repeat identity."""
    out = [repeat_identity(planned, DEMO)]
    for target in (DUCKDB, SPARK):
        if planned.auto is not None:
            out.append(_derived(lambda: selection_text(planned, target)))  # noqa: B023 (called at once)
            out.append(_derived(lambda: engine_sql(plan_at(planned, 3), _On(target))))  # type: ignore  # noqa: B023
        else:
            out.append(_derived(lambda: engine_sql(planned, _On(target))))  # type: ignore[arg-type]  # noqa: B023
    return tuple(out)


def _outcome(sql: str, dialect: str, catalog: Catalog, bounding: planner.Bounding, salt: int) -> str:
    try:
        planned = plan(sql, catalog, epsilon=1.0, delta=1e-8, mechanism="laplace", salt=salt, dialect=dialect,
                       bounding=bounding)
    except QueryError as error:
        return f"refused {error.code}: {error}"
    return repr((planned, _downstream(planned), _derived(lambda: plan_public(sql, catalog, max_rows=100,
                                                                             dialect=dialect))))


def _memos() -> dict[str, str]:
    """The memos' whole content: every shared tree and record, printed in full, by memo and key."""
    memos = (planner._STATEMENTS, planner._NORMALISED, planner._PLANS, planner._SHAPES)
    # (a shape's entry gains its `relabels` verdict at its first reuse: the records it shares are what must not move)
    return {repr((i, key)): repr(value[:4] if m is planner._SHAPES else value)
            for i, m in enumerate(memos) for key, value in m._items.items()}


def _unchanged(held: dict[str, str]) -> bool:
    """Every entry still held is printed as it was (which entries a bounded memo keeps depends on the order of
    its hits, and a text of a shape planned before reads no statement memo)."""
    now = _memos()
    both = held.keys() & now.keys()
    return len(both) > 100 and all(now[key] == held[key] for key in both)


@pytest.mark.parametrize(("catalog", "bounding", "every"), [(DEMO, "store", 1), (AUTO, "per_query", 4)],
                         ids=["fixed-store", "auto-per-query"])  # (automatic bounds: every fourth query, for time)
def test_every_corpus_query_plans_alike_memoised_and_afresh_and_no_step_mutates_the_memos(
    catalog: Catalog, bounding: planner.Bounding, every: int
) -> None:
    cases = list(dict.fromkeys(corpus()))  # each text once: the first pass below is then planned afresh
    assert len(cases) > 500  # the red-team and BI corpora and the workload: every shape the planner accepts
    cases = cases[::every]
    planner.clear_memos()
    fresh = [_outcome(sql, dialect, catalog, bounding, salt=7) for dialect, sql in cases]
    planner.clear_memos()
    other = [_outcome(sql, dialect, catalog, bounding, salt=8) for dialect, sql in cases]  # fills the memos
    held = _memos()
    again = [_outcome(sql, dialect, catalog, bounding, salt=7) for dialect, sql in cases]  # answered from them
    assert again == fresh  # at its own salt, though the memos were filled at another
    assert other != fresh  # (the salt does reach the SQL of some)
    assert _unchanged(held)  # planning, rendering and re-planning at a bound changed no shared tree
    assert sum(not o.startswith("refused") for o in fresh) > 200 // every  # the BI corpus and workload


def test_the_salt_is_not_memoised() -> None:
    planner.clear_memos()
    sql = "SELECT category, COUNT(*) AS n FROM visits GROUP BY category"
    one = plan(sql, DEMO, epsilon=1.0, delta=0.0, mechanism="laplace", salt=1)
    two = plan(sql, DEMO, epsilon=1.0, delta=0.0, mechanism="laplace", salt=2)
    assert (one.salt, two.salt) == (1, 2) and one.sql != two.sql  # the rows a unit keeps are drawn per query
    assert one.analysis is two.analysis and one.price is two.price  # the rest is shared
    planner.clear_memos()
    assert plan(sql, DEMO, epsilon=1.0, delta=0.0, mechanism="laplace", salt=2) == two


@pytest.mark.parametrize(("name", "a", "b"), [("epsilon", 1, 1.0), ("delta", 0.0, -0.0)])
def test_arguments_equal_in_python_but_printed_apart_are_planned_apart(name: str, a: float, b: float) -> None:
    sql = "SELECT COUNT(*) AS n FROM users"
    given = {"epsilon": 1.0, "delta": 0.0}
    planner.clear_memos()
    fresh_b = plan(sql, DEMO, mechanism="laplace", **{**given, name: b})
    planner.clear_memos()
    memo_a = plan(sql, DEMO, mechanism="laplace", **{**given, name: a})
    memo_b = plan(sql, DEMO, mechanism="laplace", **{**given, name: b})
    assert repr(memo_b) == repr(fresh_b)  # what planning b gives, whatever a planned first
    assert memo_a.price is not memo_b.price


def test_a_refusal_is_refused_every_time() -> None:
    planner.clear_memos()
    for _ in range(2):
        with pytest.raises(QueryError) as refused:
            plan("SELECT user_id FROM visits", DEMO, epsilon=1.0, delta=0.0, mechanism="laplace")
        assert refused.value.code == "policy"  # a raw column: never released
    assert len(planner._PLANS) == 0


def test_another_catalog_is_another_plan() -> None:
    planner.clear_memos()
    sql = "SELECT COUNT(*) AS n FROM visits"
    fixed = plan(sql, DEMO, epsilon=1.0, delta=0.0, mechanism="laplace")
    chosen = plan(sql, AUTO, epsilon=1.0, delta=0.0, mechanism="laplace")
    assert fixed.auto is None and chosen.auto is not None


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo(tmp_path_factory.mktemp("plan-cache"), users=300, rows=3000).database


WORKLOAD = (
    "SELECT plan, COUNT(*) AS n FROM users GROUP BY plan",
    "SELECT region, COUNT(*) AS n FROM visits GROUP BY region",
    "SELECT category, SUM(amount) AS s, AVG(amount) AS a FROM visits GROUP BY category",
    "SELECT AVG(amount) AS a FROM visits WHERE amount > 100",
)


def test_a_memoised_plan_answers_as_a_fresh_one_on_duckdb(demo_db: Path) -> None:
    plain = duckdb.connect(str(demo_db), read_only=True)
    exact = sorted(plain.execute("SELECT plan, COUNT(*) FROM users GROUP BY plan").fetchall())
    plain.close()  # one configuration per file and process: the engine's next
    engine = Engine(demo_db, threads=1, timeout_s=60)
    try:
        for sql in WORKLOAD:
            answers = []
            for memoised in (False, True, True):
                if not memoised:
                    planner.clear_memos()
                planned = plan(sql, DEMO, epsilon=1.0, delta=0.0, mechanism="laplace", salt=5)
                rows = engine.run(engine_sql(planned, engine)).rows
                answers.append(release(rows, planned.analysis, planned.price, FixedSampler((0,))).rows)
            assert answers[0] == answers[1] == answers[2]
        # no bound binds on a table of one row per user: the released counts are plain DuckDB's, noise aside
        planned = plan(WORKLOAD[0], DEMO, epsilon=1.0, delta=0.0, mechanism="laplace", salt=5)
        rows = engine.run(engine_sql(planned, engine)).rows
        released = release(rows, planned.analysis, planned.price, FixedSampler((0,))).rows
        assert sorted(tuple(r) for r in released) == [tuple(r) for r in exact]
        assert sum(n for _, n in exact) == 300
    finally:
        engine.close()


# A plan per shape (plan_cache.labels, docs/architecture.md "A plan per shape"): a text whose output labels alone
# differ from a text planned before gets that plan relabelled, which must be exactly the plan made afresh.

RENAMES = ("zq_fresh", "n2", "region", "user", "__k0", "N1", '"n1"', "plan", "count", "a", "n10")


def _shape(sql: str, dialect: str) -> plan_cache.Shape | None:
    return labels(sql, planner._declared_names(DEMO), dialect)


def _labelled(shape: plan_cache.Shape, name: str) -> str:
    """The text of `shape` with its labels `name`, `name1`, `name2`, ... (inside the quotes of a quoted `name`)."""
    parts = shape.key.split("\x00")
    text = parts[0]
    for i, part in enumerate(parts[1:]):
        bare = name.strip('"') + (str(i) if i else "")
        text += (f'"{bare}"' if name.startswith('"') else bare) + part
    return text


@pytest.mark.parametrize(("catalog", "bounding", "renames", "every", "least"), [
    (DEMO, "store", RENAMES, 1, (350, 200)), (AUTO, "per_query", ("zq_fresh", "region", "N1"), 3, (25, 20))],
    ids=["fixed-store", "auto"])
def test_a_relabelled_text_plans_as_it_does_afresh_whatever_the_new_labels(
    catalog: Catalog, bounding: planner.Bounding, renames: tuple[str, ...], every: int, least: tuple[int, int]
) -> None:
    cases = [(d, s, shape) for d, s in dict.fromkeys(corpus()) if (shape := _shape(s, d)) is not None][::every]
    assert len(cases) > 100 // every  # the corpus's texts that name their outputs
    served = refused = 0
    for dialect, sql, shape in cases:
        for name in renames:
            other = _labelled(shape, name)
            planner.clear_memos()
            fresh = _outcome(other, dialect, catalog, bounding, salt=7)
            planner.clear_memos()
            _outcome(sql, dialect, catalog, bounding, salt=7)  # fills the shape memo (when it plans)
            shapes = {key[0] for key in planner._SHAPES._items}
            assert _outcome(other, dialect, catalog, bounding, salt=7) == fresh  # the same plan, or refusal
            again = _shape(other, dialect)
            served += again is not None and again.key in shapes
            refused += fresh.startswith("refused")
    # relabelled plans were served, and relabellings refused afresh were refused alike
    assert served > least[0] and refused > least[1]


def test_a_label_that_is_a_column_name_is_refused_after_a_shape_was_planned() -> None:
    planner.clear_memos()
    plan("SELECT plan, COUNT(*) AS n1 FROM users GROUP BY plan", DEMO, epsilon=1.0, delta=0.0, mechanism="laplace")
    assert len(planner._SHAPES) == 1
    with pytest.raises(QueryError) as refused:  # not a label: planned afresh, and refused there
        plan("SELECT plan, COUNT(*) AS region FROM users GROUP BY plan", DEMO, epsilon=1.0, delta=0.0,
             mechanism="laplace")
    assert refused.value.code == "policy" and "renames another expression to a column name" in str(refused.value)
    relabelled = plan("SELECT plan, COUNT(*) AS n2 FROM users GROUP BY plan", DEMO, epsilon=1.0, delta=0.0,
                      mechanism="laplace")
    planner.clear_memos()
    assert relabelled == plan("SELECT plan, COUNT(*) AS n2 FROM users GROUP BY plan", DEMO, epsilon=1.0, delta=0.0,
                              mechanism="laplace")
    assert relabelled.normalized_sql == "SELECT plan, COUNT(*) AS n2 FROM users GROUP BY plan"
    assert [o.name for o in relabelled.analysis.outputs] == ["plan", "n2"]


def test_a_shape_planned_under_one_catalog_is_planned_afresh_under_another() -> None:
    planner.clear_memos()
    fixed = plan("SELECT COUNT(*) AS n1 FROM visits", DEMO, epsilon=1.0, delta=0.0, mechanism="laplace")
    chosen = plan("SELECT COUNT(*) AS n2 FROM visits", AUTO, epsilon=1.0, delta=0.0, mechanism="laplace")
    assert fixed.auto is None and chosen.auto is not None  # AUTO's automatic bounds, not DEMO's plan relabelled
    assert [o.name for o in chosen.analysis.outputs] == ["n2"] and len(planner._SHAPES) == 2
