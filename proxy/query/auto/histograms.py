"""The selection histograms of a query with automatic bounds as engine SQL (proxy/query/auto/bounds.py): one
query per histogram, each returning (__a, __b, __n), combined into one engine call (`selection`)."""

from __future__ import annotations

import dataclasses
import functools

from sqlglot import exp

from proxy.query.analyse.analysis import Analysis
from proxy.query.auto import bounds as auto
from proxy.query.auto import clamp, groups, total
from proxy.query.auto import rows as auto_rows
from proxy.query.rewrite.cells import store_source
from proxy.query.rewrite.on_store import uses_rank_filter
from proxy.query.rewrite.per_query import source_table, with_computed
from proxy.query.rewrite.render import Target, render


def slots(chooser: auto.AutoBounds) -> tuple[int, ...]:
    """Each part's histogram (index of its `__part`): a clamp's lower and upper bound read one histogram.

    Example:
        >>> from accountant.events import ExponentialEvent
        >>> e = ExponentialEvent(1.0, 1.0)
        >>> slots(auto.AutoBounds((auto.AutoPart("max_groups", None, 8, 0.99, 1, e),
        ...     auto.AutoPart("lower", "x", -5, 0.99, 8, e), auto.AutoPart("upper", "x", 50, 0.99, 8, e))))
        (0, 1, 1)
    """
    seen: dict[tuple[str, str | None], int] = {}
    return tuple(seen.setdefault((p.bound if p.column is None or p.bound == "total" else "clamp", p.column), len(seen))
                 for p in chooser.parts)


SHARED_CELLS = "__sel_cells"


def selection(analysis: Analysis, chooser: auto.AutoBounds, store: bool, target: Target, ranked: bool = True,
              share: bool = True) -> str:
    """Every histogram (`histograms`) in one query, each row tagged by its `__part`.

    Where both the rows per cell and the groups per unit are read per query (not from the store's ranks), both
    come from the same (unit, group) cells under the WHERE: one CTE, `__sel_cells`, grouped once instead of
    twice (category × day BETWEEN at 10M: 240 -> 170 ms). The same rows either way (`share=False` groups them
    once per histogram: tests/query/test_auto_groups_clamp.py compares the two).

    The text is a function of the analysis (the query resolved against the policy), which bounds are chosen
    (each part's bound and column, not its ε or limit) and the arguments: it is built once per such query and
    kept (`_remembered`, the last 256), so a repeated query shape does not rebuild it (0.5-4 ms of Python per
    query, bench/README.md). The store then reads the histograms once per store and text (store/duckdb_store.py).

    Example:
        >>> from accountant.events import ExponentialEvent
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> from proxy.query.rewrite.render import DUCKDB
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True)))
        >>> a = analyse(parse("SELECT g, COUNT(*) FROM t GROUP BY g"), Catalog((t,)))
        >>> def rows_at(epsilon):
        ...     return auto.AutoBounds((auto.AutoPart("max_rows", None, 50, 0.99, 1, ExponentialEvent(1.0, epsilon)),))
        >>> selection(a, rows_at(1.0), True, DUCKDB) == selection(a, rows_at(2.0), True, DUCKDB)
        True
    """
    return _remembered(_Asked(analysis, tuple((p.bound, p.column) for p in chooser.parts), store, target, ranked,
                              share, chooser))


@dataclasses.dataclass(frozen=True, slots=True)
class _Asked:
    """What the selection's text reads, as a memo key; the chooser rides along (its ε, limits and quantiles
    never reach the text) for the one call that builds it."""

    analysis: Analysis
    shape: tuple[tuple[str, str | None], ...]  # each part's (bound, column), in order
    store: bool
    target: Target
    ranked: bool
    share: bool
    chooser: auto.AutoBounds = dataclasses.field(compare=False, hash=False)


