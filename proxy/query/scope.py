"""The scope of a query: which cells of the unit-attribute space it can touch (DESIGN.md §3, across queries).

A table's *cell space* is the product of its unit-level columns with a finite declared domain (a
`public_domain`, or integer `bounds`), each extended by two cells: OTHER (a value outside the domain) and
NULL. Every unit lies in exactly one cell, because the rewrite evaluates these columns on the unit's
*canonical* value, a function of the unit's own rows (`MIN(col) OVER (PARTITION BY unit)`), never on a
row's value: disjointness is proved from the predicates and the policy, not assumed from the data.

A query's scope is the set of cells where its WHERE clause can be TRUE. Predicates on other columns
restrict nothing at the unit level (they may be TRUE for some rows of any unit). The evaluation is
three-valued and over-approximates: a cell is in the scope unless the predicate is certainly not TRUE there.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sqlglot import exp

from proxy.query.catalog import ColumnSpec, Literal_, TableSchema

MAX_CELLS = 100_000
MAX_AXIS_VALUES = 1_000
_COMPARE: dict[type[exp.Expr], Callable[[object, object], bool]] = {
    exp.EQ: operator.eq, exp.NEQ: operator.ne, exp.GT: operator.gt, exp.GTE: operator.ge,
    exp.LT: operator.lt, exp.LTE: operator.le,
}


@dataclass(frozen=True, slots=True)
class Axis:
    """One unit-level column of the cell space; its cells are `values`, then OTHER, then NULL."""

    column: str
    values: tuple[Literal_, ...]

    @property
    def size(self) -> int:
        return len(self.values) + 2


@dataclass(frozen=True, slots=True)
class CellSpace:
    table: str
    axes: tuple[Axis, ...]

    @property
    def size(self) -> int:
        return math.prod(a.size for a in self.axes)

    def axis(self, column: str) -> int | None:
        return next((i for i, a in enumerate(self.axes) if a.column == column), None)

    def describe(self, cell: int) -> dict[str, object]:
        """The cell's coordinates by column name ("<other>" and None for the two extra cells).

        Example:
            >>> space = CellSpace("t", (Axis("region", ("N", "S")),))
            >>> [space.describe(c) for c in range(space.size)]
            [{'region': 'N'}, {'region': 'S'}, {'region': '<other>'}, {'region': None}]
        """
        out: dict[str, object] = {}
        for axis in reversed(self.axes):
            cell, index = divmod(cell, axis.size)
            out[axis.column] = axis.values[index] if index < len(axis.values) else (
                "<other>" if index == len(axis.values) else None
            )
        return dict(reversed(list(out.items())))


@dataclass(frozen=True, slots=True)
class Scope:
    """The cells of `table` a query can touch; `cells` is None when it can touch every cell."""

    table: str
    cells: frozenset[int] | None

    def covers(self, table: str, cell: int) -> bool:
        # A charge on another table covers every cell: its units' cells are computed from other rows.
        return self.table != table or self.cells is None or cell in self.cells


def cell_space(table: TableSchema) -> CellSpace:
    """The table's cell space: unit-level columns with finite domains, the largest dropped until it fits.

    Example:
        >>> from proxy.query.catalog import ColumnSpec, TableSchema
        >>> t = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"),
        ...     ColumnSpec("region", "VARCHAR", unit_level=True, public_domain=("N", "S")),
        ...     ColumnSpec("age", "INTEGER", unit_level=True, bounds=(18, 20))))
        >>> space = cell_space(t)
        >>> [a.column for a in space.axes], space.size
        (['age', 'region'], 20)
    """
    axes = sorted((a for c in table.columns if (a := _axis(c, table)) is not None), key=lambda a: a.column)
    while axes and math.prod(a.size for a in axes) > MAX_CELLS:
        axes.remove(max(axes, key=lambda a: a.size))
    return CellSpace(table.name, tuple(axes))


def _axis(column: ColumnSpec, table: TableSchema) -> Axis | None:
    if not column.unit_level or column.name == table.privacy_unit:
        return None
    if column.public_domain is not None and len(column.public_domain) <= MAX_AXIS_VALUES:
        return Axis(column.name, tuple(column.public_domain))
    if column.kind == "integer" and column.bounds is not None:
        lo, hi = math.ceil(column.bounds[0]), math.floor(column.bounds[1])
        if 0 <= hi - lo < MAX_AXIS_VALUES:
            return Axis(column.name, tuple(range(lo, hi + 1)))
    return None


def scope(space: CellSpace, where: exp.Expr | None) -> Scope:
    """The cells where `where` (rebuilt over declared columns, see analyse.py) can be TRUE.

    Example:
        >>> from sqlglot import parse_one
        >>> space = CellSpace("t", (Axis("region", ("N", "S", "E")),))
        >>> sorted(scope(space, parse_one("region IN ('N', 'S') AND amount > 3")).cells)
        [0, 1]
        >>> sorted(scope(space, parse_one("NOT region = 'N'")).cells)  # OTHER may differ from 'N'; NULL never
        [1, 2, 3]
        >>> scope(space, parse_one("amount > 3")).cells is None
        True
    """
    if where is None or not space.axes:
        return Scope(space.table, None)
    true, _ = _truth(where, space)
    if bool(true.all()):
        return Scope(space.table, None)
    return Scope(space.table, frozenset(int(i) for i in np.flatnonzero(true)))


def canonical_columns(space: CellSpace, where: exp.Expr | None, keys: tuple[str, ...]) -> tuple[str, ...]:
    """The axis columns a query reads: the rewrite evaluates them on each unit's canonical value."""
    used = {c.name for c in where.find_all(exp.Column)} if where is not None else set()
    used |= set(keys)
    return tuple(a.column for a in space.axes if a.column in used)


