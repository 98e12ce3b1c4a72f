"""The automatic-bounds path's own CPU per answer, with and without the store's remembered answers (issue #32).

    python bench/answer_memory.py --dir DIR [--answers 20] [--pairs 2] [--queries drilldown,count_sum_total]
                                  [--profile QUERY]

DIR holds a demo built by bench/query_latency.py (policy.toml, keys.env, demo.duckdb and its store); it is read,
never written, except for a fresh ledger (bench-ledger.sqlite, as query_latency.py's). For each query, in
process, two paths:

    draw    `pipeline.answer(prepare(request))`: bounds drawn afresh by every answer (query_latency.py's (b))
    kept    `pipeline.reply(request)`: what the server runs, the bounds kept for the shape and reused
            (`auto_bounds_reuse`, default 10 answers per draw)

each measured `--answers` times per run as CPU seconds (time.process_time: this process's threads, DuckDB's
included) per answer, in `--pairs` alternating before/after pairs: "before" hides the store's `run_answer`
(docs/privacy.md §10.7.1), so every answer runs its SQL; "after" is the pipeline as it is. Every request is
distinct (its ε differs in the 9th decimal), so none is a stored release. `--profile QUERY` prints cProfile's
top functions of 20 "after" answers of QUERY on the draw path.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import hashlib
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from query_latency import WORKLOAD, fresh_ledger, unique_request  # noqa: E402

from proxy import pipeline  # noqa: E402
from proxy.app import build_env  # noqa: E402
from proxy.settings import Settings  # noqa: E402

DEFAULT = "count_sum_total,drilldown,day_filtered_count,region_filtered_count"


@dataclasses.dataclass
class Unremembered:
    """The store engine with `run_answer` hidden: every answer runs its SQL (the pipeline before the memory)."""

    engine: Any

    def __getattr__(self, name: str) -> Any:
        if name == "run_answer":
            raise AttributeError(name)
        return getattr(self.engine, name)


def cpu_per_answer(fn: Callable[[], object], answers: int) -> float:
    start = time.process_time()
    for _ in range(answers):
        fn()
    return (time.process_time() - start) / answers * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--answers", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--queries", default=DEFAULT)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args(argv)
    key = next(line.split("=", 1)[1].strip() for line in (args.dir / "keys.env").read_text().splitlines()
               if line.startswith("DPPROXY_ANALYST_KEY="))
    env = build_env(Settings(policy=args.dir / "policy.toml", ledger=fresh_ledger(args.dir)))
    (name, engine), = env.engines
    before = dataclasses.replace(env, engines=((name, Unremembered(engine)),))
    analyst = env.policy.analyst_by_key_hash(hashlib.sha256(key.encode()).hexdigest())
    assert analyst is not None
    sql = {w.name: w.sql for w in WORKLOAD}

    def draw(e: Any, text: str) -> Callable[[], object]:
        return lambda: pipeline.answer(pipeline.prepare(unique_request(text), analyst, e.policy, e.sampler.salt()),
                                       analyst, e, lambda charge: None)

    def kept(e: Any, text: str) -> Callable[[], object]:
        return lambda: pipeline.reply(unique_request(text), analyst, e, lambda charge: None, lambda answer: b"{}")

    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load {Path('/proc/loadavg').read_text()[:14]}")
    print("| query | path | before (ms CPU per answer, each pair) | after | median before → after |")
    print("|---|---|---|---|---|")
    try:
        for query in args.queries.split(","):
            for label, path in (("draw", draw), ("kept", kept)):
                path(env, sql[query])()  # warm: the histograms read once per store, the text planned once
                runs: dict[str, list[float]] = {"before": [], "after": []}
                for _ in range(args.pairs):
                    runs["before"].append(cpu_per_answer(path(before, sql[query]), args.answers))
                    runs["after"].append(cpu_per_answer(path(env, sql[query]), args.answers))
                b, a = (", ".join(f"{v:.1f}" for v in runs[k]) for k in ("before", "after"))
                print(f"| {query} | {label} | {b} | {a} | {statistics.median(runs['before']):.1f} → "
                      f"{statistics.median(runs['after']):.1f} |", flush=True)
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(cpu_per_answer, draw(env, sql[args.profile]), 20)
            pstats.Stats(profile).sort_stats("cumulative").print_stats(35)
    finally:
        env.ledger.close()
        engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
