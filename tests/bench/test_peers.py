"""bench/peers/: the scoring arithmetic (exact), the peers' texts asking what the product's text asks (plain DuckDB on
the data as each peer sees it), and the product's side of run.py end to end on a tiny demo, without the peers'
venv (their part is skipped with its reason, as on CI); with that venv present, the peers' part too."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "peers"))

import scoring  # noqa: E402
import workload  # noqa: E402


def _load(path: Path, name: str) -> Any:
    """A bench script by its path under its own module name (bench/tpch/ has a run.py too)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


run = _load(ROOT / "bench" / "peers" / "run.py", "peers_run")

from proxy.cli import demo  # noqa: E402

PEER_PYTHON = Path("/work/peervenv/bin/python")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("peers-demo")
    demo.build_demo(directory, users=300, rows=3000)
    yield directory


def test_relative_errors_follow_the_utility_rule_exactly() -> None:
    truth = {("a", "x"): (200.0, 10.0), ("b", "x"): (50.0, 0.0), ("c", "y"): (8.0, None)}
    answers = [
        [("a", "x", 150.0, 12.5), ("b", "x", 60.0, 3.0), ("c", "y", 8.0, 1.0), ("z", "z", 1.0, 1.0)],
        [("a", "x", 260.0, None)],  # b and c left out: each counts 1; a NULL value counts 1
    ]
    errors = scoring.relative_errors(truth, answers, 2)
    # zero and NULL truths are skipped; an extra group in a release is not scored
    assert errors == [0.25, 0.25, 0.2, 0.0, 0.3, 1.0, 1.0, 1.0]
    assert scoring.summary(errors) == {"median": 0.275, "p90": 1.0, "cells": 8}
    assert scoring.summary([]) == {"median": None, "p90": None, "cells": 0}
    assert scoring.quantile([0.0, 10.0], 0.9) == 9.0
    assert scoring.quantile([3.0, 1.0, 2.0, 5.0, 4.0], 0.9) == 4.6
    assert scoring.ratio_to_best_peer(0.05, [0.4, 0.2]) == 0.25
    assert scoring.ratio_to_best_peer(None, [0.4]) is None
    assert scoring.ratio_to_best_peer(0.05, [None]) is None


def test_score_builds_one_row_per_query_with_each_systems_figures() -> None:
    q = workload.BY_NAME["region_count"]
    truths = {q.name: [["north", 100.0], ["south", 40.0]]}
    systems = {
        "smartnoise": {"queries": {q.name: {"answers": [[["north", 80.0], ["south", 40.0]]], "seconds": [0.5],
                                                 "cpu_seconds": [0.25]}}},
        "qrlew": {"skipped": "no peers' Python"},
        "auto": {q.name: {"answers": [[["north", 99.0], ["south", 42.0]], [["north", 101.0]]],
                          "seconds": [0.01, 0.03], "bounds": [{"max_rows": 8, "max_groups": 1, "reused": False},
                                                               {"max_rows": 8, "max_groups": 1, "reused": True}]}},
        "fixed": {q.name: {"error": "ValueError: refused"}},
    }
    [row] = run.score((q,), truths, {q.name: 1.5}, systems, plain_cpu_ms={q.name: 0.5})
    assert row["query"] == q.name and row["groups"] == 2 and row["plain_ms"] == 1.5
    assert row["systems"]["smartnoise"] == {"median": 0.1, "p90": 0.18, "cells": 2, "answers": 1,
                                            "ms_per_answer": 500.0, "cpu_ms_per_answer": 250.0}
    assert row["systems"]["qrlew"] == {"skipped": "no peers' Python"}
    auto = row["systems"]["auto"]
    # errors 0.01, 0.05, 0.01, 1.0 (south left out of the second answer)
    assert (auto["p90"], auto["cells"], auto["answers"]) == (0.715, 4, 2)
    assert auto["median"] == pytest.approx(0.03, rel=1e-12)  # (0.01 + 0.05) / 2 in floating point
    assert auto["ms_per_answer"] == pytest.approx(20.0, rel=1e-12)
    assert row["systems"]["fixed"] == {"error": "ValueError: refused"}
    assert row["ratio"] == pytest.approx(0.3, rel=1e-12)  # auto's 0.03 over SmartNoise's 0.1 (Qrlew skipped)
    table = run.render([row], ("smartnoise", "qrlew", "auto", "fixed"))
    assert ("| COUNT by region | 2 | 1.5 (0.5) | 10.0 % / 18.0 % | skipped | 3.0 % / 71.5 % | error | 0.30 ✓ | – |"
            in table)
    assert row["ratios"] == {"auto": row["ratio"], "fixed": None}
    assert "k 8, g 1, reused 1/2 | 500 (250) | – | 20 | – |" in table


