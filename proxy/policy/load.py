"""The policy file (TOML) -> frozen Policy: datasets, their catalogs and privacy defaults, analysts, budgets.

Every problem is reported, each prefixed with its location in the file ("datasets.demo.epsilon: ..."), so
one `dpproxy check-policy` run lists all fixes. Unknown keys are errors: a typo must never silently drop a
privacy setting. A Policy that exists is usable: every ε, δ, bound and name in it has been validated.
"""

from __future__ import annotations

import hmac
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, cast, get_args

from accountant.filter import Budget
from proxy.policy.dataset import (
    MAX_QUERY_DELTA,
    DatasetPolicy,
    _budget,
    _dataset,
    budget_problems,
    delta_problem,
    epsilon_problem,
)
from proxy.policy.limits import LIMIT_KEYS, AnalystLimits, read_limits
from proxy.policy.readers import _check_keys, _DecimalText, _named_tables, _Problems, _Raw, _str
from proxy.query.errors import InvalidParameter

__all__ = ["MAX_QUERY_DELTA", "AnalystPolicy", "DatasetPolicy", "Policy", "PolicyFileError", "budget_problems",
           "check_accountable", "delta_problem", "epsilon_problem", "load_policy", "policy_problems"]

Role = Literal["analyst", "admin"]

_KEY_HASH = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # dataset and analyst names: used in URLs and logs


class PolicyFileError(Exception):
    """The policy file is unreadable or invalid; `problems` lists every problem with its location."""

    code: ClassVar[str] = "invalid_policy"

    def __init__(self, problems: tuple[str, ...]) -> None:
        super().__init__("invalid policy file:\n" + "\n".join(f"  {p}" for p in problems))
        self.problems = problems



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
    _shared_sources(datasets, p)
    masters = sorted({d.spark.master for d in datasets if d.spark is not None})
    if len(masters) > 1:  # one Spark session per server process
        p.add("datasets", f"all Spark datasets of one policy must use one master, got {', '.join(masters)}")
    if p.items:
        return None
    return Policy(datasets, analysts, ledger)



def _shared_sources(datasets: tuple[DatasetPolicy, ...], p: _Problems) -> None:
    """Refuse two datasets over one file (or one Spark source): each would have its own budgets and dataset
    total, so the same people would be charged under two totals of ε (and on DuckDB, a `per_query` dataset
    and another over the same file cannot both open it). Files compare as the file itself: symlinks and
    relative spellings resolved, hard links by inode; a Parquet directory also meets every file under it."""
    seen: list[tuple[str, str, _Source]] = []  # (dataset, its location in the file, the source)
    for dataset in datasets:
        for loc, source in _sources(dataset):
            other = next(((name, at) for name, at, s in seen if name != dataset.name and _overlap(s, source)), None)
            if other is not None:
                p.add(loc, f"reads {source.shown}, which datasets.{other[0]} reads too ({other[1]}): two datasets "
                      "over the same data would each have their own budgets and dataset total, so one person "
                      f"could be charged twice the ε under two totals; declare one dataset for it (datasets.{other[0]} "
                      f"and datasets.{dataset.name} cannot share a source)")
            seen.append((dataset.name, loc, source))


@dataclass(frozen=True, slots=True)
class _Source:
    shown: str  # as the message names it
    path: Path | None  # a resolved local path, or None for a catalog table or a cluster's URI
    inode: tuple[int, int] | None  # (device, inode) of a local file
    name: str | None  # a catalog table (lower case) or a URI, compared as text


def _sources(dataset: DatasetPolicy) -> list[tuple[str, _Source]]:
    loc = f"datasets.{dataset.name}"
    if dataset.spark is None:
        return [(f"{loc}.path", _local(dataset.path))]
    out = []
    for table in dataset.spark.tables:
        at = f"{loc}.spark.tables.{table.name}"
        if table.kind == "table":
            out.append((at, _Source(f"table {table.location}", None, None, f"table:{table.location.lower()}")))
        elif "://" in table.location:
            out.append((at, _Source(table.location, None, None, "uri:" + table.location.rstrip("/"))))
        else:
            out.append((at, _local(Path(table.location))))
    return out


def _local(path: Path) -> _Source:
    resolved = path.resolve()
    try:
        status = resolved.stat()
    except OSError:  # reported where the path was read
        return _Source(str(resolved), resolved, None, None)
    return _Source(str(resolved), resolved, (status.st_dev, status.st_ino), None)


def _overlap(a: _Source, b: _Source) -> bool:
    """One file, or one inside the other (a Parquet directory and a file in it)."""
    if a.name is not None or b.name is not None:
        return a.name == b.name
    if a.inode is not None and a.inode == b.inode:
        return True
    assert a.path is not None and b.path is not None
    return a.path == b.path or a.path in b.path.parents or b.path in a.path.parents


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
