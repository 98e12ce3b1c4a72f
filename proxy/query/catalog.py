"""The data policy of one dataset: protected tables, their privacy unit, contribution bounds and columns.

Frozen values only. Every privacy number is validated here, so a Catalog that exists is usable: bounds are
finite with lo <= hi, contribution bounds are positive integers, the privacy unit is a declared column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Kind = Literal["integer", "float", "string", "date", "boolean"]
Mechanism = Literal["laplace", "gaussian"]
Adjacency = Literal["add_remove"]

# DuckDB type name -> the kind our checks reason about (literal types, clamping, summability).
TYPE_KINDS: dict[str, Kind] = {
    "TINYINT": "integer", "SMALLINT": "integer", "INTEGER": "integer", "INT": "integer",
    "BIGINT": "integer", "HUGEINT": "integer", "UTINYINT": "integer", "USMALLINT": "integer",
    "UINTEGER": "integer", "UBIGINT": "integer",
    "FLOAT": "float", "REAL": "float", "DOUBLE": "float", "DECIMAL": "float",
    "VARCHAR": "string", "TEXT": "string", "STRING": "string",
    "DATE": "date", "BOOLEAN": "boolean", "BOOL": "boolean",
}

Literal_ = str | int | float | bool


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """One column of a protected table as the policy declares it."""

    name: str
    type: str
    bounds: tuple[float, float] | None = None  # clamp bounds; required to SUM/AVG the column
    unit_level: bool = False  # constant per privacy unit: grouping on it is disjoint per unit (§3)
    public_domain: tuple[Literal_, ...] | None = None  # every value released, no δ spent on keys
    groupable: bool = False  # may appear in GROUP BY

    def __post_init__(self) -> None:
        if self.type.upper() not in TYPE_KINDS:
            raise ValueError(f"column {self.name}: unsupported type {self.type!r}")
        if self.bounds is not None:
            lo, hi = self.bounds
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise ValueError(f"column {self.name}: bounds must be finite with lo <= hi, got {self.bounds}")
            if self.kind not in ("integer", "float"):
                raise ValueError(f"column {self.name}: bounds are only for numeric columns")
        if self.public_domain is not None and len(set(self.public_domain)) != len(self.public_domain):
            raise ValueError(f"column {self.name}: public_domain has duplicate values")

    @property
    def kind(self) -> Kind:
        return TYPE_KINDS[self.type.upper()]


@dataclass(frozen=True, slots=True)
class TableSchema:
    """A protected table: each row belongs to one privacy unit; each unit's contribution is bounded."""

    name: str
    privacy_unit: str
    columns: tuple[ColumnSpec, ...]
    max_groups: int = 1  # L0: groups one unit may touch in one query
    max_rows: int = 1  # L∞: rows one unit may contribute to one group

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"table {self.name}: duplicate column names")
        if self.privacy_unit not in names:
            raise ValueError(f"table {self.name}: privacy_unit {self.privacy_unit!r} is not a declared column")
        for bound, value in (("max_groups", self.max_groups), ("max_rows", self.max_rows)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
                raise ValueError(f"table {self.name}: {bound} must be an integer in [1, 10000], got {value!r}")

    def column(self, name: str) -> ColumnSpec | None:
        """The declared column called `name` (case-insensitive), or None."""
        lowered = name.lower()
        return next((c for c in self.columns if c.name.lower() == lowered), None)


@dataclass(frozen=True, slots=True)
class Catalog:
    """The protected tables of one dataset."""

    tables: tuple[TableSchema, ...]

    def table(self, name: str) -> TableSchema | None:
        """The protected table called `name` (case-insensitive), or None."""
        lowered = name.lower()
        return next((t for t in self.tables if t.name.lower() == lowered), None)
