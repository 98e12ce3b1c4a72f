"""The scope of a query: which cells of the unit-attribute space it can touch (docs/privacy.md §7, across queries).

A table's *cell space* is the product of its unit-level columns with a finite declared domain (a
`public_domain`, or integer `bounds`), each extended by the values outside it: OTHER for a public domain,
BELOW and ABOVE for integer bounds (so `age < 30` and `age >= 30` stay disjoint), and NULL. Every unit lies in
exactly one cell, because the rewrite evaluates these columns on the unit's *canonical* value, a function of
the unit's own rows (`MIN(col) OVER (PARTITION BY unit)`; in a join, over each table's own rows before the join:
joins.canonical_source), never on a row's value: disjointness is proved from the predicates and the policy, not
assumed from the data.

A query's scope is the set of cells where its WHERE clause can be TRUE. Predicates on other columns
restrict nothing at the unit level (they may be TRUE for some rows of any unit). The evaluation is
three-valued and over-approximates: a cell is in the scope unless the predicate is certainly not TRUE there.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
from collections.abc import Callable, Collection
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
from sqlglot import exp

from accountant.cell_scope import CellScope
from proxy.query import types
from proxy.query.catalog import ColumnSpec, Literal_, TableSchema

MAX_CELLS = 100_000
MAX_AXIS_VALUES = 1_000
_COMPARE: dict[type[exp.Expr], Callable[[object, object], bool]] = {
    exp.EQ: operator.eq, exp.NEQ: operator.ne, exp.GT: operator.gt, exp.GTE: operator.ge,
    exp.LT: operator.lt, exp.LTE: operator.le,
}


@dataclass(frozen=True, slots=True)
class Axis:
    """One unit-level column of the cell space. Its cells are `values`, then the values outside them
    (OTHER; or, for an integer range, BELOW and ABOVE it), then NULL."""

    column: str
    values: tuple[Literal_, ...]
    ordered: bool = False  # `values` is the integer range lo..hi

    @property
    def extras(self) -> tuple[str, ...]:
        return ("<below>", "<above>") if self.ordered else ("<other>",)

    @property
    def size(self) -> int:
        return len(self.values) + len(self.extras) + 1

    def label(self, index: int) -> object:
        if index < len(self.values):
            return self.values[index]
        extra = index - len(self.values)
        return self.extras[extra] if extra < len(self.extras) else None


@dataclass(frozen=True, slots=True)
class CellSpace:
    table: str
    axes: tuple[Axis, ...]
    unit: str = ""  # the privacy unit column: cells are sets of its values
    via: str = ""  # a join's space with an axis of the other table: the join its cells are read through (joins.py)

    @property
    def size(self) -> int:
        return math.prod(a.size for a in self.axes)

    @property
    def fingerprint(self) -> str:
        """Names the space: a charge's cell numbers mean something only under the policy that made them,
        so the ledger treats charges on another fingerprint (a changed domain) as covering every cell. A joined
        space names its join: `plan` read through `users` is not `plan` read through a public table."""
        axes = [[a.column, a.ordered, [[type(v).__name__, str(v)] for v in a.values]] for a in self.axes]
        text = json.dumps([self.table, self.unit, axes, *([self.via] if self.via else [])], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def axis(self, column: str) -> int | None:
        return next((i for i, a in enumerate(self.axes) if a.column == column), None)

    def describe(self, cell: int) -> dict[str, object]:
        """The cell's coordinates by column name ("<other>", "<below>", "<above>", None for the extras).

        Example:
            >>> space = CellSpace("t", (Axis("region", ("N", "S")),))
            >>> [space.describe(c) for c in range(space.size)]
            [{'region': 'N'}, {'region': 'S'}, {'region': '<other>'}, {'region': None}]
            >>> [CellSpace("t", (Axis("age", (1, 2), ordered=True),)).describe(c)["age"] for c in range(5)]
            [1, 2, '<below>', '<above>', None]
        """
        out: dict[str, object] = {}
        for axis in reversed(self.axes):
            cell, index = divmod(cell, axis.size)
            out[axis.column] = axis.label(index)
        return dict(reversed(list(out.items())))


@dataclass(frozen=True, slots=True)
class Scope:
    """The cells of `space` a query can touch; `cells` is None when it can touch every cell."""

    space: CellSpace
    cells: frozenset[int] | None

    @property
    def table(self) -> str:
        return self.space.table

    def charged(self) -> CellScope | None:
        """The scope as the ledger keeps it with the charge (None: every privacy unit)."""
        if self.cells is None:
            return None
        return CellScope.of(self.table, self.space.fingerprint, self.space.size, sorted(self.cells))


def cell_space(table: TableSchema, via: str = "", foreign: Collection[str] = ()) -> CellSpace:
    """The table's cell space: unit-level columns with finite domains, the largest dropped until it fits. For a
    join's virtual table, `foreign` are the other table's columns and `via` names the join: a space with an axis
    among them is the join's own (it carries `via`); without one it is the base table's space.

    Example:
        >>> from proxy.query.catalog import ColumnSpec, TableSchema
        >>> t = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"),
        ...     ColumnSpec("region", "VARCHAR", unit_level=True, public_domain=("N", "S")),
        ...     ColumnSpec("age", "INTEGER", unit_level=True, bounds=(18, 20))))
        >>> space = cell_space(t)
        >>> [a.column for a in space.axes], space.size
        (['age', 'region'], 24)
    """
    axes = sorted((a for c in table.columns if (a := _axis(c, table)) is not None), key=lambda a: a.column)
    while axes and math.prod(a.size for a in axes) > MAX_CELLS:
        axes.remove(max(axes, key=lambda a: a.size))
    joined = via if any(a.column in foreign for a in axes) else ""
    return CellSpace(table.name, tuple(axes), table.privacy_unit, joined)


def _axis(column: ColumnSpec, table: TableSchema) -> Axis | None:
    if not column.unit_level or column.name == table.privacy_unit:
        return None
    if column.public_domain is not None and len(column.public_domain) <= MAX_AXIS_VALUES:
        return Axis(column.name, tuple(column.public_domain))
    if column.kind == "integer" and column.bounds is not None:
        lo, hi = math.ceil(column.bounds[0]), math.floor(column.bounds[1])
        if 0 <= hi - lo < MAX_AXIS_VALUES:
            return Axis(column.name, tuple(range(lo, hi + 1)), ordered=True)
    return None


def scope(space: CellSpace, where: exp.Expr | None) -> Scope:
    """The cells where `where` (rebuilt over declared columns, see analyse/analysis.py) can be TRUE.

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
        return Scope(space, None)
    true, _ = _truth(where, space)
    if bool(true.all()):
        return Scope(space, None)
    return Scope(space, frozenset(int(i) for i in np.flatnonzero(true)))


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
    column = _column_of(node.this)
    axis = space.axis(column.name) if column is not None else None
    if axis is None:
        return every, every  # a row-level column, or one outside the cell space: no unit-level restriction
    per = _coordinates(node, space.axes[axis])
    if per is None:
        return every, every
    return _broadcast(space, axis, [t for t, _ in per]), _broadcast(space, axis, [f for _, f in per])


