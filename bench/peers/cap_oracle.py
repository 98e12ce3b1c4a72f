"""How far a per-user total row cap could take a COUNT by category over two weeks (bench/peers/run.py's `two_weeks`),
chosen with hindsight: the limit any bound selection aims for on the query where SmartNoise SQL is best.

    .venv/bin/python bench/peers/cap_oracle.py [--dir bench/data-peers] [--epsilon 1] [--draws 2000]

SmartNoise's `max_ids` keeps at most T = 20 rows per user over the whole query, so its histogram has L1 sensitivity
T and Laplace noise of scale T/ε per group. For each T here: each user keeps T of its rows in the window (in an
order by a hash of the row, as the product's store ranks rows), the exact truncated counts are computed once, and
`--draws` draws of Laplace(T/ε) noise per category are scored against the plain count (bench/peers/scoring.py).
The full ε goes to the query (nothing to selection), so no automatic choice of T can do better on average.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import duckdb
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scoring import summary  # noqa: E402
from workload import BY_NAME  # noqa: E402

CAPS = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=HERE.parent / "data-peers")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--draws", type=int, default=2000)
    args = parser.parse_args(argv)
    query = BY_NAME["two_weeks"]
    where = query.sql.split(" WHERE ")[1].split(" GROUP BY ")[0]
    rng = np.random.default_rng(29)
    with duckdb.connect(str(args.dir / "demo.duckdb"), read_only=True) as conn:
        truth = dict(conn.execute(query.sql).fetchall())
        categories = sorted(truth)
        true = np.array([truth[c] for c in categories], dtype=float)
        print(f"{query.title}: {len(categories)} groups, {int(true.sum()):,} rows; ε = {args.epsilon}, "
              f"{args.draws} draws per cap")
        print("| T (rows per user) | rows truncated | median | p90 |")
        print("|---|---|---|---|")
        for cap in CAPS:
            kept = dict(conn.execute(
                "SELECT category, COUNT(*) FROM (SELECT category, row_number() OVER (PARTITION BY user_id ORDER BY "
                f"hash(user_id, day, category, amount, duration_s)) AS r FROM visits WHERE {where}) "
                f"WHERE r <= {cap} GROUP BY category").fetchall())
            bounded = np.array([kept.get(c, 0) for c in categories], dtype=float)
            noisy = bounded + rng.laplace(0.0, cap / args.epsilon, size=(args.draws, len(categories)))
            errors = (np.abs(noisy - true) / true).ravel().tolist()
            s = summary(errors)
            print(f"| {cap} | {1 - bounded.sum() / true.sum():.2%} | {s['median']:.3%} | {s['p90']:.3%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
