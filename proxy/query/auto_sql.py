"""The selection histograms of a query with automatic bounds as engine SQL (proxy/query/auto_bounds.py): one
query per histogram, each returning (__a, __b, __n), combined by proxy/auto_run.py into one engine call."""

from __future__ import annotations

from sqlglot import exp

from proxy.query import auto_bounds as auto
from proxy.query import auto_clamp, auto_groups, auto_total
from proxy.query.analyse import Analysis
from proxy.query.render import Target, render
from proxy.query.rewrite import source_table, with_computed
from proxy.query.rewrite_cells import store_source
from proxy.query.rewrite_ranked import uses_rank_filter


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


def histograms(analysis: Analysis, chooser: auto.AutoBounds, store: bool, target: Target,
               ranked: bool = True) -> tuple[str, ...]:
    """One histogram query per selection (a clamp's lower and upper bound share one), each returning
    (__a, __b, __n): over the bounding store (its stored ranks where its rank filter serves the query, else its
    table), or over the source as the per-query rewrite reads it, rendered for `target`. `ranked`: the plan
    reads the store's ranks at all (`ranks_serve`: not a join whose keys or rows are the other table's)."""
    # what the query reads: the store's table, or a join's or computed keys' virtual table (over the store)
    source = store_source(analysis) if store else with_computed(analysis, source_table(analysis))
    served = store and ranked and uses_rank_filter(analysis)

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
            rows = auto.selection_text(analysis, store, target, ranks, served)
            out.append(f"SELECT __c AS __a, {'__r' if ranks else 0} AS __b, __cells AS __n FROM ({rows}) AS __rows")
        elif part.bound == "max_groups":
            out.append(text(auto_groups.store_groups_sql(analysis, source) if served else
                            auto_groups.groups_sql(analysis, source)))
        elif part.bound == "total":  # each unit's total under the WHERE, every row (auto_total.py)
            spec = analysis.table.column(part.column or "")
            assert spec is not None
            limit = auto_total.total_limit(analysis, spec)
            # the store's column clamped at the limit, except in a join's virtual table (clamped per query there)
            stored = store and analysis.source is None
            out.append(text(auto_total.histogram_sql(analysis, spec, source, limit, stored=stored)))
        else:
            spec = analysis.table.column(part.column or "")
            assert spec is not None
            out.append(text(auto_clamp.clamp_sql(analysis, spec, 0, source, store, served)))
    return tuple(out)
