"""How far a budget goes under each admit rule (docs/privacy.md §5): basic composition, zCDP and GDP.

Table 1: an analyst with (ε, δ) = (1, 1e-6) runs one fixed query (or a fixed cycle of queries) again and
again, each a distinct query so never a free repeat, until the dataset's rule refuses one: how many
answers, and the noise of each (standard deviation and 95% half-width of the noise, from its distribution
alone). Workloads: Laplace-only, Gaussian-only, mixed (alternating), and private-partition GROUP BYs.
Every query is priced by the real planner (`proxy.query.planner.plan`) and admitted by the real filter
(`accountant.filter`), exactly as the ledger does.

Table 2: the other way round. To answer k COUNT queries within the same budget, the smallest noise each rule
allows (calibration inverting the accountant, rounded safely, and checked: all k are admitted).

Under gdp, Gaussian queries are priced through the proven μ of the discrete Gaussian (docs/privacy.md §8,
`plan(conversion="gdp")`); "—" marks a query whose σ falls outside the proven range [0.5, 2²⁰] grid units.

Table 3: private partition selection for `GROUP BY page` at the query's (ε, δ): the Laplace threshold (Laplace
queries) against the Gaussian one (Gaussian queries, noise on the distinct-unit counts accounted with the
measures): threshold T, the δ it costs, and the chance that a group of n units is released.

    python bench/accounting.py [--epsilon 1] [--delta 1e-6] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from accountant.errors import UnsupportedEvent
from accountant.events import GaussianEvent, LaplaceEvent
from accountant.filter import RULES, Accounting, Budget, Entry, Usage, capacity, fits, usage
from accountant.loss import epsilon_delta
from mechanisms import gdp, laplace
from mechanisms.gaussian import gdp_bound, zcdp
from mechanisms.rounding import down
from proxy.query.catalog import Catalog, ColumnSpec, Mechanism, TableSchema
from proxy.query.errors import QueryError
from proxy.query.planner import plan

TABLE = TableSchema(
    "t", "uid",
    (ColumnSpec("uid", "BIGINT"),
     ColumnSpec("region", "VARCHAR", unit_level=True, groupable=True, public_domain=("N", "S", "E", "W")),
     ColumnSpec("page", "VARCHAR", unit_level=True, groupable=True)),
    max_groups=1, max_rows=1,
)
CATALOG = Catalog((TABLE,))
LIMIT = 100_000  # stop counting here


def laplace_std(scale: float) -> float:
    """Standard deviation of discrete Laplace noise: √(2q)/(1 − q), q = e^{−1/scale}."""
    q = math.exp(-1.0 / scale)
    return math.sqrt(2 * q) / (1 - q)


def gaussian_std(sigma: float) -> float:
    """Standard deviation of discrete Gaussian noise (exact sum; ≤ σ, = σ to 1e-12 for σ ≥ 2)."""
    if sigma > 1e4:
        return sigma
    k = np.arange(0, math.ceil(40 * sigma) + 2, dtype=np.float64)
    w = np.exp(-(k**2) / (2 * sigma * sigma))
    return math.sqrt(2 * float(np.sum(k**2 * w)) / (w[0] + 2 * float(np.sum(w[1:]))))


@dataclass(frozen=True)
class Query:
    label: str
    sql: str
    mechanism: Mechanism
    epsilon: float
    delta: float


def _written(value: float) -> float:
    """A number as an analyst writes it in JSON: its decimal digits, priced from the largest float at or below
    them (proxy/schemas.py), so ε₀ = 0.1 costs at most 1/10."""
    return down(Fraction(Decimal(repr(value))))


def _priced(query: Query, i: int, conversion: str = "zcdp") -> tuple[Entry, float, float]:
    """(entry, noise std, ci95) of one query, priced by the planner (alias `i` makes each query distinct)."""
    p = plan(query.sql.format(i=i), CATALOG, epsilon=_written(query.epsilon), delta=_written(query.delta),
             mechanism=query.mechanism, conversion=conversion)  # type: ignore[arg-type]
    spec = p.price.noise[0]
    std = laplace_std(spec.scale) if spec.mechanism == "laplace" else gaussian_std(spec.scale)
    return Entry(p.price.event, p.price.epsilon, p.price.delta), std, spec.ci95


def admitted(workload: tuple[Query, ...], budget: Budget, accounting: Accounting) -> int | None:
    """How many queries of the cyclic workload the rule admits before its first refusal (None: the rule
    cannot price the workload, i.e. the discrete Gaussian under gdp with σ beyond the proven range)."""
    conversion = "gdp" if accounting.rule == "gdp" else "zcdp"
    try:
        entries = [_priced(q, 0, conversion)[0] for q in workload]
    except QueryError:
        return None
    limit = capacity(budget, accounting)
    used = Usage(accounting.rule, usage([], accounting.rule).amount, usage([], accounting.rule).delta)
    for n in range(LIMIT):
        entry = entries[n % len(entries)]
        try:
            if not fits(used, entry, limit):
                return n
        except UnsupportedEvent:
            return n
        one = usage([entry], accounting.rule)
        used = Usage(accounting.rule, used.amount + one.amount, used.delta + one.delta)
    return LIMIT


COUNT = "SELECT COUNT(*) AS n{i} FROM t"
GROUPED = "SELECT page, COUNT(*) AS n{i} FROM t GROUP BY page"
WORKLOADS: tuple[tuple[str, tuple[Query, ...], float], ...] = (  # (name, cyclic queries, selection δ share)
    ("Laplace ε₀=0.1", (Query("lap", COUNT, "laplace", 0.1, 0.0),), 0.0),
    ("Laplace ε₀=0.01", (Query("lap", COUNT, "laplace", 0.01, 0.0),), 0.0),
    ("Gaussian ε₀=0.1, δ₀=1e-9", (Query("gau", COUNT, "gaussian", 0.1, 1e-9),), 0.0),
    ("Gaussian ε₀=0.01, δ₀=1e-9", (Query("gau", COUNT, "gaussian", 0.01, 1e-9),), 0.0),
    ("Gaussian ε₀=0.1, δ₀=1e-7", (Query("gau", COUNT, "gaussian", 0.1, 1e-7),), 0.0),
    ("Gaussian ε₀=0.01, δ₀=1e-7", (Query("gau", COUNT, "gaussian", 0.01, 1e-7),), 0.0),
    ("mixed ε₀=0.05 (Laplace, Gaussian δ₀=1e-9)",
     (Query("lap", COUNT, "laplace", 0.05, 0.0), Query("gau", COUNT, "gaussian", 0.05, 1e-9)), 0.0),
    ("private GROUP BY, Laplace ε₀=0.1, δ₀=1e-8", (Query("sel", GROUPED, "laplace", 0.1, 1e-8),), 0.5),
)


def table1(budget: Budget) -> list[dict[str, object]]:
    rows = []
    for name, queries, share in WORKLOADS:
        noise = []
        for q in queries:
            _, std, ci95 = _priced(q, 0)
            noise.append(f"{q.mechanism} std {std:.3g}, ci95 ±{ci95:g}")
            if q.mechanism == "gaussian":
                try:
                    _, std, ci95 = _priced(q, 0, "gdp")
                    noise.append(f"(gdp-calibrated: std {std:.3g})")
                except QueryError:
                    noise.append("(gdp-calibrated: σ beyond the proven range)")
        counts = {rule: admitted(queries, budget, Accounting(rule, share)) for rule in RULES}
        rows.append({"workload": name, "selection_delta_share": share, "noise": "; ".join(noise), **counts})
    return rows


def _laplace_std_for(epsilon: float) -> float:
    return laplace_std(laplace.scale_for(1, epsilon))


def table2(budget: Budget, ks: tuple[int, ...] = (10, 100, 1000)) -> list[dict[str, object]]:
    """Per-answer noise std when k COUNT(*) (sensitivity 1) must all fit, for each rule and mechanism."""
    rows = []
    for k in ks:
        for mechanism in ("laplace", "gaussian"):
            row: dict[str, object] = {"k": k, "mechanism": mechanism}
            for rule in RULES:
                accounting = Accounting(rule, 0.0)
                limit = capacity(budget, accounting)
                if rule == "basic":
                    epsilon = float(np.nextafter(budget.epsilon / k, 0.0))
                    if mechanism == "laplace":
                        event = LaplaceEvent(1, laplace.scale_for(1, epsilon))
                    else:
                        delta = float(np.nextafter(budget.delta / k, 0.0))
                        event = GaussianEvent(1, zcdp.sigma_for(1, zcdp.rho_for(epsilon, delta)))
                elif rule == "zcdp":
                    rho = float(np.nextafter(limit.amount / k, 0.0))
                    if mechanism == "laplace":  # ρ = ε²/2 ⇒ ε = √(2ρ), rounded down
                        epsilon = float(np.nextafter(math.sqrt(2 * rho), 0.0))
                        event = LaplaceEvent(1, laplace.scale_for(1, epsilon))
                    else:
                        event = GaussianEvent(1, zcdp.sigma_for(1, rho))
                else:
                    mu = float(np.nextafter(limit.amount / math.sqrt(k), 0.0))
                    if mechanism == "gaussian":  # σ inverts the proven μ_Z (docs/privacy.md §8)
                        try:
                            event = GaussianEvent(1, gdp_bound.sigma_for(1, mu))
                        except ValueError:
                            row[rule] = None  # σ beyond the proven range
                            continue
                    else:
                        event = LaplaceEvent(1, laplace.scale_for(1, gdp.pure_epsilon(mu)))
                gaussian_delta = 0.0 if mechanism == "laplace" else float(np.nextafter(budget.delta / k, 0.0))
                conversion = "gdp" if rule == "gdp" else "zcdp"
                entry = Entry(event, *epsilon_delta(event, gaussian_delta, conversion))  # type: ignore[arg-type]
                used = usage([], rule)
                for _ in range(k):  # calibration is conservative: all k must be admitted
                    assert fits(used, entry, limit), (k, mechanism, rule)
                    one = usage([entry], rule)
                    used = Usage(rule, used.amount + one.amount, used.delta + one.delta)
                scale = event.scale if isinstance(event, LaplaceEvent) else event.sigma
                row[rule] = laplace_std(scale) if isinstance(event, LaplaceEvent) else gaussian_std(scale)
            rows.append(row)
    return rows


def _release_chance(mechanism: str, scale: float, cut: int, units: int) -> float:
    """P[units + Z >= T] for discrete Laplace (scale b) or discrete Gaussian (σ) noise Z."""
    k = cut - units  # need Z >= k
    if mechanism == "laplace":
        q = math.exp(-1.0 / scale)
        return q**k / (1 + q) if k > 0 else 1 - q ** (1 - k) / (1 + q)
    span = math.ceil(40 * scale) + abs(k) + 2
    j = np.arange(-span, span + 1, dtype=np.float64)
    w = np.exp(-(j**2) / (2 * scale * scale))
    return float(np.sum(w[j >= k]) / np.sum(w))


def table3(
    epsilon: float = 1.0, delta: float = 1e-6, sizes: tuple[int, ...] = (5, 10, 20, 50, 100)
) -> list[dict[str, object]]:
    """Laplace against Gaussian partition selection for a private GROUP BY at one query's (ε, δ)."""
    rows = []
    for mechanism, conversion in (("laplace", "zcdp"), ("gaussian", "zcdp"), ("gaussian", "gdp")):
        p = plan(GROUPED.format(i=0), CATALOG, epsilon=epsilon, delta=delta, mechanism=mechanism,  # type: ignore[arg-type]
                 conversion=conversion)  # type: ignore[arg-type]
        sel = p.price.selection
        assert sel is not None
        label = "Laplace" if mechanism == "laplace" else f"Gaussian ({conversion} pricing)"
        symbol = "b" if mechanism == "laplace" else "σ"
        row: dict[str, object] = {"selection": label, "noise": f"{symbol} = {sel.scale:.4g}", "T": sel.threshold,
                                  "δ": sel.delta}
        for n in sizes:
            row[f"P[release | n={n}]"] = _release_chance(mechanism, sel.scale, sel.threshold, n)
        rows.append(row)
    return rows


