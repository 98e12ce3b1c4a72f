"""The 22 standard TPC-H texts through the product, customer as the privacy unit (bench/README.md, *TPC-H*).

For each query: answered or refused (the error's stable code and message). For an answered one, its release
before noise (zero noise, every candidate group kept) against DuckDB's answer to the text as written, under
policy.toml's bounds, which never bind; then at ε = 1 the median relative error over `--draws` releases with
the production sampler, under the bounds chosen below for the ε figures (`CHOSEN`: rows per customer that keep
nearly all of each query's rows at scale 0.1, fewer where the noise they cost outweighs the rows they keep).

    python bench/tpch/generate.py --scale 0.1       # once: bench/tpch/data/tpch.duckdb
    python bench/tpch/run.py [--scale 0.1] [--draws 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import generate
import harness

from proxy.query.expr import Key

# (max_rows, max_groups) per table for the ε = 1 figures, per answered query
CHOSEN: dict[str, dict[str, tuple[int, int]]] = {
    "q01": {"lineitem": (60, 4)},
    "q04": {"orders": (2, 2)},  # orders of one quarter: at most 2 per customer and priority at scale 0.01
    "q05": {"lineitem": (4, 1), "orders": (4, 1)},  # c_nationkey = s_nationkey: one nation per customer, few lines
    "q06": {"lineitem": (12, 1)},
    "q07": {"lineitem": (2, 2), "orders": (2, 2)},  # a customer's one nation, the other's suppliers, two years
    "q08": {"lineitem": (1, 2), "orders": (1, 2)},  # one part type: about one line per customer, two years
    "q09": {"lineitem": (1, 8), "orders": (1, 8)},  # green parts: a few lines per customer, each its own group
    "q12": {"lineitem": (8, 2), "orders": (8, 2)},
    "q13": {"orders": (40, 1)},  # the clamp of a customer's order count: the histogram's domain is 0..40
    "q14": {"lineitem": (8, 1)},
    "q19": {"lineitem": (2, 1)},
    "q21": {"lineitem": (1, 1), "orders": (1, 1)},  # one waiting line per customer at scale 0.01
}
DEFAULT_CHOSEN = {"lineitem": (20, 4), "orders": (20, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--dir", type=Path, default=harness.HERE / "data")
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    data = generate.generate(args.scale, args.dir)
    with tempfile.TemporaryDirectory() as directory:
        started = time.perf_counter()
        workload = harness.Workload(data, Path(directory))
        print(f"TPC-H scale {args.scale}: store built in {time.perf_counter() - started:.1f} s")
        answered, exact = [], []
        try:
            for name in harness.QUERIES:
                outcome = workload.answer(name)
                if outcome.code is not None:
                    print(f"{name}  refused  {outcome.code}: {outcome.message}")
                    continue
                answered.append(name)
                if outcome.exact:
                    exact.append(name)
                line = f"{name}  answered{' (public, exact and free)' if outcome.public else ''}  " \
                       f"exact before noise: {outcome.exact}"
                if not outcome.public:
                    catalog = harness.with_bounds(workload.catalog, CHOSEN.get(name, DEFAULT_CHOSEN))
                    planned = workload.planned(harness.text(name), args.epsilon, catalog)
                    keys = len([o for o in planned.analysis.outputs if isinstance(o.expr, Key)])
                    errors = []
                    for _ in range(args.draws):
                        noisy = workload.noisy(name, args.epsilon, catalog)
                        errors += harness.relative_errors(noisy, outcome.reference, keys)
                    median = statistics.median(errors) if errors else float("nan")
                    line += f"  ε={args.epsilon:g} median relative error {median:.2%} " \
                            f"(bounds {CHOSEN.get(name, DEFAULT_CHOSEN)}, {args.draws} draws)"
                print(line)
        finally:
            workload.close()
        print(f"answered {len(answered)}/22: {', '.join(answered)}; exact before noise: {len(exact)}/{len(answered)}")


if __name__ == "__main__":
    main()
