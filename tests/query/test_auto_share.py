"""The selection's share of ε chosen by expected error (issue #29 item 3; docs/privacy.md §10.9;
proxy/query/auto/share.py): the exact split for given public inputs, that it is the model's minimiser, that the
policy reads fixed shares and limits, and — through the real pipeline on two demo databases holding different
data — that the split and the whole charge are the same whatever the data (the split is not a privacy cost)."""

from __future__ import annotations

import hashlib
import math
import re
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from accountant.events import AutoBoundsEvent
from mechanisms import laplace
from mechanisms.rounding import down
from proxy import pipeline
from proxy.app import build_env
from proxy.cli.demo import DemoFiles, build_demo
from proxy.pipeline import Answer
from proxy.policy.load import load_policy, policy_problems
from proxy.query.auto import share
from proxy.schemas import QueryRequest
from proxy.settings import Settings
from tests.policy.test_policy import VALID, write
from tests.support.live import policy_copy

# (limits, ε, bounds chosen, of which caps) -> the share; s = (a + √B)/(1 + √B), a = low·(n − c)/n,
# B = 2c²/(100·ε), floored to a thousandth, within the limits
SPLITS = [
    ((0.1, 0.5), 0.1, 2, 1, 0.343),  # a = 0.05, √B = √0.2: 0.49721/1.44721 = 0.34357
    ((0.1, 0.5), 1.0, 2, 1, 0.167),  # √B = √0.02: 0.19142/1.14142 = 0.16770
    ((0.1, 0.5), 0.1, 3, 1, 0.355),  # a = 1/15: 0.51388/1.44721 = 0.35508
    ((0.1, 0.5), 0.5, 1, 1, 0.166),  # a = 0, √B = 0.2: 0.2/1.2
    ((0.1, 0.5), 0.1, 2, 2, 0.472),  # a = 0, √B = √0.8: 0.89443/1.89443 = 0.47214
    ((0.1, 0.5), 0.01, 2, 1, 0.5),  # 1.46421/2.41421 = 0.6065, above the high limit
    ((0.1, 0.5), 100.0, 2, 1, 0.1),  # 0.06414/1.01414 = 0.0632, below the low limit
    ((0.05, 0.9), 0.01, 2, 1, 0.596),  # a = 0.025: 1.43921/2.41421 = 0.59614
    ((0.1, 0.5), 0.1, 2, 0, 0.1),  # no cap: the counts resolve at the low limit
    ((0.2, 0.2), 0.1, 2, 1, 0.2),  # fixed
]


@pytest.mark.parametrize(("limits", "epsilon", "bounds", "caps", "expected"), SPLITS)
def test_the_split_is_the_closed_form(limits: tuple[float, float], epsilon: float, bounds: int, caps: int,
                                      expected: float) -> None:
    assert share.choose(limits, epsilon=epsilon, bounds=bounds, caps=caps) == expected


@pytest.mark.parametrize(("epsilon", "bounds"), [(0.1, 2), (1.0, 2), (0.1, 3), (0.3, 1), (0.2, 4)])
def test_the_split_minimises_the_models_expected_error_over_a_fine_grid(epsilon: float, bounds: int) -> None:
    grid = [i / 10000 for i in range(1000, 5001)]
    best = min(grid, key=lambda s: share.expected_error(s, low=0.1, epsilon=epsilon, bounds=bounds, caps=1))
    chosen = share.choose((0.1, 0.5), epsilon=epsilon, bounds=bounds, caps=1)
    assert chosen <= best < chosen + 0.001  # the minimiser, floored to a thousandth


def test_the_weights_give_the_other_bounds_the_low_share_and_the_caps_the_rest() -> None:
    assert share.weights((0.1, 0.5), 0.343, ("max_rows", "total")) == (Fraction(50, 343), Fraction(293, 343))
    assert share.weights((0.1, 0.5), 0.355, ("max_rows", "max_groups", "total")) == (
        Fraction(100, 1065), Fraction(100, 1065), Fraction(865, 1065))  # 0.1/(3·0.355) each, the rest to the cap
    assert share.weights((0.1, 0.5), 0.1, ("max_rows", "max_groups")) == (Fraction(1, 2), Fraction(1, 2))
    assert share.weights(0.3, 0.3, ("max_rows", "total")) == (Fraction(1, 2), Fraction(1, 2))  # fixed: even