def test_the_peers_texts_ask_what_the_products_text_asks(tiny: Path) -> None:
    """Plain DuckDB answers each peer's text, on the data as that peer reads it, exactly as the product's text."""
    assert workload.REGIONS == demo.REGIONS and workload.CATEGORIES == demo.CATEGORIES
    with duckdb.connect() as conn:
        conn.execute(f"ATTACH '{tiny / 'demo.duckdb'}' AS source (READ_ONLY)")
        conn.execute("CREATE VIEW visits AS SELECT * FROM source.visits")
        conn.execute("CREATE SCHEMA peers")
        # SmartNoise's frame: day as its ISO text (bench/peers/peer_side.py)
        conn.execute("CREATE VIEW peers.visits AS SELECT user_id, region, age, "
                     "strftime(day, '%Y-%m-%d') AS day, category, amount, duration_s FROM source.visits")
        for q in workload.QUERIES:
            want = sorted(conn.execute(q.sql).fetchall(), key=str)
            assert want, q.name
            assert sorted(conn.execute(q.qrlew).fetchall(), key=str) == want, q.name
            assert sorted(conn.execute(q.smartnoise).fetchall(), key=str) == want, q.name
            assert [d[0] for d in conn.execute(q.sql).description] == list(q.columns), q.name
        two_weeks = conn.execute(workload.BY_NAME["two_weeks"].sql).fetchall()
        assert sum(n for _, n in two_weeks) == conn.execute(
            "SELECT COUNT(*) FROM visits WHERE day >= DATE '2026-03-01' AND day < DATE '2026-03-15'").fetchone()[0]


def test_run_answers_on_the_product_alone_when_the_peers_venv_is_absent(tiny: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    assert run.main(["--rows", "3000", "--users", "300", "--answers", "2", "--dir", str(tiny),
                     "--peer-python", str(tmp_path / "no-such-python"), "--queries", "region_count,count_sum",
                     "--json", str(out)]) == 0
    printed = capsys.readouterr()
    assert "peers skipped: no peers' Python at" in printed.err
    report = json.loads(out.read_text())
    assert report["facts"]["answers"] == 2 and report["facts"]["epsilon"] == 1.0
    assert set(report["facts"]["skipped"]) == {"smartnoise", "qrlew"}
    assert [r["query"] for r in report["rows"]] == ["region_count", "count_sum"]
    for row in report["rows"]:
        assert row["ratio"] is None  # no peer answered
        assert row["systems"]["smartnoise"]["skipped"].startswith("no peers' Python")
        for variant in ("auto", "fixed"):
            cell = row["systems"][variant]
            assert cell["answers"] == 2 and cell["cells"] == 2 * row["groups"] * (2 if row["query"] == "count_sum"
                                                                                   else 1)
            assert 0 <= cell["median"] <= cell["p90"]
        assert row["systems"]["auto"]["bounds"]  # the demo's automatic bounds are reported per answer
    assert "| COUNT by region | 5 |" in printed.out and "| skipped | skipped |" in printed.out


@pytest.mark.skipif(not PEER_PYTHON.exists(), reason="the peers' venv (bench/peers/requirements.txt) is absent")
def test_the_peers_answer_through_their_own_venv(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    assert run.main(["--rows", "3000", "--users", "300", "--answers", "1", "--dir", str(tiny),
                     "--queries", "region_count", "--variants", "auto", "--json", str(out)]) == 0
    [row] = json.loads(out.read_text())["rows"]
    for peer in ("smartnoise", "qrlew"):
        assert row["systems"][peer]["answers"] == 1 and row["systems"][peer]["cells"] == 5
    assert row["ratio"] is not None
