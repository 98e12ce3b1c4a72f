"""Proxy memory against table size (issue #12: "proxy memory independent of table size").

    python bench/memory.py [--rows 1000000 10000000] [--users 50000 200000] [--repeat 5] [--dir bench/data-memory]

For each size (the demo dataset of bench/query_latency.py, built there unless already present):

    store build   `python -m proxy prepare` building the bounding store from scratch, in its own process:
                  its peak resident set (ru_maxrss from wait4) and wall time
    serve         a real `python -m proxy serve` on the store just built, answering over HTTP every query of
                  bench/query_latency.py's workload `--repeat` times (distinct requests, never a repeat): its
                  resident set after start-up (VmRSS) and its peak over the whole run (VmHWM,
                  /proc/PID/status), read while it still runs

against the engine's memory limit (DuckDB's `memory_limit`, DPPROXY_MEMORY_LIMIT, default 8GB), which caps
DuckDB's buffer manager and not the Python heap, so both figures are printed. The load average is printed
with each size: under load the memory figures hold, the wall times do not.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import httpx  # noqa: E402
from query_latency import (  # noqa: E402
    WORKLOAD,
    _free_port,
    _post,
    _server,
    _wait_ready,
    ensure_dataset,
    fresh_ledger,
    unique_request,
)

from proxy.settings import Settings  # noqa: E402


def status_kib(pid: int, field: str) -> int:
    """A `field` (VmRSS, VmHWM) of /proc/PID/status, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def build_store(policy: Path, env: dict[str, str], store: Path) -> tuple[float, int]:
    """Build the bounding store from scratch in a child process: (wall seconds, peak RSS KiB)."""
    for old in store.glob("*.store-*"):
        old.unlink()
    log_path = store / "prepare.log"
    started = time.perf_counter()
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "proxy", "prepare", "--policy", str(policy)], cwd=ROOT,
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # reaped here, with its resource usage
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"prepare failed ({proc.returncode}):\n{log_path.read_text()[-2000:]}")
    return wall, usage.ru_maxrss  # KiB on Linux


def serve_workload(policy: Path, env: dict[str, str], key: str, repeat: int, directory: Path) -> tuple[int, int, int]:
    """(RSS after start-up, peak RSS, answers) of a server answering the workload `repeat` times, in KiB."""
    port = _free_port()
    log_path = directory / "memory-server.log"
    with log_path.open("w") as log, _server(
        [sys.executable, "-m", "proxy", "serve", "--policy", str(policy), "--port", str(port)], env, log
    ) as proc, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600,
                            headers={"Authorization": f"Bearer {key}"}) as client:
        _wait_ready(client, proc, log_path)
        after_start = status_kib(proc.pid, "VmRSS")
        answers = 0
        for _ in range(repeat):
            for w in WORKLOAD:
                _post(client, unique_request(w.sql))
                answers += 1
        return after_start, status_kib(proc.pid, "VmHWM"), answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--users", type=int, nargs="+", default=[50_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-memory")
    args = parser.parse_args()
    if len(args.rows) != len(args.users):
        raise SystemExit("give one --users per --rows")

    limit = Settings(policy=Path("unused")).memory_limit
    print(f"engine memory_limit {os.environ.get('DPPROXY_MEMORY_LIMIT', limit)}; cpus {os.cpu_count()}; "
          f"workload {len(WORKLOAD)} queries x {args.repeat}")
    print(f"{'rows':>12}{'users':>9}{'build s':>9}{'build peak MiB':>16}{'serve start MiB':>17}"
          f"{'serve peak MiB':>16}{'answers':>9}{'load':>7}")
    for rows, users in zip(args.rows, args.users, strict=True):
        directory = args.dir / f"{rows}"
        _, key = ensure_dataset(directory, rows=rows, users=users)
        policy = directory / "policy.toml"
        store = directory / "store"
        store.mkdir(exist_ok=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               "DPPROXY_LEDGER": str(fresh_ledger(directory)), "DPPROXY_STORE_DIR": str(store)}
        wall, build_peak = build_store(policy, env, store)
        start, peak, answers = serve_workload(policy, env, key, args.repeat, directory)
        print(f"{rows:>12,}{users:>9,}{wall:>9.1f}{build_peak / 1024:>16.0f}{start / 1024:>17.0f}"
              f"{peak / 1024:>16.0f}{answers:>9}{os.getloadavg()[0]:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
