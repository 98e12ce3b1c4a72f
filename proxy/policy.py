"""The policy file (TOML) -> frozen Policy: datasets, their catalogs and privacy defaults, analysts, budgets.

Every problem is reported, each prefixed with its location in the file ("datasets.demo.epsilon: ..."), so
one `dpproxy check-policy` run lists all fixes. Unknown keys are errors: a typo must never silently drop a
privacy setting. A Policy that exists is usable: every ε, δ, bound and name in it has been validated.
"""

from __future__ import annotations

import datetime
import hmac
import math
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, cast, get_args

from accountant.filter import BASIC, DEFAULT_SELECTION_SHARE, RULES, Accounting, Budget, Rule, capacity
from mechanisms.gdp import MIN_BUDGET_EPSILON
from proxy.engines.spark_config import EngineName, SparkSource, read_engine, spark_problems
from proxy.limits import LIMIT_KEYS, AnalystLimits, read_limits
from proxy.policy_public import read_date_bounds, read_public_tables
from proxy.policy_readers import (
    _bool,
    _check_case_duplicates,
    _check_keys,
    _DecimalText,
    _float,
    _int,
    _is_number,
    _named_tables,
    _privacy_float,
    _Problems,
    _Raw,
    _show,
    _str,
    _written_decimal,
)
from proxy.query import Bounding, types
from proxy.query.analyse import MAX_PUBLIC_CELLS
from proxy.query.auto_bounds import DEFAULT_AUTO_LIMIT, DEFAULT_AUTO_QUANTILE, DEFAULT_AUTO_SHARE
from proxy.query.catalog import MAX_ABS_BOUND, Catalog, ColumnSpec, Literal_, Mechanism, TableSchema
from proxy.query.errors import InvalidParameter
from proxy.sql_reading import READING_KEYS, read_sql_reading

Role = Literal["analyst", "admin"]

MAX_QUERY_DELTA = 1e-3  # a per-query δ above this is not a meaningful privacy guarantee
_KEY_HASH = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # dataset and analyst names: used in URLs and logs
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # table and column names: plain SQL identifiers


class PolicyFileError(Exception):
    """The policy file is unreadable or invalid; `problems` lists every problem with its location."""

    code: ClassVar[str] = "invalid_policy"

    def __init__(self, problems: tuple[str, ...]) -> None:
        super().__init__("invalid policy file:\n" + "\n".join(f"  {p}" for p in problems))
        self.problems = problems


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


@dataclass(frozen=True, slots=True)
class DatasetPolicy:
    """One dataset: its DuckDB file, its catalog, the noise defaults for its queries, its admit rule and
    (optionally) a total budget shared by all its analysts, which makes collusion no use."""

    name: str
    path: Path
    catalog: Catalog
    mechanism: Mechanism = "laplace"
    epsilon: float = 0.1  # default ε per query
    delta: float = 1e-8  # default δ per query (Gaussian noise, private partition selection)
    max_epsilon: float = 1.0  # the largest ε one query may ask for
    accounting: Accounting = BASIC  # the admit rule (privacy filter) of every budget on this dataset
    budget: Budget | None = None  # the total over all analysts, enforced with each analyst's budget
    cell_accounting: bool = True  # charge a query only in the cells its WHERE can reach (docs/privacy.md §7)
    max_release_cells: int = MAX_PUBLIC_CELLS  # a public-domain GROUP BY releasing more cells is refused, free
    dialect: str = "duckdb"  # the SQL dialect of its queries unless a request names one (proxy/sql_reading.py)
    bounding: Bounding = "store"  # bound by filtering a bounding store's ranks (proxy/store.py); or "per_query"
    engine: EngineName = "duckdb"  # "spark": the tables live on Spark (`spark`; `path` is then unused)
    spark: SparkSource | None = None
    auto_bounds_share: float = DEFAULT_AUTO_SHARE  # of a query's ε, spent choosing an auto max_rows
    auto_bounds_quantile: float = DEFAULT_AUTO_QUANTILE  # q of the DP quantile of rows per (unit, group)

    def __post_init__(self) -> None:
        problems = _dataset_number_problems(self.mechanism, self.epsilon, self.delta, self.max_epsilon)
        problems += _accounting_problems(self.accounting, self.mechanism)
        if self.budget is not None:
            problems += tuple(("budget", p) for p in budget_problems(self.budget, self.accounting))
        if problems:
            raise ValueError(f"dataset {self.name}: " + "; ".join(f"{k} {v}" for k, v in problems))


