"""Utility of the DP median at ε = 1 on the demo data (issue #15): the median of `amount` by region lies
within 5 % of the true (non-private, unbounded) median in at least 95 % of answers.

Each answer is the full path but HTTP: a fresh plan (fresh bounding salt), the bounds chosen per query as the
demo policy says (max_rows and amount's clamp, "auto"), the rewritten SQL on DuckDB, and the release with the
production sampler. The check is a one-sided binomial test at α = 1e-6 of "the rate
of answers within 5 % is at least 0.95", so a correct mechanism fails it with probability below 1e-6.
bench/quantile_utility.py measures the same at full demo size, with p10, p90 and latency.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from scipy import stats

from mechanisms.sampling import SecureSampler
from proxy.cli.demo import build_demo
from proxy.policy.load import load_policy
from proxy.query import auto_release
from proxy.query.planner import plan
from proxy.query.release.publish import release

ANSWERS = 40
ALPHA = 1e-6


@pytest.fixture(scope="module")
def demo_connection(tmp_path_factory: pytest.TempPathFactory) -> tuple[duckdb.DuckDBPyConnection, object]:
    files = build_demo(Path(tmp_path_factory.mktemp("quantile-utility")), users=20_000, rows=200_000)
    policy = load_policy(files.policy)
    dataset = policy.dataset("demo")
    assert dataset is not None
    return duckdb.connect(str(files.database), read_only=True), dataset.catalog


def test_median_by_region_within_five_percent_in_95_percent_of_answers(
    demo_connection: tuple[duckdb.DuckDBPyConnection, object],
) -> None:
    con, catalog = demo_connection
    truth = dict(con.execute("SELECT region, MEDIAN(amount) FROM visits GROUP BY region").fetchall())
    sampler = SecureSampler()
    within = total = 0
    for _ in range(ANSWERS):
        planned = plan("SELECT region, MEDIAN(amount) FROM visits GROUP BY region", catalog,  # type: ignore[arg-type]
                       epsilon=1.0, delta=1e-8, mechanism="laplace", salt=sampler.salt(), cells=False)
        if planned.auto is not None:  # the demo chooses its bounds per query (max_rows, amount's clamp)
            picked = con.execute(auto_release.selection_text(planned)).fetchall()
            planned = auto_release.plan_at(planned, auto_release.draw(planned.analysis, planned.auto, picked, sampler))
        answer = release(con.execute(planned.sql).fetchall(), planned.analysis, planned.price, sampler)
        for region, median in answer.rows:
            total += 1
            within += abs(median - truth[region]) <= 0.05 * abs(truth[region])
    assert total == ANSWERS * len(truth)
    # H0: rate >= 0.95; reject (fail) only if the observed count is implausibly low under it
    assert stats.binomtest(within, total, 0.95, alternative="less").pvalue > ALPHA, (within, total)
    assert within / total >= 0.9
