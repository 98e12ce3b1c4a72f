"""The product beside SmartNoise SQL and Qrlew on the peer workload (issues #12 and #29), at one ε, in process.

    .venv/bin/python bench/peers/run.py [--rows 1000000] [--users 100000] [--answers 20] [--epsilon 1]
        [--dir bench/data-peers] [--peer-python /work/peervenv/bin/python] [--queries region_count,...]
        [--variants auto,fresh,mech_auto,fixed] [--reuse-peers] [--json out.json]

The data are the project's own demo (proxy.cli.demo.build_demo at --rows visits of --users users), built in
--dir or reused. Every system answers every query (bench/peers/workload.py) --answers times at ε:
- the product through proxy.pipeline.answer in process (plan, real SQLite ledger, bounding store, engine,
  release with the real sampler), each request a new one (ε differs in the 9th decimal, so no stored release
  answers it), four times: `auto`, the demo policy as generated (bounds chosen per query within its limits; a bound
  chosen for a query shape is kept and reused, free, by its next 10 answers: docs/privacy.md §10.8, so 20
  answers see 2 draws), `fresh`, the same with `auto_bounds_reuse = 0` (every answer draws its own bounds:
  the selection's spread is in the figures), `mech_auto`, the demo policy with `mechanism = "auto"` (each query
  Laplace or Gaussian noise by its expected error, issue #29 item 7), and `fixed`, the bounds the peers are
  given (max_rows 20 per user and group, max_groups 4, amount in [0, 500], duration_s in [0, 3600]:
  bench/auto_utility.py's `fixed`);
- the peers in their own venv (bench/peers/requirements.txt), through bench/peers/peer_side.py run under
  --peer-python with a JSON request on stdin and their raw answers as JSON on stdout; absent that Python, the
  peers are skipped with a message and the product's figures are still printed. Their raw answers are kept in
  --dir (peers-<ε>-<N>.json); `--reuse-peers` scores those again instead of asking the peers (the product
  changes, the pinned peers do not).

Each system's answers are scored here by one code (bench/peers/scoring.py, bench/utility.py's rule): relative
error per (answer, group, aggregate) against plain DuckDB's unbounded answer to the product's text; median and
p90 over all; and the product's median over the best peer's (issue #29's target: ≤ 0.5). Times: plain DuckDB's
answer (median of 5, wall), and each system's wall time per answer (median), for orientation only (the peers'
engines differ: SmartNoise runs on SQLite, Qrlew's SQL on DuckDB).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (ROOT, ROOT / "bench", HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import duckdb  # noqa: E402
from auto_utility import policy_variant  # noqa: E402
from query_latency import close_env, ensure_dataset, in_process, set_bounding  # noqa: E402
from scoring import ratio_to_best_peer, relative_errors, summary  # noqa: E402
from utility import request_epsilon  # noqa: E402
from workload import BY_NAME, QUERIES, PeerQuery  # noqa: E402

from proxy import pipeline  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402

PEERS = ("smartnoise", "qrlew")
VARIANTS = ("auto", "fresh", "mech_auto", "fixed")
DEFAULT_PEER_PYTHON = Path("/work/peervenv/bin/python")
TARGET = 0.5


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def plain_answers(db: Path, queries: tuple[PeerQuery, ...]
                  ) -> tuple[dict[str, list[list[Any]]], dict[str, float], dict[str, float]]:
    """Plain DuckDB's answer to each query's text as written, and its median wall and CPU time over 5 runs (ms;
    CPU is this process's, every DuckDB thread included)."""
    truths, ms, cpu_ms = {}, {}, {}
    with duckdb.connect(str(db), read_only=True, config={"threads": 2}) as conn:
        conn.execute("SET enable_progress_bar = false")
        for q in queries:
            truths[q.name] = [[_plain(v) for v in row] for row in conn.execute(q.sql).fetchall()]
            samples, cpu = [], []
            for _ in range(5):
                started, cpu_started = time.perf_counter(), time.process_time()
                conn.execute(q.sql).fetchall()
                samples.append(1000 * (time.perf_counter() - started))
                cpu.append(1000 * (time.process_time() - cpu_started))
            ms[q.name] = statistics.median(samples)
            cpu_ms[q.name] = statistics.median(cpu)
    return truths, ms, cpu_ms


def product_answers(policy: Path, directory: Path, key: str, queries: tuple[PeerQuery, ...], answers: int,
                    epsilon: float) -> dict[str, dict[str, Any]]:
    """`answers` releases of each query through proxy.pipeline.answer, with the bounds each one used."""
    env, analyst = in_process(policy, directory, key)
    serial = itertools.count(1)
    out: dict[str, dict[str, Any]] = {}
    try:
        for q in queries:
            rows, wall, cpu, bounds = [], [], [], []
            try:
                for _ in range(answers):
                    req = QueryRequest(sql=q.sql, epsilon=request_epsilon(epsilon, next(serial)))
                    started, cpu_started = time.perf_counter(), time.process_time()
                    prepared = pipeline.prepare(req, analyst, env.policy, env.sampler.salt())
                    # as the server's reply path does for a request without an idempotency key: bounds kept
                    # for this shape are reused (while the policy's auto_bounds_reuse allows), new ones kept
                    prepared = pipeline.at_kept_bounds(prepared, analyst.name, env)
                    result = pipeline.answer(prepared, analyst, env, lambda charge: None)
                    pipeline.keep_bounds(result, analyst.name, env)
                    wall.append(time.perf_counter() - started)
                    cpu.append(time.process_time() - cpu_started)
                    rows.append([[_plain(v) for v in row] for row in result.release.rows])
                    if result.bounds is not None:
                        b = result.bounds
                        bounds.append({"max_rows": b.max_rows, "max_groups": b.max_groups, "reused": b.reused,
                                       "clamps": [list(c) for c in b.clamps], "caps": [list(c) for c in b.caps]})
                out[q.name] = {"answers": rows, "seconds": wall, "cpu_seconds": cpu, "bounds": bounds}
            except Exception as err:  # a refusal or failure is reported in the table, not hidden
                out[q.name] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
            print(f"product: {policy.stem} {q.name}", file=sys.stderr, flush=True)
    finally:
        close_env(env)
    return out


def variant_policy(source: Path, variant: str) -> Path:
    """The demo policy as generated (`auto`), with `auto_bounds_reuse = 0` (`fresh`), with `mechanism = "auto"`
    (`mech_auto`), or auto_utility's `fixed`."""
    if variant == "auto":
        return source
    if variant == "fixed":
        return policy_variant(source, "fixed")
    text = source.read_text()
    if variant == "fresh":
        assert text.count("[datasets.demo]\n") == 1 and "auto_bounds_reuse" not in text, "the demo policy changed"
        text = text.replace("[datasets.demo]\n", "[datasets.demo]\nauto_bounds_reuse = 0\n")
    else:
        assert text.count('mechanism = "laplace"\n') == 1, "the demo policy changed shape"
        text = text.replace('mechanism = "laplace"\n', 'mechanism = "auto"\n')
    target = source.with_name(f"policy-{variant}.toml")
    target.write_text(text)
    return target


def peer_answers(peer_python: Path, db: Path, queries: tuple[PeerQuery, ...], answers: int, epsilon: float,
                 peers: tuple[str, ...], cache: Path | None = None) -> dict[str, Any]:
    """The peers' raw answers from peer_side.py under their own Python (kept in `cache`), or from `cache` when it
    holds every query asked, or why they were skipped."""
    if not peers:
        return {}
    if cache is not None and cache.exists():
        kept = json.loads(cache.read_text())
        if all(q.name in kept.get(p, {}).get("queries", {}) for p in peers for q in queries) or all(
                "skipped" in kept.get(p, {}) for p in peers):
            print(f"peers: their answers kept in {cache}", file=sys.stderr, flush=True)
            return {p: kept[p] for p in peers}
    if not peer_python.exists():
        reason = (f"no peers' Python at {peer_python} (python3 -m venv /work/peervenv && /work/peervenv/bin/pip "
                  "install -r bench/peers/requirements.txt)")
        print(f"peers skipped: {reason}", file=sys.stderr, flush=True)
        return {name: {"skipped": reason} for name in peers}
    request = {"db": str(db), "epsilon": epsilon, "answers": answers, "queries": [q.name for q in queries],
               "peers": list(peers)}
    done = subprocess.run([str(peer_python), str(HERE / "peer_side.py")], input=json.dumps(request), text=True,
                          stdout=subprocess.PIPE, check=False, env={**os.environ, "PYTHONPATH": ""})
    if done.returncode != 0:
        reason = f"peer_side.py exited {done.returncode}"
        return {name: {"skipped": reason} for name in peers}
    reply = json.loads(done.stdout)
    got = {name: {**info, "python": reply.get("python")} for name, info in reply["peers"].items()}
    if cache is not None:
        cache.write_text(json.dumps(got) + "\n")
    return got


def score(queries: tuple[PeerQuery, ...], truths: dict[str, list[list[Any]]], plain_ms: dict[str, float],
          systems: dict[str, dict[str, Any]], product: str = "auto",
          plain_cpu_ms: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """One row per query: plain ms; per system its median and p90 error, cells scored, answers and ms per answer
    (or its error or skip reason); and the `product` system's median over the best peer's."""
    rows = []
    for q in queries:
        truth = {tuple(r[:q.n_keys]): tuple(r[q.n_keys:]) for r in truths[q.name]}
        row: dict[str, Any] = {"query": q.name, "title": q.title, "groups": len(truth),
                               "plain_ms": plain_ms.get(q.name), "systems": {},
                               "plain_cpu_ms": (plain_cpu_ms or {}).get(q.name)}
        for name, system in systems.items():
            got = system.get("queries", {}).get(q.name) if "queries" in system else system.get(q.name)
            if "skipped" in system:
                row["systems"][name] = {"skipped": system["skipped"]}
            elif got is None or "error" in got:
                row["systems"][name] = {"error": None if got is None else got["error"]}
            else:
                cell = summary(relative_errors(truth, got["answers"], q.n_keys))
                cell["answers"] = len(got["answers"])
                cell["ms_per_answer"] = 1000 * statistics.median(got["seconds"]) if got["seconds"] else None
                if got.get("cpu_seconds"):
                    cell["cpu_ms_per_answer"] = 1000 * statistics.median(got["cpu_seconds"])
                if got.get("bounds"):
                    cell["bounds"] = got["bounds"]
                row["systems"][name] = cell
        peers = [row["systems"][p].get("median") for p in PEERS if p in row["systems"]]
        row["ratios"] = {v: ratio_to_best_peer(row["systems"][v].get("median"), peers)
                         for v in VARIANTS if v in row["systems"]}
        row["ratio"] = row["ratios"].get(product)
        rows.append(row)
    return rows


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _cell(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return "–"
    if "skipped" in cell:
        return "skipped"
    if "error" in cell:
        return "error"
    return f"{_pct(cell['median'])} / {_pct(cell['p90'])}"


def _bounds(cell: dict[str, Any] | None) -> str:
    """The product's chosen bounds over its answers: k and g medians, and how many answers reused kept bounds."""
    chosen = (cell or {}).get("bounds") or []
    if not chosen:
        return "–"
    k = statistics.median(b["max_rows"] for b in chosen)
    g = statistics.median(b["max_groups"] for b in chosen)
    return f"k {k:g}, g {g:g}, reused {sum(b['reused'] for b in chosen)}/{len(chosen)}"


def _ms(cell: dict[str, Any] | None) -> str:
    """Wall ms per answer (median), with the CPU ms beside it where measured."""
    if not cell or cell.get("ms_per_answer") is None:
        return "–"
    cpu = cell.get("cpu_ms_per_answer")
    return f"{cell['ms_per_answer']:.0f}" + ("" if cpu is None else f" ({cpu:.0f})")


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}" + (" ✓" if value <= TARGET else " ✗")


def render(rows: list[dict[str, Any]], systems: tuple[str, ...]) -> str:
    """The findings table (markdown): error median / p90 per system, the ratio, and times."""
    variants = [v for v in VARIANTS if v in systems]
    head = ("| query | groups | plain ms (CPU) | " + " | ".join(f"{s} median / p90" for s in systems) + " | "
            + " | ".join(f"{v} ÷ best peer" + (f" (≤ {TARGET})" if v == "auto" else "") for v in variants)
            + " | auto bounds | " + " | ".join(f"{s} ms (CPU)" for s in systems) + " |")
    lines = [head, "|" + "---|" * (4 + len(variants) + 2 * len(systems))]
    for r in rows:
        cells = [r["systems"].get(s) for s in systems]
        ms = " | ".join(_ms(c) for c in cells)
        ratios = " | ".join(_ratio(r["ratios"].get(v)) for v in variants)
        plain = "–" if r["plain_ms"] is None else f"{r['plain_ms']:.1f}" + (
            "" if r.get("plain_cpu_ms") is None else f" ({r['plain_cpu_ms']:.1f})")
        lines.append(f"| {r['title']} | {r['groups']} | {plain} | " + " | ".join(_cell(c) for c in cells)
                     + f" | {ratios} | {_bounds(r['systems'].get('auto'))} | {ms} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--answers", type=int, default=20)
    parser.add_argument("--epsilon", type=Decimal, default=Decimal(1))
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-peers")
    parser.add_argument("--peer-python", type=Path, default=DEFAULT_PEER_PYTHON)
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated: smartnoise, qrlew (or empty)")
    parser.add_argument("--queries", default=",".join(q.name for q in QUERIES))
    parser.add_argument("--variants", default=",".join(VARIANTS), help="the product's: auto, fixed")
    parser.add_argument("--reuse-peers", action="store_true", help="score the peers' answers kept in --dir")
    parser.add_argument("--json", type=Path, help="also write the scored rows and the run's facts here")
    args = parser.parse_args(argv)
    queries = tuple(BY_NAME[name] for name in args.queries.split(",") if name)
    peers = tuple(p for p in args.peers.split(",") if p)
    variants = tuple(v for v in args.variants.split(",") if v)
    assert set(peers) <= set(PEERS) and set(variants) <= set(VARIANTS), f"peers {PEERS}, variants {VARIANTS}"
    epsilon = float(args.epsilon)
    directory = args.dir.resolve()
    meta, key = ensure_dataset(directory, rows=args.rows, users=args.users)
    set_bounding(directory / "policy.toml", "store")
    db = directory / "demo.duckdb"
    load_before = os.getloadavg()

    truths, plain_ms, plain_cpu_ms = plain_answers(db, queries)
    cache = directory / f"peers-{epsilon:g}-{args.answers}.json"
    if not args.reuse_peers or not meta["reused"]:  # a rebuilt dataset: the kept answers are of other data
        cache.unlink(missing_ok=True)
    systems: dict[str, dict[str, Any]] = dict(peer_answers(args.peer_python, db, queries, args.answers, epsilon,
                                                           peers, cache))
    for variant in variants:
        systems[variant] = product_answers(variant_policy(directory / "policy.toml", variant), directory, key,
                                           queries, args.answers, epsilon)
    rows = score(queries, truths, plain_ms, systems, plain_cpu_ms=plain_cpu_ms)
    order = tuple(s for s in (*PEERS, *VARIANTS) if s in systems)
    facts = {"dataset": meta, "epsilon": epsilon, "answers": args.answers, "machine": platform.platform(),
             "cpus": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg(),
             "versions": {p: systems[p].get("version") for p in peers},
             "skipped": {p: systems[p]["skipped"] for p in peers if "skipped" in systems[p]}}
    print(f"dataset {meta['rows']:,} visits of {meta['users']:,} users; ε = {epsilon} per query; {args.answers} "
          f"answers per query and system; load {load_before[0]:.2f} → {facts['load_after'][0]:.2f}; "
          f"peers {facts['versions']}" + (f"; skipped {facts['skipped']}" if facts["skipped"] else ""))
    print(render(rows, order))
    met = [r for r in rows if r["ratio"] is not None]
    if met:
        print(f"target (auto ≤ {TARGET} × the best peer's median): met on "
              f"{sum(r['ratio'] <= TARGET for r in met)} of {len(met)} queries")
    if args.json:
        args.json.write_text(json.dumps({"facts": facts, "rows": rows}, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
