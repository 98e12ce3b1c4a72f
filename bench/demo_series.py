"""The shipped demo over HTTP (issue #29 item 9): the README's example query and daily and weekly series, at
several ε, with the reliability flag (`unreliable`) counted. Builds the 1M demo in a temporary directory, starts
`dpproxy serve` on it with a large budget, asks each query `--answers` times under fresh column names (a repeat
would return the stored answer), and prints the median and p90 relative error against the exact answer.

    PYTHONPATH=. python bench/demo_series.py [--answers 6] [--epsilons 0.1,1.0] [--groups-limit 32]

`--groups-limit` replaces the demo's max_groups_limit (32; 8 before issue #29) to see what the bound on groups
per user costs a series; `--reuse 0` makes every answer draw its own bounds (by default a shape's later answers
reuse the first's, up to the demo's `auto_bounds_reuse`, docs/privacy.md §10.8).
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
from pathlib import Path

import duckdb

from proxy.cli.demo import build_demo
from tests.support import live as live_support
from tests.support.live import Server


def _quantile(values: list[float], q: float) -> float:
    return sorted(values)[int(q * (len(values) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--answers", type=int, default=6)
    parser.add_argument("--epsilons", default="0.1,1.0")
    parser.add_argument("--groups-limit", type=int, default=None)
    parser.add_argument("--reuse", type=int, default=None,
                        help="the dataset's auto_bounds_reuse (0: every answer draws its own bounds)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = build_demo(Path(tmp))
        text = files.policy.read_text()
        text = re.sub(r"^budgets = .*$", "budgets = { demo = { epsilon = 1e6, delta = 1e-3 } }", text, flags=re.M)
        if args.groups_limit:
            text = re.sub(r"^max_groups_limit = \d+$", f"max_groups_limit = {args.groups_limit}", text, flags=re.M)
        if args.reuse is not None:  # later answers of a shape reuse its bounds unless 0 (docs/privacy.md §10.8)
            text = re.sub(r"^bounding = ", f"auto_bounds_reuse = {args.reuse}\nbounding = ", text, count=1, flags=re.M)
        files.policy.write_text(text)
        con = duckdb.connect(str(files.database), read_only=True)
        by_region = {r: (n, a) for r, n, a in con.execute(
            "SELECT region, COUNT(*), AVG(amount) FROM visits GROUP BY region").fetchall()}
        series = {name: {str(k)[:10]: n for k, n in con.execute(sql).fetchall()} for name, sql in (
            ("daily", "SELECT day, COUNT(*) FROM visits GROUP BY day"),
            ("weekly", "SELECT date_trunc('week', day), COUNT(*) FROM visits GROUP BY 1"))}
        con.close()
        keys = dict(line.split("=", 1) for line in files.keys_env.read_text().split() if "=" in line)
        live_support.READY_TIMEOUT_S = max(live_support.READY_TIMEOUT_S, 300.0)  # the 1M store builds at start-up
        live = Server(Path(tmp) / "server.log").start(files.policy)
        try:
            with live.client(keys["DPPROXY_ANALYST_KEY"]) as client:
                def ask(sql: str, epsilon: float) -> dict:  # type: ignore[type-arg]
                    response = client.post("/v1/query", json={"sql": sql, "epsilon": epsilon}, timeout=600)
                    assert response.status_code == 200, response.text
                    return response.json()  # type: ignore[no-any-return]

                for epsilon in map(float, args.epsilons.split(",")):
                    counts, means, flagged, cells = [], [], 0, 0
                    for i in range(args.answers):
                        body = ask(f"SELECT region, COUNT(*) AS v{i}, AVG(amount) AS a{i} FROM visits GROUP BY region",
                                   epsilon)
                        for region, n, mean in body["rows"]:
                            true_n, true_mean = by_region[region]
                            counts.append(abs(n - true_n) / true_n)
                            means.append(1.0 if mean is None else abs(mean - true_mean) / true_mean)
                        flagged, cells = flagged + len(body["unreliable"]), cells + 2 * len(body["rows"])
                    print(f"README query, eps={epsilon}: COUNT median {statistics.median(counts):.3f} p90 "
                          f"{_quantile(counts, 0.9):.3f}; AVG median {statistics.median(means):.3f} p90 "
                          f"{_quantile(means, 0.9):.3f}; unreliable {flagged}/{cells}")
                    for name, truth in series.items():
                        key = "day" if name == "daily" else "date_trunc('week', day)"
                        errors, flagged, rows, delta = [], 0, 0, 0.0
                        for i in range(args.answers):
                            body = ask(f"SELECT {key} AS k, COUNT(*) AS n{i} FROM visits GROUP BY 1", epsilon)
                            errors += [abs(n - truth[k[:10]]) / truth[k[:10]] for k, n in body["rows"]]
                            flagged, rows = flagged + len(body["unreliable"]), rows + len(body["rows"])
                            delta = max(delta, body["charge"]["delta"])
                        print(f"{name}, eps={epsilon}: {rows // args.answers} periods, delta {delta}; median "
                              f"{statistics.median(errors):.3f} p90 {_quantile(errors, 0.9):.3f}; unreliable "
                              f"{flagged}/{rows}")
        finally:
            live.stop()


if __name__ == "__main__":
    main()
