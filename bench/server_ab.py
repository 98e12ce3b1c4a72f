"""Two checkouts' servers side by side (issue #32): server CPU per small answer, batches alternating.

Starts `python -m proxy serve` from each of two source trees (`--before DIR`, `--after DIR`, e.g. a `git archive`
copy of main and this branch) on the same demo and policy, each on a fresh ledger, both up at once, and sends
`--rounds` alternating batches of `--batch` distinct `users by plan` requests to each, one client: the servers'
CPU per answer (all threads, from /proc) is measured over the same minutes, so the machine's load falls on both
alike. `--vary alias` makes each request new by its output alias (`AS n<i>`, a text of one shape), `--vary
epsilon` by its ε (the same text; a new price each time). Prints each side's per-batch figures, their means and
the ratio after / before.

    python bench/server_ab.py --before /tmp/main --after . --dir DIR --vary alias

Example (a batch's figure):
    >>> per_answer(1.5, 2.25, 150)
    5.0
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from query_latency import _free_port, ensure_dataset, set_bounding  # noqa: E402
from throughput import set_limits  # noqa: E402


def per_answer(cpu_before: float, cpu_after: float, answers: int) -> float:
    """CPU ms per answer between two readings of a process's CPU seconds."""
    return round((cpu_after - cpu_before) / answers * 1000, 2)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def body(vary: str, i: int) -> dict[str, object]:
    if vary == "alias":
        return {"sql": f"SELECT plan, COUNT(*) AS n{i} FROM users GROUP BY plan"}
    return {"sql": "SELECT plan, COUNT(*) AS n FROM users GROUP BY plan", "epsilon": float(f"{0.1 + i * 1e-9:.9f}")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="source tree of the reference")
    parser.add_argument("--after", type=Path, required=True, help="source tree measured against it")
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-1m")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--vary", choices=("alias", "epsilon"), default="alias")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batch", type=int, default=150)
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    _, key = ensure_dataset(directory, rows=args.rows, users=args.users)
    policy = directory / "policy.toml"
    set_bounding(policy, "store")
    set_limits(policy, 1)
    sides: dict[str, tuple[subprocess.Popen[bytes], httpx.Client]] = {}
    counter = itertools.count(1)
    load = os.getloadavg()[0]
    try:
        for name, tree in (("before", args.before), ("after", args.after)):
            ledger = directory / f"server-ab-{name}.sqlite"
            for suffix in ("", "-wal", "-shm"):
                Path(f"{ledger}{suffix}").unlink(missing_ok=True)
            port = _free_port()
            env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "DPPROXY_LEDGER": str(ledger)}
            log = (directory / f"server-ab-{name}.log").open("w")
            proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--policy", str(policy), "--port",
                                     str(port)], cwd=tree.resolve(), env=env, stdout=log, stderr=subprocess.STDOUT)
            client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"})
            sides[name] = (proc, client)
            for _ in range(600):
                if proc.poll() is not None:
                    raise SystemExit(f"the {name} server exited; see {log.name}")
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.2)
        figures: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, (proc, client) in sides.items():
                for _ in range(10):  # untimed: the batch starts warm
                    client.post("/v1/query", json=body("alias", next(counter)))
                start = cpu_seconds(proc.pid)
                for _ in range(args.batch):
                    reply = client.post("/v1/query", json=body(args.vary, next(counter)))
                    if reply.status_code != 200 or reply.headers.get("x-dp-repeat") != "false":
                        raise SystemExit(f"{name}: not a new answer: {reply.status_code} {reply.text[:200]}")
                figures[name].append(per_answer(start, cpu_seconds(proc.pid), args.batch))
    finally:
        for proc, client in sides.values():
            client.close()
            proc.terminate()
        for proc, _ in sides.values():
            proc.wait(timeout=60)
    means = {name: statistics.mean(values) for name, values in figures.items()}
    print(f"vary {args.vary}; {args.rounds} rounds of {args.batch} answers each side; load {load:.1f} -> "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for name, values in figures.items():
        print(f"{name:6s} server CPU ms per answer {values}  mean {means[name]:.2f}")
    print(f"after / before x{means['after'] / means['before']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
