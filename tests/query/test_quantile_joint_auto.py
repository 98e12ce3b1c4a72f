"""Three or more quantiles of one column at chosen bounds, end to end (docs/privacy.md §10.4): on demo-like data
through `pipeline.answer` with the real engine and sampler, MIN, MEDIAN, MAX and the p90 of amount by region
choose max_rows and amount's clamp (`chosen: true`, no note), and every released value lies within its own rank
error bar of the truth: between DuckDB's quantiles of the clamped values at q ± (bar/rows kept), with a little
slack for the rows the bound drops and one grid step."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import duckdb
import pytest

from proxy import pipeline
from proxy.app import build_env
from proxy.cli.demo import DemoFiles, build_demo
from proxy.pipeline import Env
from proxy.query.release.error_bars import error_bar
from proxy.schemas import QueryRequest
from proxy.settings import Settings
from tests.support.live import policy_copy

SQL = ("SELECT region, MIN(amount), MEDIAN(amount), MAX(amount), percentile_cont(0.9) WITHIN GROUP (ORDER BY amount) "
       "FROM visits GROUP BY region")
QS = (0.0, 0.5, 1.0, 0.9)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoFiles:
    return build_demo(tmp_path_factory.mktemp("joint-demo"), users=4000, rows=80_000)


@pytest.fixture(scope="module")
def env(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    built = build_env(Settings(policy=policy_copy(demo, tmp_path_factory.mktemp("joint-env"), epsilon=1e6,
                                                  delta=1e-6, auto=True)))
    try:
        yield built
    finally:
        built.ledger.close()
        for _, engine in built.engines:
            engine.close()


def test_min_median_max_and_p90_choose_their_bounds_and_land_within_their_error_bars(
        env: Env, demo: DemoFiles) -> None:
    analyst = env.policy.analyst_by_key_hash(hashlib.sha256(demo.analyst_key.encode()).hexdigest())
    assert analyst is not None
    for _ in range(3):
        prepared = pipeline.prepare(QueryRequest(sql=SQL, epsilon=1.0), analyst, env.policy, env.sampler.salt())
        answer = pipeline.answer(prepared, analyst, env, lambda charge: None)
        assert answer.bounds is not None
        report = answer.bounds.report()
        assert report["chosen"] is True and report.get("note") is None and report["epsilon"] > 0
        assert {(p["bound"], p["column"]) for p in report["parts"]} == {("max_rows", None), ("upper", "amount")}
        (name, lo, hi), = answer.bounds.clamps
        k = answer.bounds.max_rows
        assert name == "amount" and 0 <= lo < hi <= 100_000 and 1 <= k <= 1000
        at = answer.prepared.plan
        bars = [error_bar(at.analysis, at.price, i, 0.95).rank_error for i in range(len(QS))]
        step = (hi - lo) / 1000
        with duckdb.connect(str(demo.database), read_only=True) as con:
            for region, *values in answer.release.rows:
                kept, = con.execute("SELECT SUM(LEAST(n, ?)) FROM (SELECT COUNT(amount) AS n FROM visits "
                                    "WHERE region = ? GROUP BY user_id)", [k, region]).fetchone()
                for q, value, bar in zip(QS, values, bars, strict=True):
                    assert bar is not None and value is not None
                    width = bar / kept + 0.03  # the rank bar, and the rows beyond k (alike, so a few per cent)
                    low, high = con.execute(
                        "SELECT quantile_disc(LEAST(GREATEST(amount, ?), ?), ?), "
                        "quantile_disc(LEAST(GREATEST(amount, ?), ?), ?) FROM visits WHERE region = ?",
                        [lo, hi, max(0.0, q - width), lo, hi, min(1.0, q + width), region]).fetchone()
                    # a value past the data's extreme within the chosen range has the extreme's rank: a MAX may
                    # land anywhere in [max, hi] (every bin above the largest value ties at rank n), a MIN in [lo, min]
                    low, high = (lo if q - width <= 0 else low), (hi if q + width >= 1 else high)
                    assert low - step <= float(value) <= high + step, (region, q, value, low, high, k, lo, hi)
