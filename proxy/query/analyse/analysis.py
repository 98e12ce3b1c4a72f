"""Analyse a parsed SELECT against the catalog: a positive allow-list by position, then an Analysis.

The allow-list is positive: every node is checked against what may stand in its position, and anything else
is rejected with its name. Each position is one rule module: group_keys (GROUP BY), select_list (outputs,
HAVING, ORDER BY, LIMIT), aggregates (aggregate calls), where (row predicates); names resolves columns. The
analysis keeps only resolved, declared names and rebuilt literals, never the analyst's nodes, so the SQL that
runs is generated from checked values alone (docs/architecture.md, the security boundary).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import math
from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from proxy.query.analyse.cell_space import Scope, canonical_columns, cell_space
from proxy.query.analyse.cell_space import scope as scope_of
from proxy.query.analyse.group_keys import group_keys
from proxy.query.analyse.joins import Joined, canonical_links, join
from proxy.query.analyse.measures import Aggregate, Measure, measures_for
from proxy.query.analyse.names import Names, Output, declared
from proxy.query.analyse.refusals import AGGREGATE_HINT, unsupported_clause
from proxy.query.analyse.resolve import resolve_table
from proxy.query.analyse.select_list import condition, limit, order, output
from proxy.query.analyse.where import predicate
from proxy.query.catalog import Catalog, Literal_, TableSchema
from proxy.query.computed.keys import ComputedKey
from proxy.query.computed.reach import reachable_computed, reachable_plain
from proxy.query.errors import NoReachableGroup, PolicyError, UnsupportedQuery
from proxy.query.expr import Expr

__all__ = ["MAX_PUBLIC_CELLS", "Analysis", "Output", "Partitions", "analyse", "public_cells"]

MAX_PUBLIC_CELLS = 100_000

Partitions = Literal["none", "public", "private"]

_SELECT_ARGS = frozenset({"expressions", "from_", "joins", "where", "group", "having", "order", "limit"})


@dataclass(frozen=True, slots=True)
class Analysis:
    """What a query asks for, resolved against the policy; everything the price and rewrite steps need."""

    table: TableSchema
    keys: tuple[str, ...]  # declared names of the group key columns
    aggregates: tuple[Aggregate, ...]
    measures: tuple[Measure, ...]  # the noisy integer quantities computed in DuckDB
    outputs: tuple[Output, ...]
    where: exp.Expr | None  # rebuilt from declared columns and checked literals
    having: Expr | None
    order: tuple[tuple[Expr, bool], ...]  # (expression, descending)
    limit: int | None
    max_groups: int  # the L0 bound the rewrite enforces
    partitions: Partitions
    domains: tuple[tuple[Literal_, ...], ...]  # per key, when partitions == "public"
    scope: Scope  # the cells of the unit-attribute space the query can touch
    canonical: tuple[str, ...] = ()  # unit-level columns read as each unit's canonical value
    computed: tuple[tuple[str, exp.Expr], ...] = ()  # computed keys: virtual column of `table`, its SQL
    # a JOIN's virtual table (joins.py), or a per-unit query (per_unit/outer.py); None: the protected table itself
    source: exp.Expr | None = None
    # the JOIN `source` computes: what its canonical values are read over (joins.py); `source` already names it
    join: Joined | None = dataclasses.field(default=None, compare=False)

    @property
    def disjoint(self) -> bool:
        """Every unit reaches at most one group, so groups compose in parallel (docs/privacy.md §4)."""
        return self.max_groups == 1


def analyse(select: exp.Select, catalog: Catalog, *, canonical_units: bool = False,
            today: dt.date | None = None) -> Analysis:
    """Check `select` against the allow-list and the policy, and describe it.

    With `canonical_units`, a query whose scope leaves some cell out reads the cell-space columns as each
    unit's canonical value (see analyse/cell_space.py): needed only where charges are accounted per cell, and it costs a
    window over the table, so it is off by default and never used for a query that reaches every cell.
    `today` is what CURRENT_DATE stands for (the planner fixes it; None refuses CURRENT_DATE).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("orders", "customer_id", (ColumnSpec("customer_id", "BIGINT"),
        ...     ColumnSpec("region", "VARCHAR", unit_level=True, groupable=True)), max_groups=3)
        >>> a = analyse(parse("SELECT region, COUNT(*) FROM orders GROUP BY region"), Catalog((t,)))
        >>> a.keys, a.max_groups, a.partitions
        (('region',), 1, 'private')
    """
    for name, value in select.args.items():
        if name not in _SELECT_ARGS and value:
            raise unsupported_clause(name, value)
    joined = join(select, catalog) if select.args.get("joins") else None
    table, alias = (joined.table, None) if joined is not None else resolve_table(select, catalog)
    names = Names(table, alias, catalog, conditions=predicate)
    names.joined = joined
    names.today = today
    keys = group_keys(select, names)
    names.keys = keys
    outputs = tuple(output(node, names) for node in select.expressions)
    if not outputs:
        raise UnsupportedQuery("select at least one column", construct="SELECT")
    names.outputs = outputs
    having = select.args.get("having")
    having_expr = condition(having.this, names, "HAVING") if having else None
    ordering = order(select.args.get("order"), names)
    row_cap = limit(select.args.get("limit"))
    if not names.aggregates:
        raise PolicyError(
            "the query has no aggregate; add COUNT(*), SUM(col) or AVG(col)",
            construct="SELECT", hint=AGGREGATE_HINT,
        )
    where = select.args.get("where")
    where_expr = predicate(where.this, names, subqueries=True) if where else None

    # Computed keys are virtual columns of the analysed table (computed/keys.py); the rewrite computes them.
    table = dataclasses.replace(table, columns=table.columns + tuple(k.spec for k in names.computed))
    all_unit_level = all(declared(table, k).unit_level for k in keys)
    # One group per unit ⇒ parallel composition (§3). Unit-level keys are constant per unit by declaration;
    # the rewrite still enforces L0 = 1 for them, so a wrong declaration costs utility, never privacy.
    max_groups = 1 if all_unit_level else table.max_groups
    domains = reachable_domains(table, keys, names.computed, where_expr)
    partitions: Partitions
    if not keys:
        partitions = "none"
    elif all(d is not None for d in domains) and math.prod(len(d) for d in domains if d) <= MAX_PUBLIC_CELLS:
        partitions = "public"
    else:
        partitions = "private"
    public_domains = tuple(d for d in domains if d is not None) if partitions == "public" else ()
    aggregates = tuple(names.aggregates)
    # the declared table: computed keys are no unit attributes of their own; a join's space names the join when
    # the other table gives it an axis (its cells are read through that join: joins.py)
    space = cell_space(names.table) if joined is None else cell_space(names.table, joined.via, joined.foreign)
    reach = scope_of(space, where_expr)
    unreached = _unreached(keys, domains, names.computed) if partitions == "public" else None
    if unreached is not None and reach.cells != frozenset():  # an empty scope is refused as such (planner.py)
        raise unreached  # public cells the WHERE cannot reach: noise alone, refused before any charge
    read_keys = tuple(k for k in keys if names.table.column(k) is not None) + tuple(
        c for key in names.computed for c in sorted(key.columns))
    canonical = canonical_columns(space, where_expr, read_keys) if canonical_units and reach.cells is not None else ()
    if joined is not None:
        # a public column's canonical value is its MIN over the unit's joined rows: with the protected column its
        # chain starts from canonical, those rows all meet the public rows of one key at each link (chain.py)
        canonical = canonical_links(joined, canonical)
    return Analysis(
        table=table, keys=keys, aggregates=aggregates, measures=measures_for(aggregates, table),
        outputs=outputs, where=where_expr, having=having_expr, order=ordering, limit=row_cap,
        max_groups=max_groups, partitions=partitions, domains=public_domains,
        scope=reach,
        canonical=canonical,
        computed=tuple((k.spec.name, k.sql) for k in names.computed),
        source=None if joined is None else joined.source, join=joined,
    )


def reachable_domains(table: TableSchema, keys: tuple[str, ...], computed: list[ComputedKey],
                      where: exp.Expr | None) -> tuple[tuple[Literal_, ...] | None, ...]:
    """Each key's public domain cut to the values the WHERE can reach (reach.py), in declared order; None for
    a key without one."""
    by_name = {k.spec.name: k for k in computed}
    domains: list[tuple[Literal_, ...] | None] = []
    for key in keys:
        spec = declared(table, key)
        full = spec.domain
        if full is None or where is None:
            domains.append(full)
            continue
        virtual = by_name.get(spec.name)
        if virtual is None:
            reach = reachable_plain(where, spec)
        else:
            sources = [c for name in sorted(virtual.columns) if (c := table.column(name)) is not None]
            reach = full if len(sources) != 1 else reachable_computed(where, virtual.sql, spec.type, full, sources[0])
        domains.append(reach)
    return tuple(domains)


def _unreached(keys: tuple[str, ...], domains: tuple[tuple[Literal_, ...] | None, ...],
               computed: list[ComputedKey]) -> NoReachableGroup | None:
    texts = {k.spec.name: k.text for k in computed}
    empty = next((k for k, d in zip(keys, domains, strict=True) if d is not None and not d), None)
    if empty is None:
        return None
    shown = texts.get(empty, empty)
    return NoReachableGroup(
        f"the WHERE clause reaches no value of the public domain of the group key {shown!r}: every group would be "
        "noise alone", construct="GROUP BY", column=shown,
        hint="check the WHERE against the key's declared values, or drop the key from GROUP BY",
    )


def public_cells(analysis: Analysis) -> tuple[tuple[Literal_, ...], ...]:
    """Every cell of a public-domain GROUP BY, in domain order."""
    return tuple(itertools.product(*analysis.domains))