def _truth(node: exp.Expr, space: CellSpace) -> tuple[np.ndarray, np.ndarray]:
    """(may be TRUE, may be FALSE) per cell; a cell with neither is certainly NULL."""
    every = np.ones(space.size, dtype=bool)
    match node:
        case exp.Paren():
            return _truth(node.this, space)
        case exp.Not():
            true, false = _truth(node.this, space)
            return false, true
        case exp.And():
            t1, f1 = _truth(node.this, space)
            t2, f2 = _truth(node.expression, space)
            return t1 & t2, f1 | f2
        case exp.Or():
            t1, f1 = _truth(node.this, space)
            t2, f2 = _truth(node.expression, space)
            return t1 | t2, f1 & f2
        case exp.Boolean():
            return (every, ~every) if node.this else (~every, every)
    column = node.this if isinstance(node.this, exp.Column) else None
    axis = space.axis(column.name) if column is not None else None
    if axis is None:
        return every, every  # a row-level column, or one outside the cell space: no unit-level restriction
    values = space.axes[axis].values
    atom = _atom(node, values)
    if atom is None:
        return every, every
    test, other_may_be_true = atom
    # per coordinate of this axis: (may be TRUE, may be FALSE); NULL compares as NULL
    true = [bool(test(v)) for v in values] + [other_may_be_true, False]
    false = [not t for t in true[: len(values)]] + [True, False]
    if isinstance(node, exp.Is):
        true, false = [False] * (len(values) + 1) + [True], [True] * (len(values) + 1) + [False]
    return _broadcast(space, axis, true), _broadcast(space, axis, false)


def _atom(node: exp.Expr, domain: tuple[Literal_, ...]) -> tuple[Callable[[object], bool], bool] | None:
    """(test of one declared value, may it be TRUE on a value outside the domain) for the atoms analyse.py
    rebuilds (column on the left, literals on the right); None when the atom restricts nothing."""
    if isinstance(node, exp.Is):
        return (lambda _: False), False
    if isinstance(node, exp.EQ | exp.In):
        literals = [_value(e) for e in (node.expressions if isinstance(node, exp.In) else [node.expression])]
        if _UNKNOWN in literals:
            return None
        # an undeclared value equals a literal only if that literal is itself undeclared
        other = any(x not in domain for x in literals)
        return (lambda v: any(_safe(operator.eq, v, x) for x in literals)), other
    if type(node) in _COMPARE:
        compare, literal = _COMPARE[type(node)], _value(node.expression)
        return None if literal is _UNKNOWN else ((lambda v: _safe(compare, v, literal)), True)
    if isinstance(node, exp.Between):
        low, high = _value(node.args["low"]), _value(node.args["high"])
        if _UNKNOWN in (low, high):
            return None
        return (lambda v: _safe(operator.ge, v, low) and _safe(operator.le, v, high)), True
    return None  # LIKE and others: unknown, so no restriction


_UNKNOWN = object()


def _value(node: exp.Expr) -> object:
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        number = float(node.this)
        return int(number) if number.is_integer() else number
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    return _UNKNOWN


def _safe(compare: Callable[[object, object], bool], left: object, right: object) -> bool:
    try:
        return bool(compare(left, right))
    except TypeError:
        return True  # incomparable types: assume it may hold


def _broadcast(space: CellSpace, axis: int, per_value: list[bool]) -> np.ndarray:
    shape = [a.size for a in space.axes]
    view = np.array(per_value, dtype=bool).reshape([-1 if i == axis else 1 for i in range(len(shape))])
    return np.broadcast_to(view, shape).reshape(-1).copy()