@dataclass(frozen=True, slots=True)
class AnalystPolicy:
    """One API key holder: its role, a budget per dataset it may query, and its request limits."""

    name: str
    role: Role
    key_sha256: str  # sha256 hex of the API key; the key itself is never stored
    budgets: tuple[tuple[str, Budget], ...]  # (dataset name, budget)
    limits: AnalystLimits = field(default_factory=AnalystLimits)

    def __post_init__(self) -> None:
        if self.role not in get_args(Role):
            raise ValueError(f"analyst {self.name}: role must be one of {get_args(Role)}, got {self.role!r}")
        if not _KEY_HASH.fullmatch(self.key_sha256):
            raise ValueError(f"analyst {self.name}: key_sha256 must be 64 lowercase hex digits")

    def budget(self, dataset: str) -> Budget | None:
        """The budget on `dataset`, or None when the analyst has no access to it."""
        return next((budget for name, budget in self.budgets if name == dataset), None)


@dataclass(frozen=True, slots=True)
class Policy:
    """The whole policy file."""

    datasets: tuple[DatasetPolicy, ...]
    analysts: tuple[AnalystPolicy, ...]
    ledger: Path  # the SQLite ledger

    def __post_init__(self) -> None:
        names = [d.name for d in self.datasets]
        if len(set(names)) != len(names):
            raise ValueError("dataset names must be unique")
        if len({a.name for a in self.analysts}) != len(self.analysts):
            raise ValueError("analyst names must be unique")
        if len({a.key_sha256 for a in self.analysts}) != len(self.analysts):
            raise ValueError("two analysts share an API key")  # authentication would be ambiguous
        for analyst in self.analysts:
            unknown = [name for name, _ in analyst.budgets if name not in names]
            if unknown:
                raise ValueError(f"analyst {analyst.name}: budget for unknown dataset {unknown[0]!r}")
            for name, budget in analyst.budgets:
                dataset = self.dataset(name)
                assert dataset is not None
                for problem in budget_problems(budget, dataset.accounting):
                    raise ValueError(f"analyst {analyst.name}: budget on {name} {problem}")

    def dataset(self, name: str) -> DatasetPolicy | None:
        return next((d for d in self.datasets if d.name == name), None)

    def analyst_by_key_hash(self, key_sha256: str) -> AnalystPolicy | None:
        """The analyst whose key hashes to `key_sha256`; compares every entry in constant time."""
        found = None
        for analyst in self.analysts:
            if hmac.compare_digest(analyst.key_sha256, key_sha256):
                found = analyst
        return found


def load_policy(path: Path) -> Policy:
    """Read and validate the policy file at `path`; relative paths in it resolve against its directory.

    Raises:
        PolicyFileError: listing every problem found, each prefixed with its location.
    """
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"), parse_float=_DecimalText)
    except OSError as err:
        raise PolicyFileError((f"{path}: cannot read the policy file ({err.strerror})",)) from err
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise PolicyFileError((f"{path}: not valid TOML ({err})",)) from err
    problems = _Problems()
    policy = _policy(raw, path.resolve().parent, problems)
    if problems.items or policy is None:
        raise PolicyFileError(tuple(problems.items))
    return policy


def policy_problems(path: Path) -> tuple[str, ...]:
    """Every problem in the policy file at `path`; () when it is valid (used by `dpproxy check-policy`)."""
    try:
        load_policy(path)
    except PolicyFileError as err:
        return err.problems
    return ()


def _policy(raw: _Raw, base: Path, p: _Problems) -> Policy | None:
    _check_keys(raw, "", ("ledger", "datasets", "analysts"), p)
    ledger = base / (_str(raw, "ledger", "", p, default="ledger.sqlite") or "ledger.sqlite")
    if not ledger.parent.is_dir():
        p.add("ledger", f"directory {ledger.parent} does not exist")
    declared = _named_tables(raw, "datasets", "", _NAME, p)
    if not declared and isinstance(raw.get("datasets", {}), dict):
        p.add("datasets", "declare at least one dataset")
    datasets = tuple(d for name, t in declared if (d := _dataset(name, t, base, p)))
    names = {name for name, _ in declared}  # budgets may name a dataset that has its own problems
    analysts = tuple(
        a for name, t in _named_tables(raw, "analysts", "", _NAME, p) if (a := _analyst(name, t, names, p))
    )
    rules = {d.name: d.accounting for d in datasets}
    for analyst in analysts:  # a budget must suit its dataset's admit rule
        for name, budget in analyst.budgets:
            if name in rules:
                for problem in budget_problems(budget, rules[name]):
                    p.add(f"analysts.{analyst.name}.budgets.{name}", problem)
    owners: dict[str, str] = {}
    for analyst in analysts:
        if analyst.key_sha256 in owners:
            p.add(f"analysts.{analyst.name}.key_sha256", f"same key as analysts.{owners[analyst.key_sha256]}")
        owners.setdefault(analyst.key_sha256, analyst.name)
    masters = sorted({d.spark.master for d in datasets if d.spark is not None})
    if len(masters) > 1:  # one Spark session per server process
        p.add("datasets", f"all Spark datasets of one policy must use one master, got {', '.join(masters)}")
    if p.items:
        return None
    return Policy(datasets, analysts, ledger)