@functools.lru_cache(maxsize=256)  # bounded: a process's memory does not grow with the queries it has seen
def _remembered(asked: _Asked) -> str:
    parts, cells = histograms(asked.analysis, asked.chooser, asked.store, asked.target, asked.ranked, asked.share)
    union = " UNION ALL ".join(f"SELECT {i} AS __part, __a, __b, __n FROM ({sql}) AS __p{i}"
                               for i, sql in enumerate(parts))
    return union if cells is None else f"WITH {SHARED_CELLS} AS ({cells}) {union}"


def standalone(analysis: Analysis, chooser: auto.AutoBounds, store: bool, target: Target,
               ranked: bool = True) -> tuple[str, ...]:
    """Each histogram as a query of its own (the shared cells as its own WITH): what `selection` runs, part by
    part, for tests that read each histogram on neighbouring datasets."""
    parts, cells = histograms(analysis, chooser, store, target, ranked)
    return parts if cells is None else tuple(f"WITH {SHARED_CELLS} AS ({cells}) {sql}" for sql in parts)


def histograms(analysis: Analysis, chooser: auto.AutoBounds, store: bool, target: Target,
               ranked: bool = True, share: bool = True) -> tuple[tuple[str, ...], str | None]:
    """One histogram query per selection (a clamp's lower and upper bound share one), each returning
    (__a, __b, __n): over the bounding store (its stored ranks where its rank filter serves the query, else its
    table), or over the source as the per-query rewrite reads it, rendered for `target`. `ranked`: the plan
    reads the store's ranks at all (`ranks_serve`: not a join whose keys or rows are the other table's). With
    them, the cells both the rows and the groups histograms read (`SHARED_CELLS`), or None."""
    # what the query reads: the store's table, or a join's or computed keys' virtual table (over the store)
    source = store_source(analysis) if store else with_computed(analysis, source_table(analysis))
    served = store and ranked and uses_rank_filter(analysis)

    # the rows and the groups histograms read the same cells where neither comes from the store's ranks
    # (on DuckDB: render.py checks a Spark query's tables against the declared ones, which a CTE's name is not)
    shared = (share and not served and target.dialect == "duckdb" and chooser.part("max_rows") is not None
              and chooser.part("max_groups") is not None)
    cells = exp.table_(SHARED_CELLS)

    def text(tree: exp.Select) -> str:
        # built for this histogram alone (every shared node copied in): rendered without another copy. The DuckDB
        # store's target is DUCKDB (its text); Spark's store has its own
        return render(tree, target, fresh=True)

    out: list[str] = []
    for part, slot in zip(chooser.parts, slots(chooser), strict=True):
        if slot < len(out):  # a clamp's second bound: its histogram is there already
            continue
        if part.bound == "max_rows":
            ranks = chooser.part("max_groups") is not None  # g is drawn first: the rows of cells ranked <= g
            rows = (text(auto_rows.cells_histogram(analysis, cells.copy(), ranks)) if shared else
                    auto.selection_text(analysis, store, target, ranks, served))
            out.append(f"SELECT __c AS __a, {'__r' if ranks else 0} AS __b, __cells AS __n FROM ({rows}) AS __rows")
        elif part.bound == "max_groups":
            out.append(text(groups.groups_of_cells(analysis, cells.copy()) if shared else
                            groups.store_groups_sql(analysis, source) if served else
                            groups.groups_sql(analysis, source)))
        elif part.bound == "total":  # each unit's total under the WHERE, every row (auto/total.py)
            spec = analysis.table.column(part.column or "")
            assert spec is not None
            limit = total.total_limit(analysis, spec)
            # the store's column clamped at the limit, except in a join's virtual table (clamped per query there)
            stored = store and analysis.source is None
            out.append(text(total.histogram_sql(analysis, spec, source, limit, stored=stored)))
        else:
            spec = analysis.table.column(part.column or "")
            assert spec is not None
            out.append(text(clamp.clamp_sql(analysis, spec, 0, source, store, served)))
    return tuple(out), text(auto_rows.unit_cells(analysis, source)) if shared else None
