"""What the keyed hash costs the per-query bounding path on DuckDB: this checkout's rewritten SQL against
another checkout's (e.g. main), and plain DuckDB, in one run (issue #16).

    python bench/hash_cost.py [--rows 1000000] [--users 50000] [--repeat 5] [--baseline /work/main ...]
                              [--queries users_by_plan,region_category,day_filtered_count]

The demo dataset of bench/query_latency.py (built or reused in --dir) with `bounding = "per_query"`. For every
workload query: the rewritten SQL (salt 42) of this checkout and of each --baseline (planned in a subprocess
run from that checkout, e.g. a `git archive` of an older commit, so each side's own rewrite is measured), each
run through the DuckDB engine after one warm-up, alternating, --repeat times; plain DuckDB on the analyst's
SQL. Prints p50 wall and CPU time per side (CPU: DuckDB's threads are this process's, so it barely moves
with the machine's load), the CPU ratio to plain, new/baseline in CPU, and whether a baseline returned the same rows as
this checkout (it must, when both compute the same hash).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import numpy as np  # noqa: E402
from query_latency import WORKLOAD, ensure_dataset  # noqa: E402

from proxy.engines.duckdb_engine import Engine  # noqa: E402

PLAN = """
import json, sys
sys.path[:0] = ['.', 'bench']
from query_latency import WORKLOAD
from proxy.policy import load_policy
from proxy.query import plan
dataset = load_policy(sys.argv[1]).dataset('demo')
out = {}
for w in WORKLOAD:
    try:
        out[w.name] = plan(w.sql, dataset.catalog, epsilon=1.0, delta=1e-6, mechanism='laplace', salt=42,
                           bounding='per_query').sql
    except Exception as err:  # a shape one side refuses is reported, not measured
        out[w.name] = 'ERROR ' + repr(err)
print(json.dumps(out))
"""


def planned(checkout: Path, policy: Path) -> dict[str, str]:
    """Each workload query's rewritten DuckDB SQL, planned by `checkout`'s own code."""
    done = subprocess.run([sys.executable, "-c", PLAN, str(policy)], cwd=checkout, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--baseline", type=Path, action="append", help="another checkout (repeatable)")
    parser.add_argument("--queries", default=None, help="comma-separated workload names (default: all)")
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-spark")
    args = parser.parse_args(argv)
    directory = args.dir / f"{args.rows}"
    ensure_dataset(directory, rows=args.rows, users=args.users)
    policy = directory / "policy.toml"
    baselines = args.baseline or [Path("/work/main")]
    sides = {"new": planned(ROOT, policy)} | {f"b{i}": planned(b, policy) for i, b in enumerate(baselines)}
    engine = Engine(directory / "demo.duckdb", threads=2, memory_limit="4GB", timeout_s=600)
    print(f"load average (1 min) at start {os.getloadavg()[0]:.2f}; baselines: "
          + ", ".join(f"b{i} = {b}" for i, b in enumerate(baselines)))
    chosen = None if args.queries is None else set(args.queries.split(","))
    for w in (w for w in WORKLOAD if chosen is None or w.name in chosen):
        sqls = {"plain": w.sql} | {side: sql[w.name] for side, sql in sides.items()  # an older checkout may
                                   if not sql.get(w.name, "ERROR").startswith("ERROR")}  # lack a query
        rows = {side: sorted(engine.run(sql).rows, key=repr) for side, sql in sqls.items()}  # warm-up
        samples: dict[str, list[float]] = {side: [] for side in sqls}
        cpu: dict[str, list[float]] = {side: [] for side in sqls}
        for _ in range(args.repeat):
            for side, sql in sqls.items():
                t0, c0 = time.perf_counter(), time.process_time()
                engine.run(sql)
                samples[side].append((time.perf_counter() - t0) * 1000)
                cpu[side].append((time.process_time() - c0) * 1000)  # DuckDB's threads are this process's
        p50 = {side: float(np.percentile(s, 50)) for side, s in samples.items()}
        c50 = {side: float(np.percentile(s, 50)) for side, s in cpu.items()}
        line = f"{w.name:20s} plain {p50['plain']:6.0f} ms cpu {c50['plain']:6.0f}"
        for side in sides:
            if side not in p50:
                line += f" | {side} refused"
                continue
            line += f" | {side} {p50[side]:6.0f} ms cpu {c50[side]:6.0f} (x{c50[side] / c50['plain']:.1f})"
            if side != "new" and "new" in p50:
                line += f" new/{side} cpu {c50['new'] / c50[side]:.2f} same {rows[side] == rows['new']}"
        print(line, flush=True)
    print(f"load average (1 min) at end {os.getloadavg()[0]:.2f}")
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
