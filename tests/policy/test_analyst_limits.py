"""The per-analyst limits in the policy file: defaults, values, and located messages for bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.policy.limits import LIMIT_KEYS, AnalystLimits
from proxy.policy.load import load_policy, policy_problems
from tests.policy.test_policy import VALID, write

ALICE = 'budgets = { demo = { epsilon = 3.0, delta = 1e-6 } }\n'


def test_limits_default_and_load(tmp_path: Path) -> None:
    assert ALICE in VALID
    text = VALID.replace(ALICE, ALICE + "max_concurrent_queries = 2\nqueries_per_minute = 30\n", 1)
    policy = load_policy(write(tmp_path, text))
    alice, root = policy.analysts
    assert alice.limits == AnalystLimits(max_concurrent_queries=2, queries_per_minute=30)
    assert root.limits == AnalystLimits() == AnalystLimits(16, 600)


@pytest.mark.parametrize(("line", "problem"), [
    ("max_concurrent_queries = 0", "max_concurrent_queries: must be an integer in [1, 1000], got 0"),
    ("max_concurrent_queries = 2.5", "max_concurrent_queries: must be an integer in [1, 1000], got 2.5"),
    ("queries_per_minute = true", "queries_per_minute: must be an integer in [1, 1000000], got True"),
    ("queries_per_minute = \"60\"", "queries_per_minute: must be an integer in [1, 1000000], got '60'"),
    ("max_concurrent_query = 2", "max_concurrent_query: unknown key; did you mean 'max_concurrent_queries'?"),
])
def test_a_bad_limit_names_its_location(tmp_path: Path, line: str, problem: str) -> None:
    problems = policy_problems(write(tmp_path, VALID.replace(ALICE, f"{ALICE}{line}\n", 1)))
    assert problems == (f"analysts.alice.{problem}",)


def test_the_limits_are_documented() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "policy.md").read_text()
    for key in LIMIT_KEYS:
        assert f"| `{key}` |" in text, key
