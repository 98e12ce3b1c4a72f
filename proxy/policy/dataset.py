"""One dataset of the policy file -> DatasetPolicy: its file, catalog (proxy/policy/tables.py), privacy
defaults, admit rule and budget checks. Each problem is reported with its location (proxy/policy/load.py)."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast, get_args

from accountant.filter import BASIC, DEFAULT_SELECTION_SHARE, RULES, Accounting, Budget, Rule, capacity
from mechanisms.gdp import MIN_BUDGET_EPSILON
from proxy.engines.spark_config import EngineName, SparkSource, default_bounding, read_engine, spark_problems
from proxy.policy.public_tables import read_public_tables
from proxy.policy.readers import (
    _bool,
    _check_case_duplicates,
    _check_keys,
    _DecimalText,
    _float,
    _int,
    _named_tables,
    _privacy_float,
    _Problems,
    _Raw,
    _show,
    _str,
    _written_decimal,
)
from proxy.policy.sql_reading import READING_KEYS, read_sql_reading
from proxy.policy.tables import IDENTIFIER, _column, _table
from proxy.policy.unit_paths import resolve_paths
from proxy.query.analyse.analysis import MAX_PUBLIC_CELLS
from proxy.query.auto import share
from proxy.query.auto.bounds import DEFAULT_AUTO_QUANTILE, DEFAULT_AUTO_SHARE
from proxy.query.catalog import Catalog, MechanismChoice
from proxy.query.planner import Bounding

MAX_QUERY_DELTA = 1e-3  # a per-query δ above this is not a meaningful privacy guarantee

AnswerTime = Literal["immediate", "padded"]  # "padded": answers leave at a fixed time (proxy/run/padding.py)


def epsilon_problem(value: float) -> str | None:
    """Why `value` is not a usable ε, or None. Subnormals are refused: they make scales overflow.

    Example:
        >>> epsilon_problem(0.5) is None, epsilon_problem(0.0), epsilon_problem(float("nan"))
        (True, 'must be a finite number > 0, got 0.0', 'must be a finite number > 0, got nan')
    """
    if math.isfinite(value) and value >= sys.float_info.min:
        return None
    return f"must be a finite number > 0, got {value!r}"


def delta_problem(value: float, below: float = 1.0) -> str | None:
    """Why `value` is not a usable δ (0 <= δ < `below`), or None.

    Example:
        >>> delta_problem(1e-8) is None, delta_problem(1.0)
        (True, 'must be a number with 0 <= δ < 1.0, got 1.0')
    """
    if math.isfinite(value) and 0.0 <= value < below:
        return None
    return f"must be a number with 0 <= δ < {below}, got {value!r}"



DEFAULT_AUTO_REUSE = 10  # later queries at one shape's chosen bounds before a fresh draw
MAX_AUTO_REUSE = 1_000_000


@dataclass(frozen=True, slots=True)
class DatasetPolicy:
    """One dataset: its DuckDB file, its catalog, the noise defaults for its queries, its admit rule and
    (optionally) a total budget shared by all its analysts, which makes collusion no use."""

    name: str
    path: Path
    catalog: Catalog
    mechanism: MechanismChoice = "laplace"  # "auto": per query, by expected error (query/mechanism_choice.py)
    epsilon: float = 0.1  # default ε per query
    delta: float = 1e-8  # default δ per query (Gaussian noise, private partition selection)
    max_epsilon: float = 1.0  # the largest ε one query may ask for
    accounting: Accounting = BASIC  # the admit rule (privacy filter) of every budget on this dataset
    budget: Budget | None = None  # the total over all analysts, enforced with each analyst's budget
    cell_accounting: bool = True  # charge a query only in the cells its WHERE can reach (docs/privacy.md §7)
    max_release_cells: int = MAX_PUBLIC_CELLS  # a public-domain GROUP BY releasing more cells is refused, free
    dialect: str = "duckdb"  # the SQL dialect of its queries unless a request names one (proxy/policy/sql_reading.py)
    bounding: Bounding = "store"  # filter a bounding store's ranks (proxy/store/duckdb_store.py); or "per_query"
    engine: EngineName = "duckdb"  # "spark": the tables live on Spark (`spark`; `path` is then unused)
    spark: SparkSource | None = None
    auto_bounds_share: float | tuple[float, float] = DEFAULT_AUTO_SHARE  # ε share choosing bounds (auto/share.py)
    auto_bounds_quantile: float = DEFAULT_AUTO_QUANTILE  # q of an auto clamp's DP quantile of the column's values
    # how many later queries of one shape may run at the bounds a query chose, before one draws them afresh (0:
    # never reused); a new source stamp always draws afresh (docs/privacy.md §10.8)
    auto_bounds_reuse: int = DEFAULT_AUTO_REUSE
    answer_time: AnswerTime = "immediate"  # "padded": answers leave at a fixed time (proxy/run/padding.py)
    padded_ms: int | None = None  # the padded window from admission; None: the query time limit

    def __post_init__(self) -> None:
        problems = _dataset_number_problems(self.mechanism, self.epsilon, self.delta, self.max_epsilon)
        problems += _accounting_problems(self.accounting, self.mechanism)
        if self.budget is not None:
            problems += tuple(("budget", p) for p in budget_problems(self.budget, self.accounting))
        if problems:
            raise ValueError(f"dataset {self.name}: " + "; ".join(f"{k} {v}" for k, v in problems))




def _dataset(name: str, raw: _Raw, base: Path, p: _Problems) -> DatasetPolicy | None:
    loc = f"datasets.{name}"
    before = len(p.items)
    keys = ("path", "mechanism", "epsilon", "delta", "max_epsilon", "accounting", "selection_delta_share",
            "budget", "cell_accounting", "max_release_cells", "tables", "public_tables", "bounding", "engine",
            "spark", "auto_bounds_share", "auto_bounds_quantile", "auto_bounds_reuse", "answer_time", "padded_ms",
            *READING_KEYS)
    _check_keys(raw, loc, keys, p)
    engine, spark = read_engine(raw, loc, base, p.add)
    file = _str(raw, "path", loc, p) if engine != "spark" else None
    path = base / file if file is not None else None
    if path is not None and not path.is_file():
        p.add(f"{loc}.path", f"file {path} does not exist")
    if engine == "spark":
        path = base  # unused: the tables are read through Spark
    mechanism = _str(raw, "mechanism", loc, p, default="laplace")
    if mechanism is not None and mechanism not in get_args(MechanismChoice):
        p.add(f"{loc}.mechanism", f"must be one of {', '.join(get_args(MechanismChoice))}, got {mechanism!r}")
        mechanism = None
    epsilon = _privacy_float(raw, "epsilon", loc, p, default=_DecimalText("0.1"))
    delta = _privacy_float(raw, "delta", loc, p, default=_DecimalText("1e-8"))
    max_epsilon = _privacy_float(raw, "max_epsilon", loc, p, default=1.0)
    if mechanism is not None and epsilon is not None and delta is not None and max_epsilon is not None:
        for key, problem in _dataset_number_problems(mechanism, epsilon, delta, max_epsilon):
            p.add(f"{loc}.{key}", problem)
    accounting = _accounting(raw, loc, p)
    if accounting is not None and mechanism is not None:
        for key, problem in _accounting_problems(accounting, mechanism):
            p.add(f"{loc}.{key}", problem)
    total = None
    if "budget" in raw:
        total = _budget(raw["budget"], f"{loc}.budget", p)
        if total is not None and accounting is not None:
            for problem in budget_problems(total, accounting):
                p.add(f"{loc}.budget", problem)
    cell_accounting = _bool(raw, "cell_accounting", loc, p, default=True)
    max_release_cells = _int(raw, "max_release_cells", loc, p, default=MAX_PUBLIC_CELLS)
    if max_release_cells is not None and not 1 <= max_release_cells <= MAX_PUBLIC_CELLS:
        p.add(f"{loc}.max_release_cells", f"must be an integer in [1, {MAX_PUBLIC_CELLS}], got {max_release_cells}")
    reading = read_sql_reading(raw, loc, p.add)
    auto_share = share.read_limits(raw.get("auto_bounds_share", DEFAULT_AUTO_SHARE))  # fixed, or [low, high]
    if isinstance(auto_share, str):
        p.add(f"{loc}.auto_bounds_share", auto_share)
        auto_share = None
    auto_q = _float(raw, "auto_bounds_quantile", loc, p, default=DEFAULT_AUTO_QUANTILE)
    if auto_q is not None and not 0.5 <= auto_q < 1:
        p.add(f"{loc}.auto_bounds_quantile", f"must be a number in [0.5, 1), got {auto_q!r}")
    auto_reuse = _int(raw, "auto_bounds_reuse", loc, p, default=DEFAULT_AUTO_REUSE)
    if auto_reuse is not None and not 0 <= auto_reuse <= MAX_AUTO_REUSE:
        p.add(f"{loc}.auto_bounds_reuse", f"must be an integer in [0, {MAX_AUTO_REUSE}] (how many later queries may "
                                          f"reuse a shape's chosen bounds), got {auto_reuse!r}")
    answer_time, padded_ms = _answer_time(raw, loc, p)
    bounding = _str(raw, "bounding", loc, p, default=default_bounding(spark) if engine == "spark" else "store")
    if bounding is not None and bounding not in get_args(Bounding):
        p.add(f"{loc}.bounding", f"must be one of {', '.join(get_args(Bounding))}, got {bounding!r}")
    declared = _named_tables(raw, "tables", loc, IDENTIFIER, p)
    if not declared and isinstance(raw.get("tables", {}), dict):
        p.add(f"{loc}.tables", "declare at least one protected table")
    tables = tuple(t for n, r in declared if (t := _table(n, r, loc, p)))
    tables = resolve_paths(tables, loc, p.add, bounding, engine)  # unit_via: checked against the other tables
    public = read_public_tables(raw, loc, p, _column)  # proxy/policy/public_tables.py
    _check_case_duplicates(tuple(t.name for t in tables) + tuple(t.name for t in public), f"{loc}.tables", p)
    if len(p.items) > before or path is None or mechanism is None or accounting is None:
        return None
    assert epsilon is not None and delta is not None and max_epsilon is not None and cell_accounting is not None
    assert max_release_cells is not None and reading is not None
    if auto_share is None or auto_q is None or auto_reuse is None or answer_time is None:
        return None
    # a table may be qualified with one of the dataset's schemas, and with its name or its file's (DuckDB's
    # name for the database): `demo.main.visits`
    if spark is not None:
        spark_problems(loc, spark, tables, bounding, p.add, tuple(t.name for t in public))
        if len(p.items) > before:
            return None
    databases = (name,) if engine == "spark" else (name, path.stem)
    catalog = Catalog(tables, schemas=reading.schemas, databases=tuple(dict.fromkeys(databases)),
                      public=public)
    return DatasetPolicy(
        name, path, catalog, cast(MechanismChoice, mechanism), epsilon, delta, max_epsilon, accounting, total,
        cell_accounting, max_release_cells, reading.dialect, cast(Bounding, bounding), engine, spark,
        auto_bounds_share=auto_share, auto_bounds_quantile=auto_q, auto_bounds_reuse=auto_reuse,
        answer_time=answer_time, padded_ms=padded_ms,
    )


MAX_PADDED_MS = 3_600_000  # an hour: the longest query time limit (proxy/settings.py)


def _answer_time(raw: _Raw, loc: str, p: _Problems) -> tuple[AnswerTime | None, int | None]:
    """`answer_time` and `padded_ms` (docs/policy.md); (None, None) after reporting a problem."""
    answer_time = _str(raw, "answer_time", loc, p, default="immediate")
    if answer_time is not None and answer_time not in get_args(AnswerTime):
        p.add(f"{loc}.answer_time", f"must be one of {', '.join(get_args(AnswerTime))}, got {answer_time!r}")
        return None, None
    if "padded_ms" not in raw:
        return cast(AnswerTime | None, answer_time), None
    padded_ms = _int(raw, "padded_ms", loc, p)
    if padded_ms is not None and not 1 <= padded_ms <= MAX_PADDED_MS:
        p.add(f"{loc}.padded_ms", f"must be an integer in [1, {MAX_PADDED_MS}] (milliseconds), got {padded_ms}")
        return None, None
    if answer_time != "padded":
        p.add(f"{loc}.padded_ms", 'applies only with answer_time = "padded"')
        return None, None
    return (None, None) if padded_ms is None else ("padded", padded_ms)


def _accounting(raw: _Raw, loc: str, p: _Problems) -> Accounting | None:
    rule = _str(raw, "accounting", loc, p, default="basic")
    if rule is not None and rule not in RULES:
        p.add(f"{loc}.accounting", f"must be one of {', '.join(RULES)}, got {rule!r}")
        rule = None
    share = _float(raw, "selection_delta_share", loc, p, default=DEFAULT_SELECTION_SHARE)
    if share is not None and not 0 <= share < 1:
        p.add(f"{loc}.selection_delta_share", f"must be a number in [0, 1), got {share!r}")
        share = None
    if rule is None or share is None:
        return None
    return Accounting(cast(Rule, rule), share)


def _accounting_problems(accounting: Accounting, mechanism: str) -> tuple[tuple[str, str], ...]:
    # every rule accounts for every mechanism: the discrete Gaussian under gdp since its μ-GDP bound was
    # proven (docs/privacy.md §8); kept as the one place a rule/mechanism conflict would be reported
    return ()


def budget_problems(budget: Budget, accounting: Accounting) -> tuple[str, ...]:
    """Why `budget` cannot be used under `accounting`, or ().

    Example:
        >>> budget_problems(Budget(1.0, 0.0), Accounting("zcdp"))
        ('needs delta > 0 under accounting = "zcdp" (ρ or μ converts to ε only at some δ > 0)',)
        >>> budget_problems(Budget(1.0, 1e-6), Accounting("gdp"))
        ()
    """
    if accounting.rule == "basic":
        return ()
    if budget.delta == 0:
        return (f'needs delta > 0 under accounting = "{accounting.rule}" (ρ or μ converts to ε only at some δ > 0)',)
    if accounting.rule == "gdp" and budget.epsilon < MIN_BUDGET_EPSILON:
        return (f'needs epsilon >= {MIN_BUDGET_EPSILON} under accounting = "gdp", got {budget.epsilon!r}',)
    try:
        capacity(budget, accounting)
    except ValueError as err:
        return (str(err),)
    return ()


def _budget(value: object, loc: str, p: _Problems) -> Budget | None:
    """A `{ epsilon = …, delta = … }` table as a Budget, or None after reporting its problems."""
    if not isinstance(value, dict):
        p.add(loc, f"must be a table {{ epsilon = …, delta = … }}, got {_show(value)}")
        return None
    before = len(p.items)
    _check_keys(value, loc, ("epsilon", "delta"), p)
    epsilon = _privacy_float(value, "epsilon", loc, p)
    delta = _privacy_float(value, "delta", loc, p)
    for number, amount, problem in (("epsilon", epsilon, epsilon_problem), ("delta", delta, delta_problem)):
        if amount is not None and (message := problem(amount)):
            p.add(f"{loc}.{number}", message)
    if len(p.items) > before or epsilon is None or delta is None:
        return None
    written = (_written_decimal(value.get("epsilon")), _written_decimal(value.get("delta")))
    exact = (written[0], written[1]) if written[0] is not None and written[1] is not None else None
    try:
        return Budget(epsilon, delta, exact=exact)  # basic compares with the written decimals (privacy.md §8.6)
    except ValueError as err:
        p.add(loc, str(err))
        return None


def _dataset_number_problems(
    mechanism: str, epsilon: float, delta: float, max_epsilon: float
) -> tuple[tuple[str, str], ...]:
    problems = [
        ("epsilon", epsilon_problem(epsilon)),
        ("delta", delta_problem(delta, MAX_QUERY_DELTA)),
        ("max_epsilon", epsilon_problem(max_epsilon)),
    ]
    if mechanism not in get_args(MechanismChoice):
        problems.append(("mechanism", f"must be one of {get_args(MechanismChoice)}, got {mechanism!r}"))
    if mechanism == "gaussian" and delta == 0.0:
        problems.append(("delta", "must be > 0 for the gaussian mechanism"))
    if not epsilon_problem(epsilon) and not epsilon_problem(max_epsilon) and max_epsilon < epsilon:
        problems.append(("max_epsilon", f"must be >= epsilon ({epsilon!r}), got {max_epsilon!r}"))
    return tuple((key, problem) for key, problem in problems if problem)
