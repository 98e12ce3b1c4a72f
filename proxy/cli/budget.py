"""`dpproxy budget grant | new-period | list`: the operators' budget operations, sent to a running server.

The command is a client of the server's admin routes (proxy/http/ops.py), so every operation goes through the
one ledger the server admits against, in the transaction that writes its audit entry; nothing here opens the
ledger. The admin key is read from `DPPROXY_ADMIN_KEY` (or `--key-file`), never from the command line, where
other users of the machine could read it. Amounts are sent as their written digits (exact decimals).

Exit status: 0 done, 1 the server refused (its error is printed), 2 the server could not be reached or no key.

Example (the request a grant sends):
    >>> request_of(["grant", "--dataset", "demo", "--analyst", "ana", "--epsilon", "0.5", "--reason", "Q4"])
    ('POST', '/v1/admin/grants', {'dataset': 'demo', 'reason': 'Q4', 'analyst': 'ana', 'epsilon': '0.5'})
    >>> request_of(["new-period", "--dataset", "demo", "--all", "--reason", "new quarter"])
    ('POST', '/v1/admin/periods', {'dataset': 'demo', 'reason': 'new quarter', 'analyst': None})
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

OK, REFUSED, UNREACHABLE = 0, 1, 2


def add_parser(commands: Any) -> None:
    """The `budget` command and its three actions, on `main`'s subparsers."""
    budget = commands.add_parser("budget", help="grant budget or start a budget period (docs/operations.md)")
    budget.add_argument("--url", default=os.environ.get("DPPROXY_URL", "http://127.0.0.1:8000"),
                        help="the server (default $DPPROXY_URL or http://127.0.0.1:8000)")
    budget.add_argument("--key-file", type=Path, default=None,
                        help="a file holding the admin key (default: $DPPROXY_ADMIN_KEY)")
    _actions(budget)


def _actions(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    grant = actions.add_parser("grant", help="more budget for one analyst (or, with --shared, the dataset's total)")
    grant.add_argument("--dataset", required=True)
    who = grant.add_mutually_exclusive_group(required=True)
    who.add_argument("--analyst")
    who.add_argument("--shared", action="store_true",
                     help="raise the dataset's budget shared by all analysts (a separate, explicit operation)")
    grant.add_argument("--epsilon", default=None, help="ε to add, as a decimal (e.g. 0.5)")
    grant.add_argument("--delta", default=None, help="δ to add, as a decimal (e.g. 1e-7)")
    grant.add_argument("--reason", default=None, help="why (required: it is kept in the audit log)")
    period = actions.add_parser("new-period", help="start a new budget period for one analyst or all")
    period.add_argument("--dataset", required=True)
    whom = period.add_mutually_exclusive_group(required=True)
    whom.add_argument("--analyst")
    whom.add_argument("--all", action="store_true", help="every analyst and the dataset's shared budget")
    period.add_argument("--reason", default=None, help="why (required: it is kept in the audit log)")
    listing = actions.add_parser("list", help="every grant and period, oldest first")
    listing.add_argument("--dataset", default=None)


def request_of(argv: Sequence[str]) -> tuple[str, str, dict[str, object] | None]:
    """The method, path and JSON body of a `budget` action's arguments."""
    parser = argparse.ArgumentParser(prog="dpproxy budget")
    _actions(parser)
    return _request(parser.parse_args(argv))


def _request(args: argparse.Namespace) -> tuple[str, str, dict[str, object] | None]:
    if args.action == "list":
        return "GET", "/v1/admin/operations" + (f"?dataset={quote(args.dataset)}" if args.dataset else ""), None
    body: dict[str, object] = {"dataset": args.dataset, "reason": args.reason}
    if args.action == "new-period":
        return "POST", "/v1/admin/periods", {**body, "analyst": None if args.all else args.analyst}
    amounts = {name: value for name in ("epsilon", "delta") if (value := getattr(args, name)) is not None}
    if args.shared:
        return "POST", "/v1/admin/dataset-grants", {**body, **amounts}
    return "POST", "/v1/admin/grants", {**body, "analyst": args.analyst, **amounts}


def run(args: argparse.Namespace) -> int:
    """Send the action to the server and print its answer (JSON); the exit status."""
    key = (args.key_file.read_text(encoding="utf-8").strip() if args.key_file is not None
           else os.environ.get("DPPROXY_ADMIN_KEY", "").strip())
    if not key:
        print("dpproxy budget: no admin key: set DPPROXY_ADMIN_KEY or pass --key-file", file=sys.stderr)
        return UNREACHABLE
    method, path, body = _request(args)
    try:
        answer = httpx.request(method, args.url.rstrip("/") + path, json=body, timeout=30.0,
                               headers={"Authorization": f"Bearer {key}"})
    except httpx.HTTPError as err:
        print(f"dpproxy budget: the server did not answer: {type(err).__name__}: {err}", file=sys.stderr)
        return UNREACHABLE
    try:
        shown = json.dumps(answer.json(), indent=2, ensure_ascii=False)
    except ValueError:
        shown = answer.text
    print(shown, file=sys.stdout if answer.is_success else sys.stderr)
    return OK if answer.is_success else REFUSED