def _dataset(name: str, raw: _Raw, base: Path, p: _Problems) -> DatasetPolicy | None:
    loc = f"datasets.{name}"
    before = len(p.items)
    keys = ("path", "mechanism", "epsilon", "delta", "max_epsilon", "accounting", "selection_delta_share",
            "budget", "cell_accounting", "max_release_cells", "tables", "public_tables", "bounding", "engine",
            "spark", "auto_bounds_share", "auto_bounds_quantile", *READING_KEYS)
    _check_keys(raw, loc, keys, p)
    engine, spark = read_engine(raw, loc, base, p.add)
    file = _str(raw, "path", loc, p) if engine != "spark" else None
    path = base / file if file is not None else None
    if path is not None and not path.is_file():
        p.add(f"{loc}.path", f"file {path} does not exist")
    if engine == "spark":
        path = base  # unused: the tables are read through Spark
    mechanism = _str(raw, "mechanism", loc, p, default="laplace")
    if mechanism is not None and mechanism not in get_args(Mechanism):
        p.add(f"{loc}.mechanism", f"must be one of {', '.join(get_args(Mechanism))}, got {mechanism!r}")
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
    auto_share = _float(raw, "auto_bounds_share", loc, p, default=DEFAULT_AUTO_SHARE)
    if auto_share is not None and not 0 < auto_share < 1:
        p.add(f"{loc}.auto_bounds_share", f"must be a number in (0, 1) (the share of a query's epsilon spent on "
                                          f"choosing its bounds), got {auto_share!r}")
    auto_q = _float(raw, "auto_bounds_quantile", loc, p, default=DEFAULT_AUTO_QUANTILE)
    if auto_q is not None and not 0.5 <= auto_q < 1:
        p.add(f"{loc}.auto_bounds_quantile", f"must be a number in [0.5, 1), got {auto_q!r}")
    bounding = _str(raw, "bounding", loc, p, default="per_query" if engine == "spark" else "store")  # no store on Spark
    if bounding is not None and bounding not in get_args(Bounding):
        p.add(f"{loc}.bounding", f"must be one of {', '.join(get_args(Bounding))}, got {bounding!r}")
    declared = _named_tables(raw, "tables", loc, _IDENTIFIER, p)
    if not declared and isinstance(raw.get("tables", {}), dict):
        p.add(f"{loc}.tables", "declare at least one protected table")
    tables = tuple(t for n, r in declared if (t := _table(n, r, loc, p)))
    public = read_public_tables(raw, loc, p, _column)  # proxy/policy_public.py
    _check_case_duplicates(tuple(t.name for t in tables) + tuple(t.name for t in public), f"{loc}.tables", p)
    if len(p.items) > before or path is None or mechanism is None or accounting is None:
        return None
    assert epsilon is not None and delta is not None and max_epsilon is not None and cell_accounting is not None
    assert max_release_cells is not None and reading is not None
    if auto_share is None or auto_q is None:
        return None
    # a table may be qualified with one of the dataset's schemas, and with its name or its file's (DuckDB's
    # name for the database): `demo.main.visits`
    if spark is not None:
        spark_problems(loc, spark, tables, bounding, p.add)
        if len(p.items) > before:
            return None
    databases = (name,) if engine == "spark" else (name, path.stem)
    catalog = Catalog(tables, schemas=reading.schemas, databases=tuple(dict.fromkeys(databases)),
                      public=public)
    return DatasetPolicy(
        name, path, catalog, cast(Mechanism, mechanism), epsilon, delta, max_epsilon, accounting, total,
        cell_accounting, max_release_cells, reading.dialect, cast(Bounding, bounding), engine, spark,
        auto_bounds_share=auto_share, auto_bounds_quantile=auto_q,
    )


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
    if mechanism not in get_args(Mechanism):
        problems.append(("mechanism", f"must be one of {get_args(Mechanism)}, got {mechanism!r}"))
    if mechanism == "gaussian" and delta == 0.0:
        problems.append(("delta", "must be > 0 for the gaussian mechanism"))
    if not epsilon_problem(epsilon) and not epsilon_problem(max_epsilon) and max_epsilon < epsilon:
        problems.append(("max_epsilon", f"must be >= epsilon ({epsilon!r}), got {max_epsilon!r}"))
    return tuple((key, problem) for key, problem in problems if problem)


