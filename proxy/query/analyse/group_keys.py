"""GROUP BY: the group keys, each a declared, groupable column that is not the privacy unit, or a computed key
(computed/keys.py); an item may name an output by position (`GROUP BY 1`) or by alias.

Example:
    >>> from proxy.query.parse.statement import parse
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("orders", "customer_id", (ColumnSpec("customer_id", "BIGINT"),
    ...     ColumnSpec("region", "VARCHAR", groupable=True)))
    >>> group_keys(parse("SELECT region, COUNT(*) FROM orders GROUP BY region, region"), Names(t, None, Catalog((t,))))
    ('region',)
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.analyse.literals import number
from proxy.query.analyse.names import Names
from proxy.query.analyse.refusals import arg_construct, located, where
from proxy.query.computed.keys import computed_key
from proxy.query.errors import PolicyError, UnsupportedQuery


def group_keys(select: exp.Select, names: Names) -> tuple[str, ...]:
    group = select.args.get("group")
    if not group:
        return ()
    for name, value in group.args.items():
        if name != "expressions" and value:
            construct = "GROUP BY ALL" if name == "all" else arg_construct(name)
            raise UnsupportedQuery(
                f"{construct} is not supported; list the group key columns", construct=construct
            )
    keys: list[str] = []
    for node in group.expressions:
        if isinstance(node, exp.Rollup | exp.Cube | exp.GroupingSets):
            raise _grouping_sets(node)
        node = _referenced(node, select, names)
        while isinstance(node, exp.Paren):
            node = node.this
        if not isinstance(node, exp.Column):
            key = computed_key(node, names, len(names.computed))
            if key.text not in {k.text for k in names.computed}:
                names.computed.append(key)
                keys.append(key.spec.name)
            continue
        spec = names.column(node)
        if spec.name == names.table.privacy_unit:
            raise PolicyError(
                f"cannot GROUP BY the privacy unit {spec.name!r}: each group would be one person",
                construct="GROUP BY", column=spec.name,
            )
        if not spec.groupable:
            raise PolicyError(
                f"column {spec.name!r} may not be grouped on (policy: groupable = false)",
                construct="GROUP BY", column=spec.name,
            )
        if spec.name not in keys:
            keys.append(spec.name)
    return tuple(keys)


def _grouping_sets(node: exp.Expr) -> UnsupportedQuery:
    """ROLLUP, CUBE and GROUPING SETS are a set of GROUP BYs, each its own release of its own cells: refused for
    now (each level charged on its own is what sending them one by one does, and says so), with that hint."""
    construct = {exp.Rollup: "ROLLUP", exp.Cube: "CUBE"}.get(type(node), "GROUPING SETS")
    hint = ("send one query per level: e.g. GROUP BY ROLLUP(a, b) is GROUP BY a, b; GROUP BY a; and no GROUP BY, "
            "each charged as its own release")
    return UnsupportedQuery(f"GROUP BY {construct}(…) is not supported{where(node)}; {hint}", construct=construct,
                            hint=hint, **located(node))


def _referenced(node: exp.Expr, select: exp.Select, names: Names) -> exp.Expr:
    """What a GROUP BY item stands for: `GROUP BY 1` the first output's expression, `GROUP BY bucket` the
    expression aliased `bucket` (unless the table has a column of that name, which wins, as in DuckDB)."""
    outputs = select.expressions
    if isinstance(node, exp.Literal) and not node.is_string:
        position = number(node)
        if not (isinstance(position, int) and 1 <= position <= len(outputs)):
            raise UnsupportedQuery(
                f"GROUP BY {node.this} does not name an output column (1..{len(outputs)})", construct="GROUP BY",
            )
        target = outputs[position - 1]
        target = target.this if isinstance(target, exp.Alias) else target
        if target.find(exp.AggFunc):
            raise UnsupportedQuery(f"GROUP BY {node.this} names an aggregate; group by keys",
                                   construct="GROUP BY")
        return target
    if isinstance(node, exp.Column) and not node.table and names.table.column(node.name) is None:
        aliased = next((o.this for o in outputs if isinstance(o, exp.Alias) and o.alias.lower() == node.name.lower()),
                       None)
        if aliased is not None and not aliased.find(exp.AggFunc):
            return aliased
    return node
