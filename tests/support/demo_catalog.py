"""The demo policy as a catalog (proxy/cli/demo.py), with a public table `departments`: the BI corpus runs on it."""

from proxy.cli.demo import CATEGORIES, PLANS, REGIONS
from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema

VISITS = TableSchema("visits", "user_id", (
    ColumnSpec("user_id", "BIGINT"),
    ColumnSpec("region", "VARCHAR", unit_level=True, groupable=True, public_domain=REGIONS),
    ColumnSpec("age", "INTEGER", unit_level=True, groupable=True, bounds=(18, 90)),
    ColumnSpec("day", "DATE", groupable=True),
    ColumnSpec("category", "VARCHAR", groupable=True, public_domain=CATEGORIES),
    ColumnSpec("amount", "DOUBLE", bounds=(0.0, 500.0)),
    ColumnSpec("duration_s", "INTEGER", bounds=(0, 3600)),
), max_groups=4, max_rows=20)
USERS = TableSchema("users", "user_id", (
    ColumnSpec("user_id", "BIGINT"),
    ColumnSpec("region", "VARCHAR", unit_level=True, groupable=True, public_domain=REGIONS),
    ColumnSpec("age", "INTEGER", unit_level=True, groupable=True, bounds=(18, 90)),
    ColumnSpec("plan", "VARCHAR", unit_level=True, groupable=True, public_domain=PLANS),
))
DEPARTMENTS = PublicTable("departments", (
    ColumnSpec("category", "VARCHAR", groupable=True),
    ColumnSpec("department", "VARCHAR", groupable=True, public_domain=("food", "goods", "leisure")),
), ("category",), unique=True)
DEMO = Catalog((VISITS, USERS), schemas=("main", "public"), databases=("demo",), public=(DEPARTMENTS,))