def _table(name: str, raw: _Raw, dataset_loc: str, p: _Problems) -> TableSchema | None:
    loc = f"{dataset_loc}.tables.{name}"
    before = len(p.items)
    _check_keys(raw, loc, ("privacy_unit", "max_groups", "max_rows", "max_rows_limit", "one_row_per_unit", "columns"),
                p)
    unit = _str(raw, "privacy_unit", loc, p)
    max_groups = _int(raw, "max_groups", loc, p, default=1)
    auto = raw.get("max_rows") == "auto"
    max_rows = _auto_limit(raw, loc, p) if auto else _int(raw, "max_rows", loc, p, default=1)
    if not auto and "max_rows_limit" in raw:
        p.add(f"{loc}.max_rows_limit", 'is read only with max_rows = "auto" (the largest bound a query may choose)')
    one_row = _bool(raw, "one_row_per_unit", loc, p, default=False)
    if auto and one_row:
        p.add(f"{loc}.max_rows", 'max_rows = "auto" is meaningless on a table declared one_row_per_unit = true '
                                 "(every unit has one row: there is no bound to choose); remove one of them")
    for key, value in (("max_groups", max_groups), ("max_rows_limit" if auto else "max_rows", max_rows)):
        if value is not None and not 1 <= value <= 10_000:
            p.add(f"{loc}.{key}", f"must be an integer in [1, 10000], got {value}")
    named = _named_tables(raw, "columns", loc, _IDENTIFIER, p)
    columns = tuple(c for n, r in named if (c := _column(n, r, loc, p)))
    _check_case_duplicates(tuple(c.name for c in columns), f"{loc}.columns", p)
    if unit is not None and "columns" in raw:
        spec = next((c for c in columns if c.name.lower() == unit.lower()), None)
        if not any(n.lower() == unit.lower() for n, _ in named):
            p.add(f"{loc}.privacy_unit", f"{unit!r} is not a declared column")
        elif spec is not None and spec.groupable:
            p.add(f"{loc}.columns.{spec.name}.groupable", "the privacy unit must not be groupable")
    if len(p.items) > before or unit is None or max_groups is None or max_rows is None or one_row is None:
        return None
    try:
        return TableSchema(name, unit, columns, max_groups, max_rows, one_row, auto_max_rows=auto)
    except ValueError as err:
        p.add(loc, str(err))
        return None


def _auto_limit(raw: _Raw, loc: str, p: _Problems) -> int | None:
    """The largest bound an auto max_rows may choose (`max_rows_limit`, default 1000)."""
    return _int(raw, "max_rows_limit", loc, p, default=DEFAULT_AUTO_LIMIT)


def _column(name: str, raw: _Raw, table_loc: str, p: _Problems) -> ColumnSpec | None:
    loc = f"{table_loc}.columns.{name}"
    before = len(p.items)
    _check_keys(raw, loc, ("type", "bounds", "unit_level", "groupable", "public_domain"), p)
    type_ = _str(raw, "type", loc, p)
    if type_ is not None:
        try:
            type_ = types.normalize(type_)
        except ValueError as err:
            p.add(f"{loc}.type", str(err))
            type_ = None
    unit_level = _bool(raw, "unit_level", loc, p, default=False)
    groupable = _bool(raw, "groupable", loc, p, default=False)
    date_bounds = bounds = None
    if "bounds" in raw and type_ is not None and types.kind(type_) == "date":
        date_bounds = read_date_bounds(raw["bounds"], f"{loc}.bounds", p)  # its days: a public domain
    elif "bounds" in raw:
        bounds = _bounds(raw.get("bounds"), f"{loc}.bounds", p)
    domain = None
    if "public_domain" in raw and type_ is not None:
        domain = _public_domain(raw["public_domain"], type_, f"{loc}.public_domain", p)
        if not groupable:
            p.add(f"{loc}.public_domain", "only a groupable column can have a public domain")
    if len(p.items) > before or type_ is None or unit_level is None or groupable is None:
        return None
    try:
        return ColumnSpec(name, type_, bounds, unit_level, domain, groupable, date_bounds)
    except ValueError as err:
        p.add(loc, str(err))
        return None


