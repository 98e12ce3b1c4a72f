"""The policy file's protected tables and their columns -> TableSchema / ColumnSpec (proxy/policy/load.py reads the
rest). Each problem is reported with its location; unknown keys are errors."""

from __future__ import annotations

import datetime
import math
import re
from typing import cast

from proxy.policy.public_tables import read_date_bounds
from proxy.policy.readers import (
    _bool,
    _check_case_duplicates,
    _check_keys,
    _int,
    _is_number,
    _named_tables,
    _Problems,
    _Raw,
    _str,
)
from proxy.policy.unit_paths import PLACEHOLDER, read_path
from proxy.query import types
from proxy.query.auto.bounds import DEFAULT_AUTO_LIMIT, DEFAULT_GROUPS_LIMIT
from proxy.query.catalog import MAX_ABS_BOUND, ColumnSpec, Literal_, TableSchema

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # table and column names: plain SQL identifiers


def _table(name: str, raw: _Raw, dataset_loc: str, p: _Problems) -> TableSchema | None:
    loc = f"{dataset_loc}.tables.{name}"
    before = len(p.items)
    _check_keys(raw, loc, ("privacy_unit", "max_groups", "max_groups_limit", "max_rows", "max_rows_limit",
                           "one_row_per_unit", "columns", "unit_via"), p)
    _check_limits_used(raw, loc, p)
    path = read_path(raw["unit_via"], loc, p) if "unit_via" in raw else None
    if "unit_via" in raw and "privacy_unit" in raw:
        p.add(f"{loc}.privacy_unit", "a table with unit_via has the unit its path ends at: remove privacy_unit")
    unit = path[1] if path is not None else None if "unit_via" in raw else _str(raw, "privacy_unit", loc, p)
    auto_groups = raw.get("max_groups") == "auto"
    max_groups = _auto_limit(raw, "max_groups", DEFAULT_GROUPS_LIMIT, loc, p) if auto_groups else _int(
        raw, "max_groups", loc, p, default=1)
    auto = raw.get("max_rows") == "auto"
    max_rows = _auto_limit(raw, "max_rows", DEFAULT_AUTO_LIMIT, loc, p) if auto else _int(
        raw, "max_rows", loc, p, default=1)
    one_row = _bool(raw, "one_row_per_unit", loc, p, default=False)
    for key, chosen in (("max_rows", auto), ("max_groups", auto_groups)):
        if chosen and one_row:
            p.add(f"{loc}.{key}", f'{key} = "auto" is meaningless on a table declared one_row_per_unit = true '
                                  "(every unit has one row: there is no bound to choose); remove one of them")
    for key, value, chosen in (("max_groups", max_groups, auto_groups), ("max_rows", max_rows, auto)):
        if value is not None and not 1 <= value <= 10_000:
            p.add(f"{loc}.{key}_limit" if chosen else f"{loc}.{key}", f"must be an integer in [1, 10000], got {value}")
    named = _named_tables(raw, "columns", loc, IDENTIFIER, p)
    columns = tuple(c for n, r in named if (c := _column(n, r, loc, p)))
    _check_case_duplicates(tuple(c.name for c in columns), f"{loc}.columns", p)
    if path is not None and unit is not None:
        if any(c.name.lower() == unit.lower() for c in columns):
            p.add(f"{loc}.columns.{unit}", "is the unit reached through unit_via, materialised by the bounding store: "
                                           "do not declare it")
        columns += (ColumnSpec(unit, PLACEHOLDER),)  # typed as the parent's unit by resolve_paths
    elif unit is not None and "columns" in raw:
        spec = next((c for c in columns if c.name.lower() == unit.lower()), None)
        if not any(n.lower() == unit.lower() for n, _ in named):
            p.add(f"{loc}.privacy_unit", f"{unit!r} is not a declared column")
        elif spec is not None and spec.groupable:
            p.add(f"{loc}.columns.{spec.name}.groupable", "the privacy unit must not be groupable")
    if len(p.items) > before or unit is None or max_groups is None or max_rows is None or one_row is None:
        return None
    try:
        return TableSchema(name, unit, columns, max_groups, max_rows, one_row, auto_max_rows=auto,
                           auto_max_groups=auto_groups, unit_via=path[0] if path is not None else ())
    except ValueError as err:
        p.add(loc, str(err))
        return None


def _auto_limit(raw: _Raw, key: str, default: int, loc: str, p: _Problems) -> int | None:
    """The largest bound an auto `key` may choose (`<key>_limit`); the limit key is read only with "auto"."""
    return _int(raw, f"{key}_limit", loc, p, default=default)


