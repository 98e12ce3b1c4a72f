"""A public table for the demo, shared by the tests that join to one: `departments`, one row per category.

Example:
    >>> "[datasets.demo.public_tables.departments]" in declared("x\\n# One row per user.\\ny")
    True
"""

from __future__ import annotations

from pathlib import Path

import duckdb

DEPARTMENTS = (("groceries", "food"), ("dining", "food"), ("electronics", "goods"), ("clothing", "goods"),
               ("travel", "leisure"), ("health", "goods"), ("books", "leisure"), ("entertainment", "leisure"))
PUBLIC_TABLE = """
[datasets.demo.public_tables.departments]
keys = ["category"]
unique = true

[datasets.demo.public_tables.departments.columns]
category = { type = "VARCHAR", groupable = true }
department = { type = "VARCHAR", groupable = true, public_domain = ["food", "goods", "leisure"] }

# One row per user."""
_ANCHOR = "\n# One row per user."  # the demo policy's line before its users table


def create(database: Path, rows: tuple[tuple[str, str], ...] = DEPARTMENTS) -> None:
    """The table `departments` (category, department) with `rows` in the demo's `database`."""
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE departments (category VARCHAR, department VARCHAR)")
        con.executemany("INSERT INTO departments VALUES (?, ?)", rows)


def declared(policy_text: str) -> str:
    """The demo policy's text with `departments` declared as a public table."""
    assert _ANCHOR in policy_text, "not the demo's policy"
    return policy_text.replace(_ANCHOR, PUBLIC_TABLE, 1)
