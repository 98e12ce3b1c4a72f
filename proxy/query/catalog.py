"""The data policy of one dataset: protected tables, their privacy unit, contribution bounds and columns.

Frozen values only. Every privacy number is validated here, so a Catalog that exists is usable: bounds are
finite with lo <= hi, contribution bounds are positive integers, the privacy unit is a declared column.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Literal

from proxy.query import types
from proxy.query.types import TYPE_KINDS, Kind
from proxy.query.types import Value as Literal_

__all__ = ["TYPE_KINDS", "Catalog", "ColumnSpec", "Kind", "Literal_", "PublicTable", "TableSchema"]

Mechanism = Literal["laplace", "gaussian"]
MechanismChoice = Literal["laplace", "gaussian", "auto"]  # "auto": by expected error (query/mechanism_choice.py)
Adjacency = Literal["add_remove"]
MAX_ABS_BOUND = 1e15  # clamp bounds: a clamped value is below 2^50 on its grid, so no cast of it can fail
MAX_DOMAIN_DAYS = 100_000  # declared date bounds spanning more days are not enumerated as a public domain


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """One column of a protected table as the policy declares it."""

    name: str
    type: str  # normalised to DuckDB's own name on construction (types.normalize)
    bounds: tuple[float, float] | None = None  # clamp bounds; required to SUM/AVG the column
    unit_level: bool = False  # constant per privacy unit: grouping on it is disjoint per unit (§3)
    public_domain: tuple[Literal_, ...] | None = None  # every value released, no δ spent on keys
    groupable: bool = False  # may appear in GROUP BY
    date_bounds: tuple[str, str] | None = None  # a DATE column's declared first and last day (ISO): a public domain
    auto_bounds: bool = False  # bounds = "auto": each query chooses its clamp within `bounds` (auto/clamp.py)
    total_cap: int = 0  # a query's chosen per-unit L1 cap of its SUM/AVG (grid units, auto/total.py); 0: none
    # the declared limits a capped SUM/AVG keeps when the query chose a tighter clamp (`bounds`) for the column's
    # quantiles or spreads: the cap's sensitivity min(C, g·k·M) reads M of these (bounds.at_bound)
    cap_bounds: tuple[float, float] | None = None
    # the declared clamp a chosen one lies within: its fixed-point grids are the ones the charge was priced on
    # (measures.fixed_point, spread_grid), so the chosen clamp's integer sensitivity is never above the charged one
    grid_bounds: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "type", types.normalize(self.type))
        except ValueError as err:
            raise ValueError(f"column {self.name}: {err}") from None
        if self.auto_bounds and self.bounds is None:
            raise ValueError(f"column {self.name}: bounds = \"auto\" needs its outer limits as `bounds`")
        if self.bounds is not None:
            lo, hi = self.bounds
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise ValueError(f"column {self.name}: bounds must be finite with lo <= hi, got {self.bounds}")
            if not self.numeric:
                raise ValueError(f"column {self.name}: bounds are only for numeric columns")
            if max(abs(lo), abs(hi)) > MAX_ABS_BOUND:
                raise ValueError(f"column {self.name}: bounds must lie within ±{MAX_ABS_BOUND:.0e}, got {self.bounds}")
            if types.grid_span(self.type, lo, hi) is None:  # a clamp to it would move every value off the type's grid
                raise ValueError(f"column {self.name}: bounds {self.bounds} hold no {self.type} value; widen them to "
                                 "include one")
        if self.public_domain is not None:
            try:  # one value per type, as the engine returns it: keys then match (types.canonical)
                domain = tuple(types.canonical(self.type, v) for v in self.public_domain)
            except ValueError as err:
                raise ValueError(f"column {self.name}: public_domain: {err}") from None
            if any(v is None or (isinstance(v, float) and not math.isfinite(v)) for v in domain):
                raise ValueError(f"column {self.name}: public_domain values must be finite and not null")
            if len(set(domain)) != len(domain):
                raise ValueError(f"column {self.name}: public_domain has duplicate values (as {self.type} values)")
            object.__setattr__(self, "public_domain", domain)
        if self.date_bounds is not None:
            if self.kind != "date":
                raise ValueError(f"column {self.name}: date bounds are only for DATE columns")
            first, last = (types.canonical("DATE", v) for v in self.date_bounds)
            if not str(first) <= str(last):
                raise ValueError(f"column {self.name}: bounds must be [first, last] with first <= last")
            object.__setattr__(self, "date_bounds", (first, last))

    @property
    def domain(self) -> tuple[Literal_, ...] | None:
        """The public values of the column as a group key: its `public_domain`, or every day of its declared
        date bounds (the calendar is public; a day outside them is dropped like any value outside a domain).

        Example:
            >>> ColumnSpec("day", "DATE", groupable=True, date_bounds=("2026-01-30", "2026-02-01")).domain
            ('2026-01-30', '2026-01-31', '2026-02-01')
        """
        if self.public_domain is not None or self.date_bounds is None:
            return self.public_domain
        first, last = (dt.date.fromisoformat(d) for d in self.date_bounds)
        days = (last - first).days + 1
        if days > MAX_DOMAIN_DAYS:
            return None
        return tuple((first + dt.timedelta(days=i)).isoformat() for i in range(days))

    @property
    def kind(self) -> Kind:
        return types.kind(self.type)

    @property
    def numeric(self) -> bool:
        return self.kind in ("integer", "float", "decimal")


@dataclass(frozen=True, slots=True)
class UnitHop:
    """One link of a declared path to the privacy unit: this table's `column` is a key of `table`'s `key`
    (proxy/policy/unit_paths.py reads it; the store resolves it when it is built)."""

    column: str
    table: str
    key: str


@dataclass(frozen=True, slots=True)
class TableSchema:
    """A protected table: each row belongs to one privacy unit; each unit's contribution is bounded."""

    name: str
    privacy_unit: str
    columns: tuple[ColumnSpec, ...]
    max_groups: int = 1  # L0: groups one unit may touch in one query
    max_rows: int = 1  # L∞: rows one unit may contribute to one group
    one_row_per_unit: bool = False  # declared; checked against the data when the bounding store is built
    auto_max_rows: bool = False  # max_rows = "auto": each query chooses its bound <= max_rows (auto/bounds.py)
    auto_max_groups: bool = False  # max_groups = "auto": each query chooses its bound <= max_groups (auto/groups.py)
    # the unit reached through keys (`unit_via`): the unit column is then materialised by the store, not in the source
    unit_via: tuple[UnitHop, ...] = ()

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"table {self.name}: duplicate column names")
        if self.privacy_unit not in names:
            raise ValueError(f"table {self.name}: privacy_unit {self.privacy_unit!r} is not a declared column")
        unit = self.column(self.privacy_unit)
        if unit is not None and unit.kind not in ("integer", "decimal", "string", "date"):
            # floats are not identities: -0.0 = 0.0 and NaN = NaN would merge distinct units in the bounding
            raise ValueError(f"table {self.name}: privacy_unit {self.privacy_unit!r} must be an integer, DECIMAL, "
                             f"text or date column, not {unit.type}")
        for bound, value in (("max_groups", self.max_groups), ("max_rows", self.max_rows)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
                raise ValueError(f"table {self.name}: {bound} must be an integer in [1, 10000], got {value!r}")
        if (self.auto_max_rows or self.auto_max_groups) and self.one_row_per_unit:
            raise ValueError(f"table {self.name}: max_rows or max_groups = \"auto\" is meaningless on a table declared "
                             "one_row_per_unit (every unit has one row: there is no bound to choose)")

    def column(self, name: str) -> ColumnSpec | None:
        """The declared column called `name` (case-insensitive), or None."""
        lowered = name.lower()
        return next((c for c in self.columns if c.name.lower() == lowered), None)


@dataclass(frozen=True, slots=True)
class PublicTable:
    """A table declared public (a product catalogue, a calendar): no privacy unit, no bounds; it may only be
    joined to a protected table on one of its `keys`, adding group keys and filters. With `unique`, each key
    value is on at most one row (checked by nobody: a wrong declaration costs utility, never privacy)."""

    name: str
    columns: tuple[ColumnSpec, ...]
    keys: tuple[str, ...]
    unique: bool = False

    def __post_init__(self) -> None:
        names = [c.name.lower() for c in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"public table {self.name}: duplicate column names")
        if not self.keys or any(k.lower() not in names for k in self.keys):
            raise ValueError(f"public table {self.name}: keys must be declared columns, got {self.keys!r}")

    def column(self, name: str) -> ColumnSpec | None:
        lowered = name.lower()
        return next((c for c in self.columns if c.name.lower() == lowered), None)


@dataclass(frozen=True, slots=True)
class Catalog:
    """The protected tables of one dataset, and the qualifiers a query may name them with: a schema in
    `schemas` (`main.visits`), a database in `databases` (`demo.main.visits`), compared case-insensitively."""

    tables: tuple[TableSchema, ...]
    schemas: tuple[str, ...] = ("main",)
    databases: tuple[str, ...] = ()
    public: tuple[PublicTable, ...] = ()  # tables joined to protected ones, never queried alone

    def table(self, name: str) -> TableSchema | None:
        """The protected table called `name` (case-insensitive), or None."""
        lowered = name.lower()
        return next((t for t in self.tables if t.name.lower() == lowered), None)

    def public_table(self, name: str) -> PublicTable | None:
        """The public table called `name` (case-insensitive), or None."""
        lowered = name.lower()
        return next((t for t in self.public if t.name.lower() == lowered), None)
