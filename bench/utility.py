"""The utility column of bench/query_latency.py: median relative error per group against the plain answer.

For each workload query, `answers` private releases at one ε (default 1) through `proxy.pipeline.answer`
(real planner, ledger, engine and sampler), each compared cell by cell with the plain, unbounded answer of
DuckDB on the source: the error of one cell is |released − true| / |true|; a group of the plain answer that
a release leaves out (private partition selection) counts as error 1; a true value of 0 is skipped. The
figure is the median over every (answer, group, aggregate column): the issue's "median relative error per
group over ≥ 20 answers". It mixes the bias of the bounds (truncated heavy units, clamped values) with the
noise, as an analyst sees it.

Example:
    >>> truth = {("a",): (100.0, 10.0), ("b",): (50.0, 0.0)}
    >>> median_relative_error(truth, [[("a", 90.0, 11.0)], [("a", 110.0, 10.0), ("b", 55.0, 3.0)]], 1)
    0.1
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

Row = Sequence[Any]


def relative_errors(truth: dict[tuple[Any, ...], tuple[Any, ...]], answers: Iterable[Iterable[Row]],
                    n_keys: int) -> list[float]:
    """Every (answer, group of `truth`, aggregate column) error, in answer order, then truth order."""
    errors: list[float] = []
    for released in answers:
        by_key = {_key(row[:n_keys]): row[n_keys:] for row in released}
        for key, values in truth.items():
            got = by_key.get(_key(key))
            for column, true in enumerate(values):
                if true is None or float(true) == 0:
                    continue
                if got is None or got[column] is None:
                    errors.append(1.0)
                else:
                    errors.append(abs(float(got[column]) - float(true)) / abs(float(true)))
    return errors


def median_relative_error(truth: dict[tuple[Any, ...], tuple[float, ...]], answers: Iterable[Iterable[Row]],
                          n_keys: int) -> float | None:
    """The median relative error over every (answer, group of `truth`, aggregate column)."""
    errors = relative_errors(truth, answers, n_keys)
    return statistics.median(errors) if errors else None


def _key(values: Sequence[Any]) -> tuple[str, ...]:
    """Group keys compared as text: a release may carry a date as its ISO string, DuckDB as a date."""
    return tuple(str(v) for v in values)


def utility(sql: str, plain_rows: list[Row], n_keys: int, ask: Any, answers: int) -> dict[str, Any]:
    """`answers` releases of `sql` from `ask(sql) -> rows`, scored against `plain_rows`."""
    truth = {tuple(row[:n_keys]): tuple(row[n_keys:]) for row in plain_rows}
    released = [ask(sql) for _ in range(answers)]
    error = median_relative_error(truth, released, n_keys)
    return {"answers": answers, "groups": len(truth), "median_relative_error": error}


def request_epsilon(epsilon: float, serial: int) -> Decimal:
    """ε for the serial-th request: ε minus serial · 1e-9 (never above a per-query maximum of ε), so that no
    request repeats an earlier one.

    Example:
        >>> request_epsilon(1.0, 3)
        Decimal('0.999999997')
    """
    return Decimal(f"{epsilon - serial * 1e-9:.9f}")