def _markdown(rows: list[dict[str, object]], columns: list[str]) -> str:
    def cell(value: object) -> str:
        if value is None:
            return "—"
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    budget = Budget(args.epsilon, args.delta)
    print(f"Budget (ε, δ) = ({args.epsilon:g}, {args.delta:g}); COUNT(*) with sensitivity 1.\n")
    one = table1(budget)
    print("Table 1: answers admitted before the first refusal (noise per answer from its distribution;")
    print("— = σ beyond the range where the discrete Gaussian's μ is proven, [0.5, 2²⁰] grid units)\n")
    print(_markdown(one, ["workload", "noise", "selection_delta_share", "basic", "zcdp", "gdp"]))
    two = table2(budget)
    print("\nTable 2: noise std of each answer when k answers must fit (smaller is better; — = not accountable)\n")
    print(_markdown(two, ["k", "mechanism", "basic", "zcdp", "gdp"]))
    three = table3()
    print("\nTable 3: private partition selection, SELECT page, COUNT(*) … GROUP BY page at (ε, δ) = (1, 1e-6)\n")
    print(_markdown(three, list(three[0])))
    if args.json is not None:
        args.json.write_text(json.dumps({"budget": [args.epsilon, args.delta], "admitted": one, "noise_for_k": two,
                                         "selection": three}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
