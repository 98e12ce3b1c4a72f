"""Recognise a two-level aggregation: an outer SELECT reading one derived table (a subquery in FROM, or one CTE)
whose SELECT has a GROUP BY. Anything else is left to the BI-wrapper flattening (parse/flatten.py), which refuses
a GROUP BY inside a subquery; this shape is read before it.

Example:
    >>> from sqlglot import parse_one
    >>> found = two_level(parse_one(
    ...     "SELECT n, COUNT(*) FROM (SELECT u, COUNT(*) FROM v GROUP BY u) AS per (u, n) GROUP BY n"))
    >>> found.alias, found.columns, found.inner.sql()
    ('per', ('u', 'n'), 'SELECT u, COUNT(*) FROM v GROUP BY u')
    >>> two_level(parse_one("SELECT COUNT(*) FROM (SELECT u FROM v) AS q")) is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from proxy.query.errors import UnsupportedQuery

_HINT = ("a per-unit subquery: SELECT <value>, COUNT(*) FROM (SELECT <unit>, COUNT(*) AS <value> FROM <protected "
         "table> [[LEFT] JOIN <protected table> ON <unit> = <unit>] [WHERE …] GROUP BY <unit>) AS q GROUP BY <value>")


@dataclass(frozen=True, slots=True)
class TwoLevel:
    """The outer query, the per-unit query it reads, the derived table's name and its column-alias list."""

    outer: exp.Select
    inner: exp.Select
    alias: str
    columns: tuple[str, ...]  # `AS q (a, b)`: the inner outputs renamed by position; () when not given


def two_level(select: exp.Expr) -> TwoLevel | None:
    """The two-level shape of `select`, or None when it is not one (a refusal when it is one nested deeper)."""
    if not isinstance(select, exp.Select):
        return None
    with_ = select.args.get("with_")
    source = select.args.get("from_")
    if with_ is not None:
        ctes = with_.expressions
        if with_.args.get("recursive") or len(ctes) != 1 or not _grouped(ctes[0].this):
            return None
        if source is None or not isinstance(source.this, exp.Table) or source.this.name.lower() != \
                ctes[0].alias.lower() or source.this.args.get("db"):
            return None
        inner, alias = ctes[0].this, source.this.alias or ctes[0].alias
        columns = ctes[0].args["alias"].args.get("columns") or []
    elif source is not None and isinstance(source.this, exp.Subquery) and _grouped(source.this.this):
        inner, alias = source.this.this, source.this.alias
        found = source.this.args.get("alias")
        columns = found.args.get("columns") or [] if found is not None else []
        if not alias:
            raise UnsupportedQuery(f"a per-unit subquery in FROM needs an alias; {_HINT}", construct="SUBQUERY",
                                   hint=_HINT)
    else:
        return None
    inner_source = inner.args.get("from_")
    if inner.find(exp.Subquery) is not None or inner.args.get("with_") or (
            inner_source is not None and not isinstance(inner_source.this, exp.Table)):
        raise UnsupportedQuery("a subquery inside a per-unit subquery is not supported: two levels at most, an "
                               f"aggregate per unit and one over the units; {_HINT}", construct="nesting",
                               hint=_HINT)
    outer = select.copy()
    outer.set("with_", None)
    return TwoLevel(outer, inner, alias, tuple(c.name for c in columns))


def _grouped(node: exp.Expr) -> bool:
    return isinstance(node, exp.Select) and node.args.get("group") is not None
