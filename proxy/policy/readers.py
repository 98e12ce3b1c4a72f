"""Small typed readers of the policy file's TOML tables: each reports its own problem, with its location
("datasets.demo.epsilon: ..."), and returns None on failure, so the loader (proxy/policy/load.py) carries on and
lists every problem in one run."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from fractions import Fraction
from typing import cast

from mechanisms.rounding import down


class _Problems:
    """Collects "<location>: <problem>" lines while the loader carries on past each one."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, location: str, problem: str) -> None:
        self.items.append(f"{location}: {problem}")


_Raw = Mapping[str, object]




def _named_tables(
    raw: _Raw, key: str, loc: str, pattern: re.Pattern[str], p: _Problems | None
) -> tuple[tuple[str, _Raw], ...]:
    """The sub-tables of `raw[key]` as (name, table) pairs; reports bad names and non-tables to `p`."""
    where = f"{loc}.{key}" if loc else key
    value = raw.get(key, {})
    if not isinstance(value, dict):
        if p is not None:
            p.add(where, f"must be a table, got {_show(value)}")
        return ()
    found: list[tuple[str, _Raw]] = []
    for name, item in value.items():
        if not pattern.fullmatch(name):
            if p is not None:
                p.add(f"{where}.{name}", f"name must match {pattern.pattern}")
        elif not isinstance(item, dict):
            if p is not None:
                p.add(f"{where}.{name}", f"must be a table, got {_show(item)}")
        else:
            found.append((name, item))
    return tuple(found)


def _check_keys(raw: _Raw, loc: str, allowed: tuple[str, ...], p: _Problems) -> None:
    for key in raw:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"expected one of {', '.join(allowed)}"
            p.add(f"{loc}.{key}" if loc else key, f"unknown key; {hint}")


def _check_case_duplicates(names: tuple[str, ...], loc: str, p: _Problems) -> None:
    # SQL names are case-insensitive: "Visits" and "visits" would be one table to a query.
    seen: set[str] = set()
    for name in names:
        if name.lower() in seen:
            p.add(f"{loc}.{name}", "declared twice (names are case-insensitive)")
        seen.add(name.lower())


def _take(
    raw: _Raw, key: str, loc: str, p: _Problems, ok: Callable[[object], bool], what: str, default: object
) -> object:
    if key not in raw:
        if default is _REQUIRED:
            p.add(f"{loc}.{key}" if loc else key, "is required")
            return None
        return default
    value = raw[key]
    if not ok(value):
        p.add(f"{loc}.{key}" if loc else key, f"must be {what}, got {_show(value)}")
        return None
    return value


_REQUIRED = object()


def _str(raw: _Raw, key: str, loc: str, p: _Problems, default: object = _REQUIRED) -> str | None:
    ok: Callable[[object], bool] = lambda v: isinstance(v, str) and v != ""  # noqa: E731
    return cast(str | None, _take(raw, key, loc, p, ok, "a non-empty string", default))


class _DecimalText(float):
    """A TOML float that remembers the digits it was written with (`exact`), so that privacy numbers can be
    rounded in the safe direction from what the policy says rather than from the nearest float."""

    exact: Fraction | None

    def __new__(cls, text: str) -> _DecimalText:
        number = float.__new__(cls, text)
        exact = Decimal(text.replace("_", ""))
        number.exact = Fraction(exact) if exact.is_finite() else None  # nan, inf: refused by the number checks
        return number


def _privacy_float(raw: _Raw, key: str, loc: str, p: _Problems, default: object = _REQUIRED) -> float | None:
    """A budget or per-query ε/δ: the largest float at or below the decimal written in the policy. A charge
    then never exceeds the written number and a budget never exceeds what was granted (0.1 as a float is
    0.1000000000000000055…)."""
    value = _take(raw, key, loc, p, _is_number, "a number", default)
    if value is None:
        return None
    if isinstance(value, _DecimalText) and value.exact is not None:
        return down(value.exact)
    return float(cast(float, value))


def _written_decimal(value: object) -> Fraction | None:
    """The exact number a policy wrote for an ε or δ (a decimal or an integer), or None if unknown."""
    if isinstance(value, _DecimalText):
        return value.exact
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value)
    return None


def _float(raw: _Raw, key: str, loc: str, p: _Problems, default: object = _REQUIRED) -> float | None:
    value = _take(raw, key, loc, p, _is_number, "a number", default)
    return None if value is None else float(cast(float, value))


def _int(raw: _Raw, key: str, loc: str, p: _Problems, default: object = _REQUIRED) -> int | None:
    ok: Callable[[object], bool] = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
    return cast(int | None, _take(raw, key, loc, p, ok, "an integer", default))


def _bool(raw: _Raw, key: str, loc: str, p: _Problems, default: object = _REQUIRED) -> bool | None:
    return cast(bool | None, _take(raw, key, loc, p, lambda v: isinstance(v, bool), "true or false", default))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _show(value: object) -> str:
    return f"{type(value).__name__} {value!r}"[:80]
