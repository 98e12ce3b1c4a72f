"""`dpproxy serve | demo | check-policy | explain`: the command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from accountant.events import to_json


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dpproxy", description="A differentially private SQL proxy.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP server")
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument("--policy", type=Path, help="the policy file (TOML)")
    source.add_argument("--demo", action="store_true", help="build the demo dataset if needed, then serve it")
    serve.add_argument("--dir", type=Path, default=Path("demo"), help="demo directory (with --demo)")
    serve.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="listen port (default 8000)")

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
    explain.add_argument("--mechanism", choices=("laplace", "gaussian"), default=None)
    explain.add_argument("sql")

    args = parser.parse_args(argv)
    match args.command:
        case "serve":
            return _serve(args)
        case "demo":
            _demo(args.dir, users=args.users, rows=args.rows)
            return 0
        case "check-policy":
            return _check(args.policy)
        case "explain":
            return _explain(args)
    return 2


def _demo(directory: Path, *, users: int, rows: int) -> Path:
    from proxy.demo import build_demo

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
    settings = Settings(**overrides)  # type: ignore[arg-type]
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")
    return 0


def _check(path: Path) -> int:
    from proxy.policy import policy_problems

    problems = policy_problems(path)
    for problem in problems:
        print(f"{path}: {problem}")
    if not problems:
        print(f"{path}: ok")
    return 1 if problems else 0


def _explain(args: argparse.Namespace) -> int:
    from proxy.policy import load_policy
    from proxy.query import plan
    from proxy.query.errors import QueryError

    policy = load_policy(args.policy)
    dataset = policy.dataset(args.dataset)
    if dataset is None:
        print(f"unknown dataset {args.dataset!r}", file=sys.stderr)
        return 2
    try:
        planned = plan(
            args.sql, dataset.catalog,
            epsilon=dataset.epsilon if args.epsilon is None else args.epsilon,
            delta=dataset.delta if args.delta is None else args.delta,
            mechanism=args.mechanism or dataset.mechanism,
        )
    except QueryError as err:
        print(json.dumps({"code": err.code, "error": str(err), "detail": err.detail}, default=str), file=sys.stderr)
        return 1
    price = planned.price
    print(planned.sql)
    print(json.dumps({
        "epsilon": price.epsilon, "delta": price.delta, "composition": price.composition,
        "partitions": planned.analysis.partitions, "event": to_json(price.event),
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
