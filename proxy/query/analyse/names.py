"""Name resolution for one query: the table, its alias, the group keys and the aggregates met so far.

Every rule (group_keys, select_list, aggregates, where) resolves columns through `Names`, so a name is checked
against the catalog in one place and only declared names flow on to the rewrite. `Names` also carries the
reader of conditions (`where.predicate`, passed in by `analyse`): conditions hold computed values and computed
values (CASE WHEN, a boolean key) hold conditions, so the two readers recurse into each other through it,
not through a circle of imports.

Example:
    >>> from sqlglot import exp
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("orders", "customer_id", (ColumnSpec("customer_id", "BIGINT"), ColumnSpec("Region", "VARCHAR")))
    >>> Names(t, "o", Catalog((t,))).column(exp.column("region", table="o")).name
    'Region'
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from proxy.query.analyse.joins import Joined
from proxy.query.analyse.measures import Aggregate
from proxy.query.analyse.refusals import located, unsupported, where
from proxy.query.analyse.resolve import check_qualifiers
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import PolicyError
from proxy.query.expr import Agg, Expr


@dataclass(frozen=True, slots=True)
class Output:
    """One released column: its name and how it is computed from keys and noisy aggregates."""

    name: str
    expr: Expr


class Names:
    """Name resolution for one query: the table, its alias, the keys and the aggregates met so far."""

    def __init__(self, table: TableSchema, alias: str | None, catalog: Catalog,
                 conditions: Callable[[exp.Expr, Names], exp.Expr] | None = None) -> None:
        self.table = table
        self.conditions = conditions
        self.alias = alias
        self.catalog = catalog
        self.keys: tuple[str, ...] = ()
        self.outputs: tuple[Output, ...] = ()
        self.aggregates: list[Aggregate] = []
        self.computed: list = []  # keys.ComputedKey, in GROUP BY order
        self.joined: Joined | None = None  # a JOIN's virtual table: columns resolve through its qualifiers
        self.today: dt.date | None = None  # CURRENT_DATE, fixed at planning (public); None: CURRENT_DATE refused

    def condition(self, node: exp.Expr) -> exp.Expr:
        """`node` read as a row predicate (WHERE's rules), for a condition inside a computed value."""
        if self.conditions is None:
            raise unsupported(node, "a condition here")
        return self.conditions(node, self)

    def key_spec(self, name: str) -> ColumnSpec:
        """The column a group key reads: declared, or a computed key's virtual column."""
        virtual = next((k.spec for k in self.computed if k.spec.name == name), None)
        return virtual if virtual is not None else declared(self.table, name)

    def column(self, node: exp.Column) -> ColumnSpec:
        if not isinstance(node.this, exp.Identifier):
            raise unsupported(node.this, "a column reference")
        check_qualifiers(node, self.catalog)  # main.visits.region: the schema must be this dataset's
        if self.joined is not None:
            return self._joined_column(node, self.joined)
        qualifier = node.table
        if qualifier and qualifier.lower() not in {self.table.name.lower(), (self.alias or "").lower()}:
            raise PolicyError(
                f"unknown table or alias {qualifier!r} in {node.sql()}", construct="COLUMN", column=node.sql()
            )
        spec = self.table.column(node.name)
        if spec is None:
            raise PolicyError(
                f"unknown column {node.name!r} in table {self.table.name}{where(node)}",
                construct="COLUMN", column=node.name,
                hint="columns: " + ", ".join(c.name for c in self.table.columns), **located(node),
            )
        return spec

    def _joined_column(self, node: exp.Column, joined: Joined) -> ColumnSpec:
        if node.table:
            columns = joined.qualifiers.get(node.table.lower())
            if columns is None:
                raise PolicyError(f"unknown table or alias {node.table!r} in {node.sql()}", construct="COLUMN",
                                  column=node.sql(), hint="tables: " + ", ".join(joined.qualifiers))
            name = columns.get(node.name.lower())
        else:
            if joined.unqualified.get(node.name.lower(), "") is None:
                raise PolicyError(f"column {node.name!r} is in both joined tables; qualify it (alias.{node.name})",
                                  construct="COLUMN", column=node.name)
            name = joined.unqualified.get(node.name.lower())
        spec = self.table.column(name) if name is not None else None
        if spec is None:
            raise PolicyError(f"unknown column {node.sql()!r} in the joined tables", construct="COLUMN",
                              column=node.sql(), hint="columns: " + ", ".join(c.name for c in self.table.columns))
        return spec

    def aggregate(self, aggregate: Aggregate) -> Agg:
        if aggregate not in self.aggregates:
            self.aggregates.append(aggregate)
        return Agg(self.aggregates.index(aggregate))


def declared(table: TableSchema, name: str) -> ColumnSpec:
    spec = table.column(name)
    assert spec is not None  # keys are resolved names
    return spec
