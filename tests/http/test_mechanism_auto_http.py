"""`mechanism = "auto"` over HTTP on the demo (docs/privacy.md §2.1): a release of one group per user runs with
Laplace noise, a daily series (many groups per user) with the Gaussian, each charged as that mechanism's query
(the very charge a dataset naming it would make), and a request may ask for "auto" on any dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli.demo import DemoFiles
from proxy.policy.load import load_policy
from proxy.query.mechanism_choice import expected_error
from proxy.query.planner import plan
from tests.support.live import Server, policy_copy, spend

BY_REGION = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"
BY_DAY = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"


def test_auto_runs_each_query_with_the_mechanism_of_smaller_error(demo: DemoFiles, tmp_path: Path) -> None:
    policy = policy_copy(demo, tmp_path, epsilon=5.0, delta=1e-4)
    policy.write_text(policy.read_text(encoding="utf-8").replace(
        'mechanism = "laplace"', 'mechanism = "auto"', 1), encoding="utf-8")
    dataset = load_policy(policy).dataset("demo")
    assert dataset is not None and dataset.mechanism == "auto"
    expected = {}
    for sql in (BY_REGION, BY_DAY):  # what each plan costs and how wide its bars are, before any data
        both = {m: plan(sql, dataset.catalog, epsilon=0.1, delta=1e-6, mechanism=m, bounding=dataset.bounding)
                for m in ("laplace", "gaussian")}
        expected[sql] = min(both, key=lambda m: (expected_error(both[m].price), m != "laplace"))
        expected[sql, "epsilon"] = both[expected[sql]].price.epsilon
    assert expected[BY_REGION] == "laplace" and expected[BY_DAY] == "gaussian"  # the test can tell them apart

    server = Server(tmp_path / "server.log").start(policy)
    try:
        with server.client(demo.analyst_key) as analyst:
            (listed,) = analyst.get("/v1/datasets").json()["datasets"]
            assert listed["mechanism"] == "auto"
            before = spend(analyst)["epsilon_spent"]
            for sql in (BY_REGION, BY_DAY):
                response = analyst.post("/v1/query", json={"sql": sql, "epsilon": 0.1, "delta": 1e-6})
                assert response.status_code == 200, response.text
                body = response.json()
                assert body["charge"]["mechanism"] == expected[sql]
                assert {n["mechanism"] for n in body["noise"]} == {expected[sql]}
                assert body["charge"]["epsilon"] == pytest.approx(expected[sql, "epsilon"], rel=1e-12)  # rounded down
            spent = spend(analyst)["epsilon_spent"] - before
            assert abs(spent - expected[BY_REGION, "epsilon"] - expected[BY_DAY, "epsilon"]) < 1e-12
    finally:
        server.stop()


def test_a_request_may_ask_for_auto_on_a_laplace_dataset(server: Server, demo: DemoFiles) -> None:
    with server.client(demo.analyst_key) as analyst:
        response = analyst.post("/v1/query", json={"sql": BY_DAY, "epsilon": 0.1, "delta": 1e-6,
                                                    "mechanism": "auto"})
        assert response.status_code == 200, response.text
        assert response.json()["charge"]["mechanism"] == "gaussian"
        bad = analyst.post("/v1/query", json={"sql": BY_DAY, "mechanism": "exponential"})
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_request" and "auto" in bad.text, bad.text
