"""Sizes of the README example's JSON answer and of the largest response header, before and after 100 per-cell
drill-down queries (issue #30 part 3), on a live server over a small demo (the demo as shipped, budget ε 1000):

    /work/main/.venv/bin/python -m bench.answer_size

Prints bytes; targets: an answer <= 2048 (the test's bound) and every header <= 1024."""

from __future__ import annotations

import tempfile
from pathlib import Path

from proxy.cli.demo import build_demo
from tests.http.test_answer_size import ARROW, CSV, README, _drill_downs, _header_sizes
from tests.support.live import Server, policy_copy


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        demo = build_demo(directory / "demo", users=300, rows=6000)
        live = Server(directory / "server.log").start(
            policy_copy(demo, directory / "run", epsilon=1000.0, delta=1e-5, auto=True))
        try:
            with live.client(demo.analyst_key) as client:
                first = client.post("/v1/query", json={"sql": README, "epsilon": 0.5})
                print(f"README answer, fresh budget: {len(first.content)} bytes")
                worst: dict[str, int] = {}
                for i, sql in enumerate(_drill_downs(100)):
                    accept = (None, CSV, ARROW)[i % 3]
                    response = client.post("/v1/query", json={"sql": sql, "epsilon": 0.1},
                                           headers={} if accept is None else {"accept": accept})
                    for name, size in _header_sizes(response).items():
                        worst[name] = max(worst.get(name, 0), size)
                after = client.post("/v1/query", json={"sql": README, "epsilon": 0.25})
                print(f"README answer after 100 drill-downs: {len(after.content)} bytes")
                csv = client.post("/v1/query", json={"sql": README, "epsilon": 0.25}, headers={"accept": CSV})
                print(f"README as CSV after them: largest header {max(_header_sizes(csv).values())} bytes")
                print(f"largest header over the 100 drill-downs: {max(worst.values())} bytes", worst)
        finally:
            live.stop()


if __name__ == "__main__":
    main()
