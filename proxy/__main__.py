"""`dpproxy serve | prepare | demo | check-policy | explain | recommend | audit-verify | budget`: the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from accountant.events import to_json


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dpproxy", description="A differentially private SQL proxy.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP server (and, with --pg-port, the PostgreSQL protocol)")
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument("--policy", type=Path, help="the policy file (TOML)")
    source.add_argument("--demo", action="store_true", help="build the demo dataset if needed, then serve it")
    serve.add_argument("--dir", type=Path, default=Path("demo"), help="demo directory (with --demo)")
    serve.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="listen port (default 8000)")
    serve.add_argument("--pg-port", type=int, default=None,
                       help="also serve the PostgreSQL protocol on this port (default: off; docs/wire.md)")
    serve.add_argument("--workers", type=int, default=None,
                       help="server processes on the one port, sharing the ledger and the stores (default 1)")
    serve.add_argument("--http", choices=("httptools", "h11"), default=None,
                       help="HTTP parser (default: httptools when installed, else h11)")
    serve.add_argument("--loop", choices=("uvloop", "asyncio"), default=None,
                       help="event loop (default: uvloop when installed, else asyncio)")

    prepare = commands.add_parser(
        "prepare", help='build the bounding store of each dataset with bounding = "store" (serve builds it too)'
    )
    prepare.add_argument("--policy", type=Path, required=True)
    prepare.add_argument("--dataset", default=None, help="only this dataset (built whatever its bounding)")

    demo = commands.add_parser("demo", help="write a demo DuckDB dataset, policy and API keys")
    demo.add_argument("--dir", type=Path, default=Path("demo"))
    demo.add_argument("--users", type=int, default=50_000)
    demo.add_argument("--rows", type=int, default=1_000_000)

    check = commands.add_parser("check-policy", help="validate a policy file offline")
    check.add_argument("policy", type=Path)

    explain = commands.add_parser("explain", help="print the rewritten SQL and the charge; touches no data")
    explain.add_argument("--policy", type=Path, required=True)
    explain.add_argument("--dataset", required=True)
    explain.add_argument("--epsilon", type=float, default=None)
    explain.add_argument("--delta", type=float, default=None)
    explain.add_argument("--mechanism", choices=("laplace", "gaussian", "auto"), default=None)
    explain.add_argument("sql")

    recommend = commands.add_parser(
        "recommend", help="compare the admit rules (basic, zcdp, gdp) for a dataset's queries and budgets"
    )
    recommend.add_argument("--policy", type=Path, required=True)
    recommend.add_argument("--dataset", required=True)
    recommend.add_argument("--epsilon", type=float, default=None, help="per-query ε (default: the dataset's)")
    recommend.add_argument("--delta", type=float, default=None, help="per-query δ (default: the dataset's)")
    recommend.add_argument("--mechanism", choices=("laplace", "gaussian", "auto"), default=None)
    recommend.add_argument("--budget", type=float, nargs=2, metavar=("EPSILON", "DELTA"), default=None,
                           help="the budget to compare under (default: each budget on the dataset)")
    recommend.add_argument("--sql", default=None, help="the typical query (default: COUNT(*) of the first table)")

    audit = commands.add_parser(
        "audit-verify", help="check the audit log's hash chain and that every charge has its audit entry; exit 1 if not"
    )
    audit.add_argument("ledger", help="the ledger: a SQLite path, sqlite:///path or postgresql://…")

    from proxy.cli import budget  # httpx and argparse only

    budget.add_parser(commands)

    args = parser.parse_args(argv)
    match args.command:
        case "serve":
            return _serve(args)
        case "prepare":
            return _prepare(args.policy, args.dataset)
        case "demo":
            _demo(args.dir, users=args.users, rows=args.rows)
            return 0
        case "check-policy":
            return _check(args.policy)
        case "explain":
            return _explain(args)
        case "recommend":
            return _recommend(args)
        case "audit-verify":
            from proxy.cli.audit import audit_verify

            return audit_verify(args.ledger)
        case "budget":
            return budget.run(args)
    return 2


def _demo(directory: Path, *, users: int, rows: int) -> Path:
    from proxy.cli.demo import build_demo

    print(f"building the demo dataset in {directory}/ ({rows:,} visits of {users:,} users) ...", file=sys.stderr)
    files = build_demo(directory, users=users, rows=rows)
    print(f"wrote {files.database}, {files.policy} and {files.keys_env}")
    print(f"DPPROXY_ANALYST_KEY={files.analyst_key}")
    print(f"DPPROXY_ADMIN_KEY={files.admin_key}")
    return files.policy


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.app import create_app
    from proxy.settings import Settings

    policy = args.policy
    if args.demo:
        policy = args.dir / "policy.toml"
        if policy.exists():
            print(f"serving the existing demo in {args.dir}/; API keys are in {args.dir / 'keys.env'}:")
            print((args.dir / "keys.env").read_text().strip())
        else:
            _demo(args.dir, users=50_000, rows=1_000_000)
    overrides: dict[str, object] = {"policy": policy}
    if args.host is not None:
        overrides["host"] = args.host
    if args.port is not None:
        overrides["port"] = args.port
    if args.workers is not None:
        overrides["workers"] = args.workers
    if args.pg_port is not None:
        overrides["pg_port"] = args.pg_port
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValueError as err:  # pydantic's ValidationError: which setting, and what it must be
        print(f"dpproxy serve: {err}", file=sys.stderr)
        return 2
    import logging.config

    from proxy.logs import dict_config

    http, loop = protocol_stack(args.http, args.loop)
    if http == "httptools":  # h11 for a method httptools does not know: the app's JSON 405, as before
        from proxy.http.protocol import HttpToolsWithH11Methods

        http = HttpToolsWithH11Methods  # type: ignore[assignment]
    options: dict[str, object] = {
        "host": settings.host, "port": settings.port, "access_log": False, "server_header": False,
        "log_config": dict_config(settings.log_format, settings.log_level),  # JSON from the first line on
        "http": http, "loop": loop,
    }
    if settings.workers == 1:
        uvicorn.run(create_app(settings), **options)  # type: ignore[arg-type]
        return 0
    logging.config.dictConfig(options["log_config"])  # type: ignore[arg-type]  # the build's progress lines
    problem = _before_workers(settings)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    # each process builds its app from the environment (uvicorn starts them afresh): hand it the command line's
    os.environ.update({f"DPPROXY_{name.upper()}": str(Path(value).resolve() if name == "policy" else value)
                       for name, value in overrides.items()})
    uvicorn.run("proxy.app:create_app", factory=True, workers=settings.workers, **options)  # type: ignore[arg-type]
    return 0


def _before_workers(settings: object) -> str | None:
    """Before `serve --workers N` starts its processes: the policy loads, no dataset runs on Spark (a Spark
    session per process would each claim the cluster's cores), and every bounding store and the bounding key
    exist (built once here, not raced by N processes at start-up). The problem, or None."""
    from proxy.app import store_dir
    from proxy.engines.base import EngineError
    from proxy.policy.load import PolicyFileError, load_policy
    from proxy.settings import Settings
    from proxy.store.open import open_bounding_store

    assert isinstance(settings, Settings)
    try:
        policy = load_policy(settings.policy)
    except PolicyFileError as err:
        return str(err)
    spark = [d.name for d in policy.datasets if d.engine == "spark"]
    if spark:
        return (f"--workers {settings.workers}: dataset {spark[0]} runs on Spark, which one process drives; "
                "serve it with one worker, and run replicas for more")
    for dataset in policy.datasets:
        if dataset.bounding == "store":
            try:
                open_bounding_store(dataset, store_dir(settings, policy), settings).close()
            except EngineError as err:
                return f"dataset {dataset.name}: {err}"
    return None


def protocol_stack(http: str | None, loop: str | None) -> tuple[str, str]:
    """uvicorn's HTTP parser and event loop: the ones asked for, else httptools and uvloop (the fast stack,
    pinned in pyproject.toml), falling back to h11 and asyncio only where they cannot be imported.

    Example:
        >>> protocol_stack("h11", "asyncio")
        ('h11', 'asyncio')
    """
    return http or ("httptools" if _importable("httptools") else "h11"), loop or (
        "uvloop" if _importable("uvloop") else "asyncio")


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def _prepare(path: Path, only: str | None) -> int:
    import logging
    import time

    from proxy.app import store_dir
    from proxy.engines.base import EngineError
    from proxy.policy.load import load_policy
    from proxy.settings import Settings
    from proxy.store.open import open_bounding_store

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    policy = load_policy(path)
    datasets = [d for d in policy.datasets if (d.name == only if only else d.bounding == "store")]
    if only and not datasets:
        print(f"unknown dataset {only!r}", file=sys.stderr)
        return 2
    settings = Settings(policy=path)
    for dataset in datasets:
        started = time.perf_counter()
        try:
            store = open_bounding_store(dataset, store_dir(settings, policy), settings)
        except EngineError as err:
            print(f"dataset {dataset.name}: {err}", file=sys.stderr)
            return 1
        print(f"dataset {dataset.name}: bounding store {store.path} ready in {time.perf_counter() - started:.1f} s")
        store.close()
    if not datasets:
        print('no dataset has bounding = "store"; nothing to prepare')
    return 0


def _check(path: Path) -> int:
    from proxy.policy.load import policy_problems

    problems = policy_problems(path)
    for problem in problems:
        print(f"{path}: {problem}")
    if not problems:
        print(f"{path}: ok")
    return 1 if problems else 0


def _explain(args: argparse.Namespace) -> int:
    from proxy.policy.load import load_policy
    from proxy.query.errors import QueryError
    from proxy.query.mechanism_choice import plan_with

    policy = load_policy(args.policy)
    dataset = policy.dataset(args.dataset)
    if dataset is None:
        print(f"unknown dataset {args.dataset!r}", file=sys.stderr)
        return 2
    try:
        planned = plan_with(
            args.sql, dataset.catalog,
            epsilon=dataset.epsilon if args.epsilon is None else args.epsilon,
            delta=dataset.delta if args.delta is None else args.delta,
            mechanism=args.mechanism or dataset.mechanism, cells=dataset.cell_accounting, bounding=dataset.bounding,
            conversion="gdp" if dataset.accounting.rule == "gdp" else "zcdp",
        )
    except QueryError as err:
        print(json.dumps({"code": err.code, "error": str(err), "detail": err.detail}, default=str), file=sys.stderr)
        return 1
    price = planned.price
    if dataset.spark is not None and planned.tree is not None:  # the SQL Spark would run for this dataset
        from proxy.query.rewrite.render import render

        print(render(planned.tree, dataset.spark.target(dataset.name)))
    else:
        print(planned.sql)
    print(json.dumps({
        "mechanism": price.mechanism, "epsilon": price.epsilon, "delta": price.delta,
        "composition": price.composition, "partitions": planned.analysis.partitions, "event": to_json(price.event),
        "cells": None if planned.scope is None else {  # None: the charge covers every privacy unit
            "table": planned.scope.table, "count": planned.scope.count, "of": planned.scope.size,
        },
    }, indent=2))
    return 0


def _recommend(args: argparse.Namespace) -> int:
    from accountant.errors import UnsupportedEvent
    from accountant.filter import RULES, Accounting, Budget, Entry, capacity, cost
    from accountant.report import how_many
    from proxy.policy.load import load_policy
    from proxy.query.errors import QueryError
    from proxy.query.mechanism_choice import plan_with
    from proxy.query.planner import plan

    policy = load_policy(args.policy)
    dataset = policy.dataset(args.dataset)
    if dataset is None:
        print(f"unknown dataset {args.dataset!r}", file=sys.stderr)
        return 2
    epsilon = dataset.epsilon if args.epsilon is None else args.epsilon
    delta = dataset.delta if args.delta is None else args.delta
    mechanism = args.mechanism or dataset.mechanism
    table = dataset.catalog.tables[0]
    queries = [("typical", args.sql or f"SELECT COUNT(*) FROM {table.name}")]
    private = next((c for c in table.columns if c.groupable and c.public_domain is None), None)
    if args.sql is None and private is not None:
        queries.append(("private groups", f"SELECT {private.name}, COUNT(*) FROM {table.name} GROUP BY {private.name}"))
    budgets: dict[tuple[float, float], list[str]] = {}
    if args.budget is not None:
        budgets[tuple(args.budget)] = ["--budget"]  # type: ignore[index]
    else:
        for analyst in policy.analysts:
            if (b := analyst.budget(dataset.name)) is not None:
                budgets.setdefault((b.epsilon, b.delta), []).append(analyst.name)
        if dataset.budget is not None:
            budgets.setdefault((dataset.budget.epsilon, dataset.budget.delta), []).append("shared total")
    if not budgets:
        print(f"dataset {dataset.name} has no budgets; pass --budget EPSILON DELTA", file=sys.stderr)
        return 2
    share = dataset.accounting.selection_share
    print(f"dataset {dataset.name}: {mechanism} noise, per query ε={epsilon:g}, δ={delta:g}; "
          f"accounting in force: {dataset.accounting.rule} (selection_delta_share = {share:g})")
    entries: list[tuple[str, str, Entry]] = []
    gdp_entries: dict[str, Entry | None] = {}  # Gaussian noise is calibrated through GDP under the gdp rule
    gaussian: dict[str, bool] = {}  # per query: its noise is Gaussian ("auto" chooses per query)
    for label, sql in queries:
        try:
            conversion = "gdp" if dataset.accounting.rule == "gdp" else "zcdp"
            chosen_mechanism = plan_with(sql, dataset.catalog, epsilon=epsilon, delta=delta, mechanism=mechanism,
                                         conversion=conversion).price.mechanism  # "auto": under the rule in force
            price = plan(sql, dataset.catalog, epsilon=epsilon, delta=delta, mechanism=chosen_mechanism).price
        except QueryError as err:
            print(f"  {label} query {sql!r} cannot be priced: {err}", file=sys.stderr)
            continue
        entry = Entry(price.event, price.epsilon, price.delta)
        try:
            gdp_price = plan(sql, dataset.catalog, epsilon=epsilon, delta=delta, mechanism=chosen_mechanism,
                             conversion="gdp").price
            gdp_entries[label] = Entry(gdp_price.event, gdp_price.epsilon, gdp_price.delta)
        except QueryError:
            gdp_entries[label] = None
        costs = [f"ε={price.epsilon:.6g} δ={price.delta:.3g} (basic)"]
        for rule, symbol in (("zcdp", "ρ"), ("gdp", "μ")):
            try:
                amount, selection = cost(entry, rule)  # type: ignore[arg-type]
                costs.append(f"{symbol}={amount:.6g} δ_sel={selection:.3g}")
            except UnsupportedEvent:  # σ outside the range where the discrete Gaussian's μ is proven
                costs.append(f"no {rule} bound")
        shown = f" ({chosen_mechanism} noise)" if mechanism == "auto" else ""
        print(f"  {label}: {sql}{shown}\n    charge: " + ", ".join(costs))
        entries.append((label, sql, entry))
        gaussian[label] = chosen_mechanism == "gaussian"
    if not entries:
        return 1
    best_overall = None
    for (budget_epsilon, budget_delta), owners in budgets.items():
        budget = Budget(budget_epsilon, budget_delta)
        print(f"budget ε={budget_epsilon:g}, δ={budget_delta:g} ({', '.join(owners)}):")
        print(f"  {'rule':<6} {'capacity':<32} " + "  ".join(f"{label + ' queries':>22}" for label, _, _ in entries))
        counts: dict[str, int] = {}
        for rule in RULES:
            accounting = Accounting(rule, share)
            try:
                limit = capacity(budget, accounting)
            except ValueError as err:
                print(f"  {rule:<6} unusable: {err}")
                continue
            if rule == "basic":
                text = f"ε={limit.amount:.6g}, δ={limit.delta:.3g}"
            else:
                symbol = "ρ" if rule == "zcdp" else "μ"
                text = f"{symbol}={limit.amount:.6g}, δ_sel={limit.delta:.3g}"
            chosen = [gdp_entries[label] if rule == "gdp" and gaussian[label] else entry
                      for label, _, entry in entries]
            numbers = [0 if e is None else how_many(e, budget, accounting) for e in chosen]
            counts[rule] = numbers[0]
            note = "  (σ outside the proven range of the discrete Gaussian's μ)" if None in chosen else ""
            print(f"  {rule:<6} {text:<32} " + "  ".join(f"{n:>22}" for n in numbers) + note)
        best = max(counts, key=lambda r: (counts[r], -RULES.index(r)))  # ties go to the simpler rule
        best_overall = best_overall or best
        print(f"  most typical queries: {best} ({counts[best]}; basic admits {counts.get('basic', 0)})")
    print(f'recommended: accounting = "{best_overall}" for [datasets.{dataset.name}] '
          "(choose it before the first query: the rule may not change while budgets are in use)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