def _column_of(node: exp.Expr | None) -> exp.Column | None:
    """The column an atom compares: types.column wraps text in COLLATE "binary" and a REAL in a CAST."""
    while isinstance(node, exp.Collate | exp.Cast):
        node = node.this
    return node if isinstance(node, exp.Column) else None


Truth = tuple[bool, bool]  # (may be TRUE, may be FALSE)
_NULL: Truth = (False, False)  # a comparison with NULL is NULL


def _coordinates(node: exp.Expr, axis: Axis) -> list[Truth] | None:
    """The atom's truth per coordinate of the axis (values, extras, NULL), for the atoms analyse/analysis.py rebuilds
    (column on the left, literals on the right); None when it restricts nothing (LIKE and others)."""
    if isinstance(node, exp.Is):  # IS NULL: the only IS the analysis rebuilds
        return [(False, True)] * (axis.size - 1) + [(True, False)]
    literals = _literals(node)
    if literals is None:
        return None
    families = {_family(v) for v in (*axis.values, *literals)}
    if len(families) != 1:
        return None  # types.py rebuilds every literal in its column's type: a mismatch is not ours; restrict nothing
    test = _test(node, literals)
    if test is None:
        return None
    inside = [_truth_of(test, v) for v in axis.values]
    if axis.ordered:
        low, high = int(axis.values[0]), int(axis.values[-1])  # type: ignore[call-overload]
        outside = [_on_range(node, literals, -math.inf, low - 1), _on_range(node, literals, high + 1, math.inf)]
    else:
        # an undeclared value equals a literal only if that literal is itself undeclared
        equal_only = isinstance(node, exp.EQ | exp.In)
        outside = [(not equal_only or any(x not in axis.values for x in literals), True)]
    return [*inside, *outside, _NULL]


def _family(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float | Decimal):
        return "number"
    return type(value).__name__


def _literals(node: exp.Expr) -> list[object] | None:
    if isinstance(node, exp.In):
        found = [types.read_literal(e) for e in node.expressions]
    elif isinstance(node, exp.Between):
        found = [types.read_literal(node.args["low"]), types.read_literal(node.args["high"])]
    elif type(node) in _COMPARE:
        found = [types.read_literal(node.expression)]
    else:
        return None
    return None if types.UNKNOWN in found else found


def _test(node: exp.Expr, literals: list[object]) -> Callable[[object], bool] | None:
    if isinstance(node, exp.In):
        return lambda v: any(operator.eq(v, x) for x in literals)
    if isinstance(node, exp.Between):
        low, high = literals
        return lambda v: operator.ge(v, low) and operator.le(v, high)
    compare = _COMPARE.get(type(node))
    return None if compare is None else (lambda v: compare(v, literals[0]))


def _truth_of(test: Callable[[object], bool], value: object) -> Truth:
    try:
        holds = bool(test(value))
    except TypeError:
        return True, True  # incomparable types: it may go either way
    return holds, not holds


def _on_range(node: exp.Expr, literals: list[object], low: float, high: float) -> Truth:
    """Truth of the atom for some integer in [low, high] (an infinite end stands for BELOW or ABOVE)."""
    if not all(isinstance(x, int | Decimal) and not isinstance(x, bool) for x in literals):
        return True, True
    numbers: list[int | Decimal] = literals  # type: ignore[assignment]  # exact: compared with ints and ±inf
    if isinstance(node, exp.In | exp.EQ):
        return any(low <= x <= high for x in numbers), True
    if isinstance(node, exp.NEQ):
        return True, low <= numbers[0] <= high
    if isinstance(node, exp.Between):
        lo, hi = numbers
        return low <= hi and high >= lo, low < lo or high > hi
    c = numbers[0]
    return {
        exp.LT: (low < c, high >= c), exp.LTE: (low <= c, high > c),
        exp.GT: (high > c, low <= c), exp.GTE: (high >= c, low < c),
    }[type(node)]  # type: ignore[index]


def _broadcast(space: CellSpace, axis: int, per_value: list[bool]) -> np.ndarray:
    shape = [a.size for a in space.axes]
    view = np.array(per_value, dtype=bool).reshape([-1 if i == axis else 1 for i in range(len(shape))])
    return np.broadcast_to(view, shape).reshape(-1).copy()
