"""VAR_POP, VAR_SAMP (VARIANCE), STDDEV_POP, STDDEV_SAMP (STDDEV): from a noisy count N, a noisy centred sum
S = Σ(x − c) and a noisy centred sum of squares Q = Σ(x − c)², each its own measure (measures.py) with its
own sensitivity and noise; the estimate is post-processing:

    VAR_POP = Q/N − (S/N)²  (clipped to [0, (hi − lo)²/4], the largest variance of values in [lo, hi]),
    VAR_SAMP = VAR_POP · N/(N − 1), STDDEV = √VAR.

Centring at c, the middle of the clamp range, makes |S/N| <= R and Q/N <= R² (R the half range), so the
noise split can be chosen for the worst case: linearising, the error is Z_Q/N − 2(S/N)·Z_S/N −
(Q/N − 2(S/N)²)·Z_N/N, whose coefficients times each measure's sensitivity (s·R², s·R, s) are at most
s·R²/N · (1, 2, 1). The split that minimises the expected squared error weighs the measures' variances by
(1, 4, 1) (`spread_weight`, used by price._weights).

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("orders", "cid", (ColumnSpec("cid", "BIGINT"), ColumnSpec("amount", "DOUBLE", bounds=(0, 100))))
    >>> spread(parse_one("STDDEV(amount)"), Names(t, None, Catalog((t,)))).kind
    'stddev_samp'
    >>> variance(np.array([4]), np.array([0]), np.array([8]), Measure("centred_sum", "x", 1, 0, 10), "var_pop")
    [2.0]
"""

from __future__ import annotations

import numpy as np
from sqlglot import exp

from proxy.query.analyse.measures import MAX_SPREAD_STEPS, Aggregate, AggregateKind, Measure, spread_grid
from proxy.query.analyse.names import Names
from proxy.query.errors import PolicyError, UnsupportedQuery
from proxy.query.errors import construct_name as _construct
from proxy.query.types import Value

SPREAD_NODES: dict[type[exp.Expr], AggregateKind] = {
    exp.VariancePop: "var_pop", exp.Variance: "var_samp", exp.StddevPop: "stddev_pop", exp.Stddev: "stddev_samp",
    exp.StddevSamp: "stddev_samp",
}
_WEIGHTS = {"values": 1, "centred_sum": 4, "centred_squares": 1}


def spread(node: exp.Expr, names: Names) -> Aggregate:
    """The VAR/STDDEV aggregate of `node`, on a checked numeric column with clamp bounds."""
    function = node.sql(dialect="duckdb").split("(")[0].upper()
    for name, value in node.args.items():
        if name != "this" and value:
            raise UnsupportedQuery(f"{function} takes one column", construct=function)
    argument = node.this
    if not isinstance(argument, exp.Column):
        raise UnsupportedQuery(
            f"{function} takes a plain column; {_construct(argument)} inside it is not supported",
            construct=function,
        )
    spec = names.column(argument)
    if not spec.numeric or spec.bounds is None:
        raise PolicyError(
            f"{function}({spec.name}) needs a numeric column with clamp bounds in the policy",
            construct=function, column=spec.name, hint="declare bounds = [lo, hi] for the column",
        )
    _, lo, hi = spread_grid(spec)
    if hi - lo > MAX_SPREAD_STEPS:
        raise PolicyError(
            f"{function}({spec.name}): the clamp range {spec.bounds} is too wide for an exact sum of squares "
            f"(at most {MAX_SPREAD_STEPS} units); declare tighter bounds",
            construct=function, column=spec.name,
        )
    return Aggregate(SPREAD_NODES[type(node)], spec.name)


def spread_weight(aggregate: Aggregate, measure: Measure) -> int:
    """How much `aggregate`'s error weighs measure's noise variance (1 for every non-spread aggregate).

    Example:
        >>> spread_weight(Aggregate("var_pop", "x"), Measure("centred_sum", "x")), spread_weight(
        ...     Aggregate("avg", "x"), Measure("centred_sum", "x"))
        (4, 1)
    """
    if aggregate.kind in ("var_pop", "var_samp", "stddev_pop", "stddev_samp"):
        return _WEIGHTS[measure.kind]
    return 1


def variance(count: np.ndarray, centred: np.ndarray, squares: np.ndarray, measure: Measure,
             kind: AggregateKind) -> list[Value]:
    """The released VAR or STDDEV per cell from the noisy measures (post-processing); None where the noisy
    count is too small (N <= 0, or N <= 1 for the sample forms)."""
    sample = kind in ("var_samp", "stddev_samp")
    valid = count > (1 if sample else 0)
    n = np.where(valid, count, 2).astype(float)
    mean = centred / n
    second = squares / n
    top = ((measure.hi - measure.lo) / 2) ** 2  # in squared grid units
    var = np.clip(second - mean**2, 0.0, top)
    if sample:
        var = np.clip(var * n / (n - 1), 0.0, top * 2)
    var = var / measure.grid**2
    out = np.sqrt(var) if kind.startswith("stddev") else var
    return [float(v) if ok else None for v, ok in zip(out.tolist(), valid.tolist(), strict=True)]
