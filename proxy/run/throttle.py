"""Per-analyst admission to the query routes: at most `max_concurrent_queries` in flight, and a rate of
`queries_per_minute` (a token bucket holding up to one minute's worth), per process (proxy/policy/limits.py).

A refused request raises `RateLimited`: a 429 `rate_limited` with a `Retry-After` header, before anything
is parsed or charged. Refusals use no token. Only the event loop calls a Throttle, so it needs no lock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

from proxy.policy.limits import AnalystLimits


class RateLimited(Exception):
    """Too many requests of one analyst: retry after `retry_after_s` seconds."""

    code: ClassVar[str] = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: int, **detail: object) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.detail: dict[str, object] = {"retry_after_s": retry_after_s, **detail}


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class Throttle:
    """The in-flight counts and token buckets of every analyst of one process.

    Example:
        >>> clock = iter([0.0, 0.0, 0.5, 30.0]).__next__
        >>> throttle = Throttle(clock)
        >>> limits = AnalystLimits(max_concurrent_queries=5, queries_per_minute=2)
        >>> with throttle.admitted("ann", limits), throttle.admitted("ann", limits):
        ...     pass
        >>> with throttle.admitted("ann", limits):
        ...     pass
        Traceback (most recent call last):
        ...
        proxy.run.throttle.RateLimited: more than 2 queries per minute; retry in 30 s
        >>> with throttle.admitted("ann", limits):  # 30 s later, one token is back
        ...     pass
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._running: dict[str, int] = {}
        self._buckets: dict[str, _Bucket] = {}

    @contextmanager
    def admitted(self, analyst: str, limits: AnalystLimits) -> Iterator[None]:
        """Hold one of the analyst's in-flight places for the block, or raise RateLimited."""
        running = self._running.get(analyst, 0)
        if running >= limits.max_concurrent_queries:
            raise RateLimited(
                f"{running} of your queries are in flight, the most allowed at once; retry when one has finished",
                retry_after_s=1, limit="max_concurrent_queries", max_concurrent_queries=limits.max_concurrent_queries,
            )
        self._take(analyst, limits.queries_per_minute)
        self._running[analyst] = running + 1
        try:
            yield
        finally:
            left = self._running[analyst] - 1
            if left:
                self._running[analyst] = left
            else:
                del self._running[analyst]

    def _take(self, analyst: str, per_minute: int) -> None:
        now, rate = self._clock(), per_minute / 60.0
        bucket = self._buckets.setdefault(analyst, _Bucket(float(per_minute), now))
        bucket.tokens = min(float(per_minute), bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens < 1.0:
            wait = max(1, math.ceil((1.0 - bucket.tokens) / rate))
            raise RateLimited(f"more than {per_minute} queries per minute; retry in {wait} s",
                              retry_after_s=wait, limit="queries_per_minute", queries_per_minute=per_minute)
        bucket.tokens -= 1.0
