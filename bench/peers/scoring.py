"""How bench/peers/run.py scores an answer: relative error per (answer, group, aggregate) against the plain answer.

The rule is bench/utility.py's, so the product's figures here and in the other benches mean the same thing:
|released − true| / |true| per cell; a group of the plain answer that a release leaves out (or answers NULL)
counts 1; a true value of 0 or NULL is skipped. Groups are matched by their keys compared as text. A system's
figures are the median and the p90 of every such error over its answers (p90 by linear interpolation between
order statistics, numpy's default), and the target's ratio is the product's median over the best peer's.

Example:
    >>> truth = {("a",): (100.0,), ("b",): (50.0,)}
    >>> errors = relative_errors(truth, [[("a", 90.0), ("b", 55.0)], [("a", 103.0)]], 1)
    >>> errors
    [0.1, 0.1, 0.03, 1.0]
    >>> summary(errors)
    {'median': 0.1, 'p90': 0.73, 'cells': 4}
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# the rule itself is bench/utility.py's, shared so that the figures here and in the other benches mean one thing
BENCH = str(Path(__file__).resolve().parents[1])
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)
from utility import relative_errors  # noqa: E402

__all__ = ["quantile", "ratio_to_best_peer", "relative_errors", "summary"]


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of `values`, linear between order statistics (numpy's default "linear" method).

    Example:
        >>> quantile([1.0, 2.0, 3.0, 4.0], 0.9)
        3.7
    """
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (position - low), 12)


def summary(errors: Sequence[float]) -> dict[str, Any]:
    """Median and p90 of the errors (None when there are none), and how many cells they cover."""
    if not errors:
        return {"median": None, "p90": None, "cells": 0}
    return {"median": statistics.median(errors), "p90": quantile(errors, 0.9), "cells": len(errors)}


def ratio_to_best_peer(product: float | None, peers: Iterable[float | None]) -> float | None:
    """The product's median error over the least median of the peers that answered (None if none did).

    Example:
        >>> ratio_to_best_peer(0.02, [0.22, 0.08, None])
        0.25
    """
    answered = [p for p in peers if p is not None]
    if product is None or not answered:
        return None
    best = min(answered)
    return math.inf if best == 0 else product / best
