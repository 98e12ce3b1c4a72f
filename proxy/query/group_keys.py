"""GROUP BY: the group keys, each a declared, groupable column that is not the privacy unit.

Example:
    >>> from proxy.query.parse import parse
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("orders", "customer_id", (ColumnSpec("customer_id", "BIGINT"),
    ...     ColumnSpec("region", "VARCHAR", groupable=True)))
    >>> group_keys(parse("SELECT region, COUNT(*) FROM orders GROUP BY region, region"), Names(t, None, Catalog((t,))))
    ('region',)
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.errors import PolicyError, UnsupportedQuery
from proxy.query.names import Names
from proxy.query.refusals import arg_construct, unsupported


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
        if not isinstance(node, exp.Column):
            if isinstance(node, exp.Literal):
                raise UnsupportedQuery(
                    "GROUP BY by position is not supported; name the columns", construct="GROUP BY ordinal"
                )
            raise unsupported(node, "GROUP BY (group keys are plain declared columns)")
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
