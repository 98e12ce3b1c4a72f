"""Fault points for the crash tests: the server kills itself (SIGKILL) at a named step of a request.

A no-op unless the environment variable `DPPROXY_TEST_KILL_AT` names the point, read once at import; it is a
test variable, not a setting (docs/operations.md says so), and tests/test_idempotency.py is its one user.
The points of `proxy/pipeline.py`: `admitted` (the charge committed, nothing run), `rendered` (the answer
rendered, not yet stored) and `stored` (the release durable, not yet sent).

Example:
    >>> point("admitted") is None  # not set in the doctests: nothing happens
    True
"""

from __future__ import annotations

import os
import signal
from typing import Literal

Point = Literal["admitted", "rendered", "stored"]
_AT = os.environ.get("DPPROXY_TEST_KILL_AT")


def point(name: Point) -> None:
    """Kill this process at once, as `kill -9` would, when `DPPROXY_TEST_KILL_AT` is `name`."""
    if name == _AT:
        os.kill(os.getpid(), signal.SIGKILL)
