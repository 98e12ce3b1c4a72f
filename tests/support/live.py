"""Live servers for end-to-end tests: `Server` (one `python -m proxy serve` subprocess), `StartFresh` (servers on
their own copy of the policy with an empty ledger), and the small helpers those tests share: a free port, the
spend of a budget, exact sums and differences, a policy copy with fixed or other bounds. The fixtures that use
them are in tests/conftest.py."""


from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from fractions import Fraction
from pathlib import Path
from typing import Any, cast

import httpx

from proxy.cli.demo import DemoFiles

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0  # generous: imports (DuckDB, OpenDP, FastAPI) take ~2 s on an idle machine
CLIENT_TIMEOUT_S = 60.0


# The files that take longest (Spark's JVM, servers killed and restarted, the sensitivity oracles), longest first
# (`--durations` on a 2-core machine): `--dist loadfile` hands a worker the next file when it is free, so with
# these first the last minutes are short files on both workers, not one long file on one while the other idles.
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """One `python -m proxy serve --policy FILE --port P` subprocess; its output goes to `log`; `settings`
    are DPPROXY_* variables for it (no others reach it)."""

    def __init__(self, log: Path, settings: dict[str, str] | None = None) -> None:
        self.log = log
        self.settings = dict(settings or {})
        self.policy: Path | None = None
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        assert self.port is not None, "the server was never started"
        return f"http://127.0.0.1:{self.port}"

    def start(self, policy: Path, port: int | None = None) -> Server:
        """Start the server and wait until GET /healthz answers 200 (on a free port by default)."""
        assert self._proc is None, "the server is already running"
        self.policy = policy
        for _ in range(3):  # a free port can be taken by another process before the server binds it
            self.port = port or free_port()
            if self._launch():
                return self
            if port is not None or "address already in use" not in self.log_tail().lower():
                break
        raise RuntimeError(f"the server exited during start-up:\n{self.log_tail()}")

    def _launch(self) -> bool:
        """Run the process; True once it is ready, False if it exited first."""
        assert self.policy is not None and self.port is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("DPPROXY_")}  # settings come from argv
        env.update(self.settings)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
        env["PYTHONUNBUFFERED"] = "1"  # the log is complete whenever a test reads it
        argv = [sys.executable, "-m", "proxy", "serve",
                "--policy", str(self.policy), "--port", str(self.port)]
        with self.log.open("ab") as out:
            proc = subprocess.Popen(
                argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        self._proc = proc
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._proc = None
                return False
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=2.0).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.kill9()
        raise RuntimeError(f"the server was not ready within {READY_TIMEOUT_S} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Terminate (SIGTERM) and reap the server; SIGKILL it if it does not exit. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill9(self) -> None:
        """`kill -9` the server (no shutdown handlers run) and reap it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=CLIENT_TIMEOUT_S)

    def log_tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


StartFresh = Callable[..., Server]


def sum_up(values: Iterable[float]) -> float:
    """The exact sum of `values`, rounded up to a float: how a spend is defined (docs/privacy.md §5)."""
    exact = sum(map(Fraction, values), Fraction(0))
    nearest = float(exact)
    return nearest if Fraction(nearest) >= exact else math.nextafter(nearest, math.inf)


def difference_down(total: float, spent: float) -> float:
    """total - spent exactly, rounded down to a float and clipped at 0: how a remaining budget is defined."""
    exact = Fraction(total) - Fraction(spent)
    nearest = float(exact)
    return max(0.0, nearest if Fraction(nearest) <= exact else math.nextafter(nearest, -math.inf))


def spend(client: httpx.Client, dataset: str = "demo") -> dict[str, Any]:
    """The caller's budget entry on `dataset`, from GET /v1/budget."""
    response = client.get("/v1/budget")
    assert response.status_code == 200, response.text
    (entry,) = [b for b in response.json()["budgets"] if b["dataset"] == dataset]
    return cast(dict[str, Any], entry)


# The demo's visits choose their bounds per query ("auto", proxy/cli/demo.py). Tests about other features assert
# exact noise and charges at fixed bounds: they run the demo with the fixed bounds it had before (max_rows 20,
# max_groups 4, amount in [0, 500], duration_s in [0, 3600]); tests/http/test_demo_auto_http.py runs it as shipped.
FIXED_BOUNDS: tuple[tuple[str, str, int], ...] = (
    (r'^max_groups = "auto"\nmax_groups_limit = \d+$', "max_groups = 4", 1),
    (r'^max_rows = "auto"\nmax_rows_limit = \d+$', "max_rows = 20", 1),
    (r'bounds = "auto", bounds_limit = \[0\.0, 100000\.0\]', "bounds = [0.0, 500.0]", 1),
    (r'bounds = "auto", bounds_limit = \[0, 86400\]', "bounds = [0, 3600]", 1),
    # the demo declares day's bounds (a public domain of days, issue #29); the former policy kept days private
    (r'^day = \{ type = "DATE", groupable = true, bounds = \[2026-01-01, 2026-12-31\] \}',
     'day = { type = "DATE", groupable = true }', 1),
)


def fixed_bounds(text: str) -> str:
    """The demo policy `text` with the visits table's former fixed bounds instead of "auto"."""
    for pattern, line, expected in FIXED_BOUNDS:
        text, found = re.subn(pattern, line, text, flags=re.MULTILINE)
        assert found == expected, f"the demo policy changed shape: {pattern} matched {found} times"
    return text


def policy_copy(
    demo: DemoFiles, directory: Path, *, epsilon: float | None = None, delta: float | None = None,
    auto: bool = False, share: str | None = None,
) -> Path:
    """A copy of the demo policy in `directory` with its own (empty) ledger there, reading the demo's
    DuckDB by absolute path; `epsilon`/`delta` replace every analyst's budget on the demo dataset, `share` (TOML,
    e.g. "0.2" or "[0.1, 0.5]") its `auto_bounds_share`. The visits table has fixed bounds (`fixed_bounds`)
    unless `auto`: then it is the demo's policy as shipped."""
    directory.mkdir(parents=True, exist_ok=True)
    text = demo.policy.read_text(encoding="utf-8")
    if not auto:
        text = fixed_bounds(text)
    edits: list[tuple[str, str, int]] = [
        (r"^ledger = .*$", f"ledger = {json.dumps(str(directory / 'ledger.sqlite'))}", 1),
        (r"^path = .*$", f"path = {json.dumps(str(demo.database.resolve()))}", 1),
    ]
    if epsilon is not None or delta is not None:
        e, d = 5.0 if epsilon is None else epsilon, 1e-6 if delta is None else delta
        edits.append((r"^budgets = .*$", f"budgets = {{ demo = {{ epsilon = {e!r}, delta = {d!r} }} }}", 2))
    if share is not None:
        edits.append((r"^auto_bounds_share = .*$", f"auto_bounds_share = {share}", 1))
    for pattern, line, expected in edits:
        text, found = re.subn(pattern, line, text, flags=re.MULTILINE)
        assert found == expected, f"the demo policy changed shape: {pattern} matched {found} times"
    policy = directory / "policy.toml"
    policy.write_text(text, encoding="utf-8")
    return policy


