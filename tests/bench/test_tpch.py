"""The TPC-H workload (bench/tpch/) at scale 0.01, generated once per session by tpchgen-cli: the set of answered
standard texts is exactly the set the product reaches today, each answered text's release before noise equals
DuckDB's answer to the text as written (bounds that never bind), and each refusal has its stable code."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "tpch"))

import generate  # noqa: E402
import harness  # noqa: E402

from mechanisms.sampling import FixedSampler  # noqa: E402

PUBLIC = {"q02", "q11", "q16"}  # over public tables alone (part, supplier, partsupp, nation, region): exact, free
ANSWERED = {"q01", "q04", "q05", "q06", "q07", "q08", "q09", "q12", "q13", "q14", "q19", "q21"} | PUBLIC
REFUSED = {  # the stable code of each refusal: what the text needs that the product does not answer
    "q03": "policy", "q10": "policy", "q15": "unsupported",
    "q17": "policy", "q18": "policy", "q20": "unsupported",
    "q22": "policy",
}


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.Workload]:
    data = generate.generate(0.01, tmp_path_factory.mktemp("tpch-data"))
    loaded = harness.Workload(data, tmp_path_factory.mktemp("tpch-store"))
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def outcomes(workload: harness.Workload) -> dict[str, harness.Outcome]:
    return {name: workload.answer(name) for name in harness.QUERIES}


def test_the_answered_texts_are_exactly_those_the_product_reaches(outcomes: dict[str, harness.Outcome]) -> None:
    assert {n for n, o in outcomes.items() if o.code is None} == ANSWERED
    assert {n: o.code for n, o in outcomes.items() if o.code is not None} == REFUSED


@pytest.mark.parametrize("name", sorted(ANSWERED))
def test_each_answer_before_noise_is_duckdbs_answer(outcomes: dict[str, harness.Outcome], name: str) -> None:
    outcome = outcomes[name]
    assert outcome.reference  # DuckDB answers it with rows: the comparison is not vacuous
    assert outcome.exact, (outcome.product, outcome.reference)


def test_a_noisy_release_is_not_the_exact_answer(workload: harness.Workload) -> None:
    """The comparison can fail: Q6 released with noise 10⁹ in its cell differs from DuckDB's answer."""
    noisy = workload.noisy("q06", 1.0, workload.catalog, FixedSampler((10**9,)))
    exact = workload.answer("q06").reference
    assert not harness.same(noisy, exact, ordered=True)


def test_q01_groups_and_counts_equal_duckdbs(outcomes: dict[str, harness.Outcome]) -> None:
    product = {(r[0], r[1]): r[9] for r in outcomes["q01"].product}
    assert product == {(r[0], r[1]): r[9] for r in outcomes["q01"].reference}
    assert set(product) == {("A", "F"), ("N", "F"), ("N", "O"), ("R", "F")}


def test_the_public_texts_are_answered_exactly_and_whole(outcomes: dict[str, harness.Outcome],
                                                         workload: harness.Workload) -> None:
    """Q2, Q11 and Q16 read public tables alone: answered as public queries, every row DuckDB has (Q11 and Q16
    are long answers, far below the dataset's max_release_cells: nothing is cut at the limit)."""
    assert {n for n, o in outcomes.items() if o.public} == PUBLIC
    for name in PUBLIC:
        assert outcomes[name].exact and len(outcomes[name].product) == len(outcomes[name].reference) < workload.max_rows
    assert len(outcomes["q16"].reference) > 100 and len(outcomes["q11"].reference) > 100


def test_q20_stays_refused_naming_its_protected_subquery(outcomes: dict[str, harness.Outcome]) -> None:
    """Its outer query reads supplier and nation (public), but `(SELECT 0.5 * SUM(l_quantity) FROM lineitem …)`
    is an exact aggregate of protected rows per outer row."""
    message = outcomes["q20"].message or ""
    assert "'lineitem'" in message
    assert "a correlated aggregate over protected rows would be a release inside the WHERE" in message


@pytest.mark.parametrize("name", ["q10", "q18"])
def test_texts_grouped_by_the_unit_stay_refused_saying_why(outcomes: dict[str, harness.Outcome], name: str) -> None:
    assert (outcomes[name].code, outcomes[name].message) == (
        "policy", "cannot GROUP BY the privacy unit 'c_custkey': each group would be one person")


@pytest.mark.parametrize(("name", "table"), [("q17", "lineitem"), ("q22", "customer")])
def test_scalar_subqueries_over_protected_rows_stay_refused_naming_the_construct(
        outcomes: dict[str, harness.Outcome], name: str, table: str) -> None:
    assert outcomes[name].code == "policy"
    message = outcomes[name].message
    assert message.startswith(f"a scalar subquery over the protected table {table} in "), message
    assert "compares each row with an exact statistic of every unit's rows: a subquery over other units' rows would " \
        "be a release inside the WHERE" in message, message


def test_q15_stays_refused_naming_its_cte_read_twice(outcomes: dict[str, harness.Outcome]) -> None:
    """Q15 joins its CTE `revenue` to supplier and reads it again for its maximum: refused, saying why."""
    assert outcomes["q15"].code == "unsupported"
    message = outcomes["q15"].message or ""
    assert message.startswith("the CTE 'revenue' is read beside another table or more than once"), message
    assert "no DP answer here" in message


def test_the_texts_plan_alike_memoised_and_afresh_and_no_step_mutates_the_memos(workload: harness.Workload) -> None:
    """The planner's memos (issue #32) over the join, normalisation and qualification rules of these texts: a
    memoised plan is the fresh plan, and rendering each plan's SQL changes no shared tree."""
    from proxy.query import planner
    from proxy.query.errors import QueryError

    def outcome(name: str) -> str:
        try:
            planned = workload.planned(harness.text(name), 1.0)
        except QueryError as error:
            return f"refused {error.code}: {error}"
        return repr((planned, planned.sql))

    def memos() -> list[dict[object, str]]:  # each entry printed in full (a hit reorders the LRU: not compared)
        return [{key: repr(value) for key, value in m._items.items()} for m in (planner._STATEMENTS, planner._PLANS)]

    planner.clear_memos()
    fresh = [outcome(name) for name in harness.QUERIES]
    held = memos()
    assert [outcome(name) for name in harness.QUERIES] == fresh
    assert memos() == held
    assert sum(not o.startswith("refused") for o in fresh) == len(ANSWERED - PUBLIC)  # public: plan_public
