"""The catalog the query-layer tests use: one table shaped like the demo's `visits`."""

from __future__ import annotations

from proxy.query.catalog import Catalog, ColumnSpec, TableSchema

VISITS = TableSchema(
    name="visits",
    privacy_unit="user_id",
    columns=(
        ColumnSpec("user_id", "BIGINT"),
        ColumnSpec("region", "VARCHAR", unit_level=True, groupable=True, public_domain=("N", "S", "E", "W")),
        ColumnSpec("age", "INTEGER", bounds=(18, 90), unit_level=True, groupable=True),
        ColumnSpec("day", "DATE", groupable=True),
        ColumnSpec("category", "VARCHAR", groupable=True, public_domain=("a", "b", "c")),
        ColumnSpec("page", "VARCHAR", groupable=True),
        ColumnSpec("amount", "DOUBLE", bounds=(0.0, 500.0)),
        ColumnSpec("delta_x", "DOUBLE", bounds=(-3.0, 5.0)),
        ColumnSpec("duration_s", "INTEGER", bounds=(0, 3600)),
        ColumnSpec("secret", "DOUBLE"),
        ColumnSpec("flag", "BOOLEAN"),
    ),
    max_groups=3,
    max_rows=4,
)
USERS = TableSchema(
    name="users",
    privacy_unit="user_id",
    columns=(
        ColumnSpec("user_id", "BIGINT"),
        ColumnSpec("plan", "VARCHAR", unit_level=True, groupable=True, public_domain=("free", "pro")),
    ),
)
CATALOG = Catalog((VISITS, USERS))
