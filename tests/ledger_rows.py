"""Charges written straight into a SQLite ledger file, behind the ledger's back (as other processes would):
histories of any length for the tests that measure what a ledger read costs as the history grows."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path


def insert_charges(path: Path, first: int, last: int, *, dataset: str, event: str, epsilon: float,
                   analyst: str | None = None, composition: str = "basic") -> None:
    """Charges `fill<first>` … `fill<last>` on `dataset`, each `event` (its JSON text) at `epsilon`, by
    `analyst`, or spread over the analysts a0 … a9 (charge i by a<i mod 10>)."""
    who = "?" if analyst is not None else "'a' || (i % 10)"
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "INSERT INTO charges (id, analyst, dataset, at_us, sql_sha256, event, epsilon, delta, composition)"
            " WITH RECURSIVE n(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            f" SELECT 'fill' || i, {who}, ?, 0, 'q', ?, ?, 0.0, ? FROM n",
            (first, last, *([analyst] if analyst is not None else []), dataset, event, epsilon, composition),
        )
