"""What a private partition selection can hide, said before anything is charged (preview and answer alike).

Under private partitions a group is released only when its noisy count of distinct units passes a threshold
(docs/privacy.md §4): groups with fewer units are hidden, and at a small ε every group can be. The note names the
threshold, the keys without a public domain, and what would avoid it.

Example:
    >>> from proxy.query.planner import plan
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("visits", "user_id", (ColumnSpec("user_id", "BIGINT"),
    ...     ColumnSpec("day", "DATE", groupable=True)))
    >>> p = plan("SELECT day, COUNT(*) FROM visits GROUP BY day", Catalog((t,)), epsilon=0.1, delta=1e-8,
    ...          mechanism="laplace")
    >>> print(hidden_groups(p.analysis, p.price.selection.threshold))  # doctest: +NORMALIZE_WHITESPACE
    groups are chosen privately: a group is released only if its noisy count of distinct user_id reaches 357,
    so groups with fewer are hidden and the answer may have no rows. Keys without a public domain: day. To
    release every group, declare a public_domain for them (or bounds = [first, last] on a DATE column), group
    by a CASE with literal labels or a bucketing of bounded columns, or spend more epsilon/delta.
"""

from __future__ import annotations

from proxy.query.analyse.analysis import Analysis
from proxy.query.expr import Key


def hidden_groups(analysis: Analysis, threshold: int | None) -> str | None:
    """The note for a query whose groups are chosen privately, else None."""
    if analysis.partitions != "private" or threshold is None:
        return None
    private = [_shown(analysis, k) for k in analysis.keys if _domain(analysis, k) is None]
    return (
        f"groups are chosen privately: a group is released only if its noisy count of distinct "
        f"{analysis.table.privacy_unit} reaches {threshold}, so groups with fewer are hidden and the answer may "
        f"have no rows. Keys without a public domain: {', '.join(private) or 'none (too many cells together)'}. "
        "To release every group, declare a public_domain for them (or bounds = [first, last] on a DATE column), "
        "group by a CASE with literal labels or a bucketing of bounded columns, or spend more epsilon/delta."
    )


def _domain(analysis: Analysis, key: str) -> object:
    spec = analysis.table.column(key)
    return None if spec is None else spec.domain


def _shown(analysis: Analysis, key: str) -> str:
    """A key as the analyst wrote it: a computed key by its output name."""
    index = analysis.keys.index(key)
    named = next((o.name for o in analysis.outputs if o.expr == Key(index)), None)
    return named if key.startswith("__key") and named else key
