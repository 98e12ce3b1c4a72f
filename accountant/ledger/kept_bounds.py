"""Chosen bounds kept for reuse (issue #29 item 2): the table every ledger store adds for them, and its SQL.

A query with automatic bounds draws its bounds from the data with part of its charged ε; they are a DP release,
so a later query of the same selection shape may run at them as if they were declared, paying no selection
(proxy/pipeline.py, docs/privacy.md §10.8). The ledger keeps them next to the releases repeats are answered
from: one row per (dataset, scope, shape), `scope` being "" when every analyst of the dataset may reuse them
(the dataset has a total budget) or the analyst's name; `stamp` the source's stamp when they were drawn; `uses`
how many queries have reused them since. The table is its own (SQLite: created if missing; PostgreSQL: its own
migration component), so adding it changes no other table or migration.

Example:
    >>> kept = KeptBounds("demo", "", "ab" * 32, "s1", '{"max_rows": 8}')
    >>> kept.scope == "", reuse_sql("?").startswith("UPDATE chosen_bounds SET uses = uses + 1")
    (True, True)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KeptBounds:
    dataset: str
    scope: str  # "": shared by the dataset's analysts; else the one analyst who may reuse them
    shape_sha256: str  # what the selection's histograms are a function of (auto_release.shape_sha256)
    stamp: str  # the source's stamp when drawn ("" where the engine has none): a new stamp, a fresh selection
    bounds: str  # the chosen bounds as JSON (proxy/query/auto/bounds.py `chosen_json`)


SQLITE_TABLE = """CREATE TABLE IF NOT EXISTS chosen_bounds (
    dataset TEXT NOT NULL,
    scope TEXT NOT NULL,
    shape_sha256 TEXT NOT NULL,
    stamp TEXT NOT NULL,
    bounds TEXT NOT NULL,
    uses INTEGER NOT NULL,
    at_us INTEGER NOT NULL,
    PRIMARY KEY (dataset, scope, shape_sha256)
)"""

POSTGRES_MIGRATIONS = (
    """CREATE TABLE chosen_bounds (
        dataset TEXT NOT NULL,
        scope TEXT NOT NULL,
        shape_sha256 TEXT NOT NULL,
        stamp TEXT NOT NULL,
        bounds TEXT NOT NULL,
        uses INTEGER NOT NULL,
        at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (dataset, scope, shape_sha256)
    )""",
)


def keep_sql(mark: str, moment: str) -> str:
    """Insert or replace a shape's bounds, its uses back to 0 (`mark`: the driver's placeholder)."""
    values = ", ".join([mark] * 5)
    return (f"INSERT INTO chosen_bounds (dataset, scope, shape_sha256, stamp, bounds, uses, {moment}) "
            f"VALUES ({values}, 0, {mark}) ON CONFLICT (dataset, scope, shape_sha256) DO UPDATE SET "
            f"stamp = excluded.stamp, bounds = excluded.bounds, uses = 0, {moment} = excluded.{moment}")


def reuse_sql(mark: str) -> str:
    """Count one more use of a shape's bounds and return them, if drawn at this stamp and used fewer times than
    allowed; one statement, so concurrent queries never reuse past the limit."""
    return (f"UPDATE chosen_bounds SET uses = uses + 1 WHERE dataset = {mark} AND scope = {mark} AND "
            f"shape_sha256 = {mark} AND stamp = {mark} AND uses < {mark} RETURNING bounds")