def test_the_policy_reads_a_fixed_share_or_limits(tmp_path: Path) -> None:
    auto = VALID.replace("max_rows = 20", 'max_rows = "auto"')
    for line, expected in (("auto_bounds_share = 0.2", 0.2), ("auto_bounds_share = [0.1, 0.5]", (0.1, 0.5))):
        dataset = load_policy(write(tmp_path, auto.replace("max_epsilon = 1.0", f"max_epsilon = 1.0\n{line}"))
                              ).dataset("demo")
        assert dataset is not None and dataset.auto_bounds_share == expected


@pytest.mark.parametrize("value", ["[0.5, 0.1]", "[0.1, 1.0]", "[0.1]", "[0.1, 0.2, 0.3]", '"half"'])
def test_bad_limits_are_refused_at_load_with_the_location(tmp_path: Path, value: str) -> None:
    text = VALID.replace("max_epsilon = 1.0", f"max_epsilon = 1.0\nauto_bounds_share = {value}")
    problems = policy_problems(write(tmp_path, text))
    assert any(p.startswith("datasets.demo.auto_bounds_share") and "limits [low, high]" in p for p in problems)


def _policy(demo: DemoFiles, directory: Path) -> Path:
    path = policy_copy(demo, directory, epsilon=1e6, delta=1e-6, auto=True, share="[0.1, 0.5]")
    text, found = re.subn(r"^bounding = ", "auto_bounds_reuse = 0\nbounding = ",
                          path.read_text(encoding="utf-8"), count=1, flags=re.MULTILINE)
    assert found == 1
    path.write_text(text, encoding="utf-8")
    return path


def _answer(policy: Path, key: str, sql: str, epsilon: str) -> Answer:
    env = build_env(Settings(policy=policy))
    try:
        analyst = env.policy.analyst_by_key_hash(hashlib.sha256(key.encode()).hexdigest())
        assert analyst is not None
        answers: list[Answer] = []

        def render(answer: Answer) -> bytes:
            answers.append(answer)
            return b"{}"

        pipeline.reply(QueryRequest(sql=sql, epsilon=Decimal(epsilon)), analyst, env, lambda charge: None, render)
        (answer,) = answers
        return answer
    finally:
        env.ledger.close()
        for _, engine in env.engines:
            engine.close()


@pytest.mark.parametrize(("sql", "parts", "caps", "expected"), [
    ("SELECT COUNT(*), SUM(amount) FROM visits", 2, 1, 0.343),  # max_rows and a cap
    ("SELECT region, AVG(amount) FROM visits GROUP BY region", 2, 1, 0.343),  # max_rows and a cap
    ("SELECT category, COUNT(*) FROM visits GROUP BY category", 2, 0, 0.1),  # rows, groups: no cap, the low limit
])
def test_the_demos_split_is_exact_and_the_same_on_other_data(demo: DemoFiles, tmp_path: Path, sql: str,
                                                             parts: int, caps: int, expected: float) -> None:
    other = build_demo(tmp_path / "other", users=60, rows=900)  # other users, other visits, other amounts
    one = _answer(_policy(demo, tmp_path / "a"), demo.analyst_key, sql, "0.1")
    two = _answer(_policy(other, tmp_path / "b"), other.analyst_key, sql, "0.1")
    sent = QueryRequest(sql=sql, epsilon=Decimal("0.1")).epsilon  # the largest float <= 0.1, as the schema reads it
    assert sent is not None and share.choose((0.1, 0.5), epsilon=sent, bounds=parts, caps=caps) == expected
    selection = down(Fraction(sent) * Fraction(expected))  # bounds.split_epsilon
    kinds = ("max_rows", "total") if caps else ("max_rows", "max_groups")
    # auto_bounds: the other bound 0.1/(2·0.343) of it, the cap the rest; evenly without a cap
    split = [Fraction(50, 343), Fraction(293, 343)] if caps else [Fraction(1, 2)] * 2
    for answer in (one, two):
        assert answer.selected is not None and answer.selected.auto is not None
        chooser = answer.selected.auto
        assert len(chooser.parts) == parts  # each part at b = ⌈Δ/ε_each⌉ (bounds.auto_bounds)
        assert tuple(p.bound for p in chooser.parts) == kinds
        assert [p.selection.scale for p in chooser.parts] == [laplace.scale_for(p.sensitivity, down(
            Fraction(selection) * w)) for p, w in zip(chooser.parts, split, strict=True)]
        assert isinstance(answer.charge.event, AutoBoundsEvent) and answer.charge.epsilon <= 0.1
        assert math.isclose(answer.charge.epsilon, 0.1, rel_tol=1e-12)
    assert one.charge.event == two.charge.event  # the same split and prices: nothing read from the data
    assert one.release.rows != two.release.rows