def _bounds(value: object, loc: str, p: _Problems) -> tuple[float, float] | None:
    ok = isinstance(value, list) and len(value) == 2 and all(_is_number(v) for v in value)
    lo, hi = (float(cast(float, v)) for v in cast(list[object], value)) if ok else (math.nan, math.nan)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        p.add(loc, f"must be [lo, hi] with lo <= hi, both finite numbers, got {value!r}")
        return None
    if max(abs(lo), abs(hi)) > MAX_ABS_BOUND:
        # larger bounds would let a sum's arithmetic fail after admission on one person's value (a leak)
        p.add(loc, f"must lie within ±{MAX_ABS_BOUND:.0e} (larger clamp bounds are refused), got {value!r}")
        return None
    return lo, hi


def _public_domain(value: object, type_: str, loc: str, p: _Problems) -> tuple[Literal_, ...] | None:
    if not isinstance(value, list) or not value:
        p.add(loc, f"must be a non-empty array of {type_} values, got {value!r}")
        return None
    converted = tuple(_domain_value(v, type_) for v in value)
    bad = [v for v, c in zip(value, converted, strict=True) if c is None]
    if bad:
        p.add(loc, f"values must all be finite {type_} values, got {', '.join(repr(v) for v in bad)}")
        return None
    return cast(tuple[Literal_, ...], converted)


def _domain_value(value: object, type_: str) -> Literal_ | None:
    """`value` as the column type's canonical value (dates become ISO text), or None when it is not one."""
    if isinstance(value, datetime.datetime) or (isinstance(value, float) and not math.isfinite(value)):
        return None
    if types.kind(type_) == "float" and isinstance(value, str):
        return None  # TOML has numbers: a quoted "0.1" is a typo, not a FLOAT
    try:
        return types.canonical(type_, value)
    except ValueError:
        return None


def _analyst(name: str, raw: _Raw, datasets: set[str], p: _Problems) -> AnalystPolicy | None:
    loc = f"analysts.{name}"
    before = len(p.items)
    _check_keys(raw, loc, ("role", "key_sha256", "budgets", *LIMIT_KEYS), p)
    role = _str(raw, "role", loc, p)
    if role is not None and role not in get_args(Role):
        p.add(f"{loc}.role", f"must be one of {', '.join(get_args(Role))}, got {role!r}")
    key = _str(raw, "key_sha256", loc, p)
    if key is not None and not _KEY_HASH.fullmatch(key):
        p.add(f"{loc}.key_sha256", "must be the sha256 of the API key as 64 lowercase hex digits")
    budgets: list[tuple[str, Budget]] = []
    for dataset, budget_raw in _named_tables(raw, "budgets", loc, _NAME, p):
        budget_loc = f"{loc}.budgets.{dataset}"
        if dataset not in datasets:
            p.add(budget_loc, f"unknown dataset {dataset!r}")
        budget = _budget(budget_raw, budget_loc, p)
        if len(p.items) == before and budget is not None:
            budgets.append((dataset, budget))
    limits = read_limits(raw, loc, p.add)
    if len(p.items) > before or role is None or key is None or limits is None:
        return None
    return AnalystPolicy(name, cast(Role, role), key, tuple(budgets), limits)


def check_accountable(dataset: DatasetPolicy, mechanism: str, partitions: str) -> None:
    """Refuse, before any charge, a query the dataset's admit rule cannot account for.

    Raises:
        InvalidParameter: private partitions under zcdp/gdp when no δ is reserved for partition selection.
            (Gaussian noise under gdp is accounted since docs/privacy.md §8; σ outside the proven range is
            refused when the query is priced.)
    """
    rule = dataset.accounting.rule
    if rule != "basic" and partitions == "private" and dataset.accounting.selection_share == 0:
        raise InvalidParameter(
            f'this dataset accounts with "{rule}" and reserves no δ for choosing which groups to release '
            "(selection_delta_share = 0); group by keys with a public domain", parameter="delta", accounting=rule,
        )
