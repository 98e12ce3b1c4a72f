"""Computed group keys: `GROUP BY date_trunc('month', day)`, `CAST(FLOOR(age / 10) * 10 AS INTEGER)`,
`CASE WHEN … THEN 'a' ELSE 'b' END`, `amount > 100`.

Each becomes a virtual column `__key<i>` of the analysed table: its total SQL (computed/values.py), its type, and
what the policy lets us say about it:
- **unit-level** when every column it reads is unit-level: a function of values constant per unit is constant
  per unit, so grouping on it is disjoint per unit (docs/privacy.md §4; the rewrite still enforces L0 = 1);
- **public domain** when its values are known from the policy alone: the literals of a CASE, TRUE and FALSE
  of a condition, or its values over its columns' declared finite domains (computed/domains.py); otherwise its
  groups are chosen by private partition selection.
A key may read only groupable columns and never the privacy unit (a key over the unit is one group per
person), except a key whose values are literals of the query (CASE, a condition): those can release nothing
but counts of public labels.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("v", "uid", (ColumnSpec("uid", "BIGINT"),
    ...     ColumnSpec("age", "INTEGER", unit_level=True, groupable=True, bounds=(18, 90))))
    >>> key = computed_key(parse_one("CAST(FLOOR(age / 10) * 10 AS INTEGER)"), Names(t, None, Catalog((t,))), 0)
    >>> key.spec.name, key.spec.type, key.spec.unit_level, key.spec.public_domain
    ('__key0', 'INTEGER', True, (10, 20, 30, 40, 50, 60, 70, 80, 90))
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from proxy.query.analyse.names import Names
from proxy.query.analyse.refusals import located, where
from proxy.query.catalog import ColumnSpec
from proxy.query.computed.domains import MAX_VALUES, binds, domain
from proxy.query.computed.values import Scalar, scalar, total
from proxy.query.errors import PolicyError, QueryError, UnsupportedQuery

PREFIX = "__key"
_CONDITIONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.And, exp.Or, exp.Not, exp.In, exp.Between,
               exp.Is, exp.Like, exp.ILike)


@dataclass(frozen=True, slots=True)
class ComputedKey:
    spec: ColumnSpec  # the virtual column: name, type, unit_level, public_domain
    sql: exp.Expr  # total SQL over the table's declared columns
    columns: frozenset[str]  # the declared columns it reads

    @property
    def text(self) -> str:
        return self.sql.sql(dialect="duckdb")


def computed_key(node: exp.Expr, names: Names, index: int) -> ComputedKey:
    """The virtual column for GROUP BY `node` (any expression that is not a plain column)."""
    value = _value(node, names)
    table = names.table
    if table.privacy_unit in value.columns:
        raise PolicyError(
            f"a group key may not read the privacy unit {table.privacy_unit!r} ({node.sql()}{where(node)}): each "
            "group could be one person", construct="GROUP BY", column=table.privacy_unit, **located(node),
        )
    if not value.columns:
        raise UnsupportedQuery(f"GROUP BY {node.sql()} is a constant; name a column (or its position, GROUP BY 1)",
                               construct="GROUP BY")
    specs = tuple(s for c in sorted(value.columns) if (s := table.column(c)) is not None)
    closed = [s.name for s in specs if not s.groupable]
    if closed and value.choices is None:
        raise PolicyError(
            f"column {closed[0]!r} may not be grouped on (policy: groupable = false), not even computed",
            construct="GROUP BY", column=closed[0],
            hint="group by CASE WHEN <condition> THEN <label> … END to bucket it into labels",
        )
    sql = total(value)
    refused = binds(sql, specs)
    if refused is not None:
        raise UnsupportedQuery(f"DuckDB cannot compute {node.sql()}: {refused}", construct="GROUP BY", **located(node))
    values = value.choices if value.choices is not None else domain(sql, value.type, specs)
    if values is not None and (not values or len(values) > MAX_VALUES):
        values = None
    name = f"{PREFIX}{index}"
    if table.column(name) is not None:
        raise PolicyError(f"the table declares a column {name!r}, a name computed keys need", construct="GROUP BY")
    spec = ColumnSpec(name, value.type, unit_level=all(s.unit_level for s in specs), public_domain=values,
                      groupable=True)
    return ComputedKey(spec, sql, value.columns)


def match(node: exp.Expr, names: Names) -> str | None:
    """The name of the computed key `node` computes (the same expression as in GROUP BY), or None."""
    keys: list[ComputedKey] = names.computed
    if not keys or isinstance(node, exp.Column | exp.Literal | exp.AggFunc) or node.find(exp.AggFunc):
        return None
    try:
        text = total(_value(node, names)).sql(dialect="duckdb")
    except QueryError:
        return None
    return next((k.spec.name for k in keys if k.text == text), None)


def _value(node: exp.Expr, names: Names) -> Scalar:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, _CONDITIONS):
        condition = names.condition(node)
        columns = frozenset(names.column(c).name for c in node.find_all(exp.Column))
        return Scalar(condition, "BOOLEAN", columns, (False, True))
    return scalar(node, names)