def _check_limits_used(raw: _Raw, loc: str, p: _Problems) -> None:
    for key in ("max_rows", "max_groups"):
        if raw.get(key) != "auto" and f"{key}_limit" in raw:
            p.add(f"{loc}.{key}_limit", f'is read only with {key} = "auto" (the largest bound a query may choose)')


def _column(name: str, raw: _Raw, table_loc: str, p: _Problems) -> ColumnSpec | None:
    loc = f"{table_loc}.columns.{name}"
    before = len(p.items)
    _check_keys(raw, loc, ("type", "bounds", "bounds_limit", "unit_level", "groupable", "public_domain"), p)
    type_ = _str(raw, "type", loc, p)
    if type_ is not None:
        try:
            type_ = types.normalize(type_)
        except ValueError as err:
            p.add(f"{loc}.type", str(err))
            type_ = None
    unit_level = _bool(raw, "unit_level", loc, p, default=False)
    groupable = _bool(raw, "groupable", loc, p, default=False)
    date_bounds = bounds = None
    if "bounds" in raw and type_ is not None and types.kind(type_) == "date":
        date_bounds = read_date_bounds(raw["bounds"], f"{loc}.bounds", p)  # its days: a public domain
    elif raw.get("bounds") == "auto":  # chosen per query within the declared outer limits (auto/clamp.py)
        if "bounds_limit" not in raw:
            p.add(f"{loc}.bounds_limit", 'bounds = "auto" needs its outer limits, e.g. bounds_limit = [0, 100000]')
        else:
            bounds = _bounds(raw.get("bounds_limit"), f"{loc}.bounds_limit", p)
    elif "bounds" in raw:
        bounds = _bounds(raw.get("bounds"), f"{loc}.bounds", p)
    if "bounds_limit" in raw and raw.get("bounds") != "auto":
        p.add(f"{loc}.bounds_limit", 'is read only with bounds = "auto" (the outer limits a query may choose within)')
    domain = None
    if "public_domain" in raw and type_ is not None:
        domain = _public_domain(raw["public_domain"], type_, f"{loc}.public_domain", p)
        if not groupable:
            p.add(f"{loc}.public_domain", "only a groupable column can have a public domain")
    if len(p.items) > before or type_ is None or unit_level is None or groupable is None:
        return None
    try:
        return ColumnSpec(name, type_, bounds, unit_level, domain, groupable, date_bounds,
                          auto_bounds=raw.get("bounds") == "auto" and bounds is not None)
    except ValueError as err:
        p.add(loc, str(err))
        return None


def _bounds(value: object, loc: str, p: _Problems) -> tuple[float, float] | None:
    ok = isinstance(value, list) and len(value) == 2 and all(_is_number(v) for v in value)
    lo, hi = (float(cast(float, v)) for v in cast(list[object], value)) if ok else (math.nan, math.nan)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        p.add(loc, f"must be [lo, hi] with lo <= hi, both finite numbers, got {value!r}")
        return None
    if max(abs(lo), abs(hi)) > MAX_ABS_BOUND:
        # larger bounds would let a sum's arithmetic fail after admission on one person's value (a leak)
        p.add(loc, f"must lie within ±{MAX_ABS_BOUND:.0e} (larger clamp bounds are refused), got {value!r}")
        return None
    return lo, hi


def _public_domain(value: object, type_: str, loc: str, p: _Problems) -> tuple[Literal_, ...] | None:
    if not isinstance(value, list) or not value:
        p.add(loc, f"must be a non-empty array of {type_} values, got {value!r}")
        return None
    converted = tuple(_domain_value(v, type_) for v in value)
    bad = [v for v, c in zip(value, converted, strict=True) if c is None]
    if bad:
        p.add(loc, f"values must all be finite {type_} values, got {', '.join(repr(v) for v in bad)}")
        return None
    return cast(tuple[Literal_, ...], converted)


def _domain_value(value: object, type_: str) -> Literal_ | None:
    """`value` as the column type's canonical value (dates become ISO text), or None when it is not one."""
    if isinstance(value, datetime.datetime) or (isinstance(value, float) and not math.isfinite(value)):
        return None
    if types.kind(type_) == "float" and isinstance(value, str):
        return None  # TOML has numbers: a quoted "0.1" is a typo, not a FLOAT
    try:
        return types.canonical(type_, value)
    except ValueError:
        return None
