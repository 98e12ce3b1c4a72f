"""Per-analyst request limits, as the policy file declares them (`[analysts.<name>]`, docs/policy.md).

    max_concurrent_queries = 16   # query and preview requests in flight at once, waiting or running
    queries_per_minute = 600      # sustained rate; a burst of up to this many is allowed

They are enforced per process by `proxy.run.throttle` (a refusal is a 429 `rate_limited`, nothing charged).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

LIMIT_KEYS = ("max_concurrent_queries", "queries_per_minute")
_RANGES = {"max_concurrent_queries": (1, 1_000), "queries_per_minute": (1, 1_000_000)}


@dataclass(frozen=True, slots=True)
class AnalystLimits:
    """How much of the service one analyst may use at once (per process).

    Example:
        >>> AnalystLimits()
        AnalystLimits(max_concurrent_queries=16, queries_per_minute=600)
        >>> AnalystLimits(max_concurrent_queries=0)
        Traceback (most recent call last):
        ...
        ValueError: max_concurrent_queries must be an integer in [1, 1000], got 0
    """

    max_concurrent_queries: int = 16
    queries_per_minute: int = 600

    def __post_init__(self) -> None:
        for key in LIMIT_KEYS:
            if (problem := limit_problem(key, getattr(self, key))) is not None:
                raise ValueError(f"{key} {problem}")


def limit_problem(key: str, value: object) -> str | None:
    """Why `value` is not a usable `key`, or None."""
    lo, hi = _RANGES[key]
    if isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi:
        return None
    return f"must be an integer in [{lo}, {hi}], got {value!r}"


def read_limits(raw: Mapping[str, object], loc: str, add: Callable[[str, str], None]) -> AnalystLimits | None:
    """The limits of one `[analysts.<name>]` table (defaults for missing keys), or None after `add`ing
    each problem with its location.

    Example:
        >>> problems = []
        >>> read_limits({"queries_per_minute": 0}, "analysts.bob", lambda at, p: problems.append(f"{at}: {p}"))
        >>> problems
        ['analysts.bob.queries_per_minute: must be an integer in [1, 1000000], got 0']
    """
    values: dict[str, int] = {}
    for key in LIMIT_KEYS:
        if key not in raw:
            continue
        value = raw[key]
        if (problem := limit_problem(key, value)) is not None:
            add(f"{loc}.{key}", problem)
        else:
            values[key] = int(value)  # type: ignore[call-overload]
    if len(values) < sum(key in raw for key in LIMIT_KEYS):
        return None
    return AnalystLimits(**values)
