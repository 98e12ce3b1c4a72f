"""Charges written straight into a SQLite ledger file, behind the ledger's back (as other processes would):
histories of any length for the tests that measure what a ledger read costs as the history grows."""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


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


def instructions(conn: sqlite3.Connection, call: Callable[[], T]) -> tuple[int, T]:
    """How many SQLite virtual-machine instructions `call` executes on `conn`, and what it returns: the work a
    read does, which does not move with the machine's load as time does."""
    steps = itertools.count()
    conn.set_progress_handler(lambda: next(steps) and 0, 1)  # 0: never interrupt
    try:
        result = call()
    finally:
        conn.set_progress_handler(None, 1)
    return next(steps), result
