"""Operators' budget operations, pure: a grant of more budget, a new budget period, and what the admit reads
of them (`Allowance`). The stores keep them in a table of their own (`budget_ops`, migrated as its own
component so the ledger's schema version is untouched) and write each one with its audit entry in one
transaction (accountant/ledger/admit.py `_Admitting.operate`); docs/operations.md says what they mean for
the privacy guarantee.

- A **grant** raises one analyst's budget on a dataset (`analyst` set) or the dataset's budget shared by all
  analysts (`analyst` None), by (ε, δ) in the analyst's terms, for the rest of the current period. An analyst's
  grant never raises the shared budget: that is a grant of its own.
- A **period** starts a new budget period for one analyst (`analyst` set: their charges so far stop counting
  against their budget; the shared budget still counts them) or for the dataset (`analyst` None: every
  analyst's and the shared budget's). Grants made before it lapse. `floor` is the highest charge number at
  that moment: the period's history is the charges numbered above it.

Example:
    >>> from fractions import Fraction
    >>> at = datetime(2026, 1, 1, tzinfo=UTC)
    >>> ops = [stored(1, "grant", "ana", "0.5", "0", 0), stored(2, "period", None, "0", "0", 7),
    ...        stored(3, "grant", "ana", "0.25", "0.000001", 0), stored(4, "grant", None, "1", "0", 0)]
    >>> allowance_of(ops, "ana")
    Allowance(floor=7, epsilon=Fraction(1, 4), delta=Fraction(1, 1000000))
    >>> allowance_of(ops, None), allowance_of(ops, "bob").epsilon
    (Allowance(floor=7, epsilon=Fraction(1, 1), delta=Fraction(0, 1)), Fraction(0, 1))
    >>> raised(Budget(1.0, 0.5), allowance_of(ops, "ana")).limits()
    (Fraction(5, 4), Fraction(500001, 1000000))
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Literal

from accountant.audit.chain import AuditRecord
from accountant.errors import AccountantError, BudgetExceeded
from accountant.filter import Budget
from mechanisms.rounding import down, up

Kind = Literal["grant", "period"]
MAX_REASON = 2000  # characters: a sentence or a ticket reference, not a document

# every store's table; SQLite and PostgreSQL differ only in the types of `seq` and `at`
_TABLE = """CREATE TABLE budget_ops (
    seq {seq}, id TEXT NOT NULL UNIQUE, at {at} NOT NULL, kind TEXT NOT NULL, dataset TEXT NOT NULL,
    analyst TEXT, epsilon TEXT NOT NULL, delta TEXT NOT NULL, floor BIGINT NOT NULL, operator TEXT NOT NULL,
    reason TEXT NOT NULL)"""
_INDEX = "CREATE INDEX budget_ops_by_owner ON budget_ops (dataset, analyst, seq)"
SQLITE_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (_TABLE.format(seq="INTEGER PRIMARY KEY AUTOINCREMENT", at="INTEGER"), _INDEX),
)
POSTGRES_MIGRATIONS: tuple[str, ...] = (
    f"{_TABLE.format(seq='bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY', at='timestamptz')}; {_INDEX};",
)
COLUMNS = "seq, id, at, kind, dataset, analyst, epsilon, delta, floor, operator, reason"
INSERT_COLUMNS = "id, at, kind, dataset, analyst, epsilon, delta, floor, operator, reason"


def select_sql(mark: str, *, analyst: bool) -> str:
    """The operations an admit of an analyst (`analyst` True: theirs and the dataset-wide ones) or of the
    shared budget (False: the dataset-wide ones) reads, oldest first."""
    who = f"(analyst = {mark} OR analyst IS NULL)" if analyst else "analyst IS NULL"
    return f"SELECT {COLUMNS} FROM budget_ops WHERE dataset = {mark} AND {who} ORDER BY seq"


class InvalidBudgetOperation(AccountantError):
    """A grant or period an operator asked for that cannot be written: no reason, an amount that is not a
    finite decimal >= 0, a dataset or analyst the policy does not know, a total δ of 1 or more."""

    code = "invalid_budget_operation"
    status = 422


def decimal_of(value: object, name: str) -> Fraction:
    """An amount as the exact fraction of its decimal digits (a str, int or Decimal; a float by its repr).

    Example:
        >>> decimal_of("0.1", "epsilon"), decimal_of(0.1, "epsilon"), decimal_of(Decimal("1E-6"), "delta")
        (Fraction(1, 10), Fraction(1, 10), Fraction(1, 1000000))
        >>> decimal_of("-1", "epsilon")
        Traceback (most recent call last):
        ...
        accountant.ledger.budget_ops.InvalidBudgetOperation: epsilon must be a finite decimal >= 0, got '-1'
    """
    try:
        number = Decimal(repr(value) if isinstance(value, float) else str(value))
    except (InvalidOperation, ValueError):
        number = Decimal("NaN")
    if isinstance(value, bool) or not number.is_finite() or number < 0:
        raise InvalidBudgetOperation(f"{name} must be a finite decimal >= 0, got {value!r}", field=name)
    return Fraction(number)


def _text(amount: Fraction) -> str:
    """An exact amount as the shortest decimal text that is it (amounts come from decimals, so one exists)."""
    number = Decimal(amount.numerator) / Decimal(amount.denominator)
    assert Fraction(number) == amount, amount
    return format(number.normalize(), "f")


@dataclass(frozen=True, slots=True)
class Operation:
    """What an operator asks: a grant of (ε, δ) or a new period, on a dataset, for one analyst or (None) for
    the dataset's shared budget / every analyst, with who asked and why. Checked when built.

    Example:
        >>> Operation("grant", "demo", "ana", Fraction(1, 2), Fraction(0), "root", "Q4").text()[:61]
        '{"analyst":"ana","dataset":"demo","delta":"0","epsilon":"0.5"'
        >>> Operation("grant", "demo", "ana", Fraction(1, 2), Fraction(0), "root", "  ")
        Traceback (most recent call last):
        ...
        accountant.ledger.budget_ops.InvalidBudgetOperation: a budget operation needs a reason (who asked, why)
    """

    kind: Kind
    dataset: str
    analyst: str | None
    epsilon: Fraction
    delta: Fraction
    operator: str
    reason: str

    def __post_init__(self) -> None:
        if self.kind not in ("grant", "period"):
            raise InvalidBudgetOperation(f"unknown budget operation {self.kind!r}", field="kind")
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise InvalidBudgetOperation("a budget operation needs a reason (who asked, why)", field="reason")
        if len(self.reason) > MAX_REASON or "\x00" in self.reason:
            raise InvalidBudgetOperation(f"a reason is at most {MAX_REASON} characters, without NUL", field="reason")
        if self.kind == "grant" and not (self.epsilon > 0 or self.delta > 0):
            raise InvalidBudgetOperation("a grant needs an epsilon or a delta above 0", field="epsilon")
        if self.kind == "period" and (self.epsilon or self.delta):
            raise InvalidBudgetOperation("a new period grants nothing: it takes no epsilon or delta", field="epsilon")
        if self.delta >= 1:
            raise InvalidBudgetOperation("a grant's delta must be below 1", field="delta")

    def text(self) -> str:
        """The operation as its audit entry records it (canonical JSON: the chain's hash covers every field)."""
        fields = {"kind": self.kind, "dataset": self.dataset, "analyst": self.analyst, "operator": self.operator,
                  "reason": self.reason, "epsilon": _text(self.epsilon), "delta": _text(self.delta)}
        return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def audit_record(self, op_id: str) -> AuditRecord:
        """Its entry in the audit chain: decision `granted` or `period`, the operation's id as `charge_id`,
        the amounts granted as ε and δ (rounded up), the whole operation as the entry's text."""
        return AuditRecord(analyst=self.analyst, dataset=self.dataset, sql=self.text(),
                           decision="granted" if self.kind == "grant" else "period", charge_id=op_id,
                           epsilon=up(self.epsilon), delta=up(self.delta))


@dataclass(frozen=True, slots=True)
class StoredOp:
    """An operation as the ledger keeps it: its number and id, when, and `floor` (a period's: the highest
    charge number when it began; 0 for a grant)."""

    seq: int
    id: str
    at: datetime
    operation: Operation
    floor: int

    def row(self, at: object) -> tuple[object, ...]:
        """The values of `INSERT_COLUMNS`, the time as the store keeps it."""
        op = self.operation
        return (self.id, at, op.kind, op.dataset, op.analyst, _text(op.epsilon), _text(op.delta), self.floor,
                op.operator, op.reason)


def op_of(row: tuple[object, ...], at: datetime) -> StoredOp:
    """A `StoredOp` from a row of `COLUMNS` (its time decoded by the store)."""
    seq, op_id, _, kind, dataset, analyst, epsilon, delta, floor, operator, reason = row
    operation = Operation(kind, str(dataset), None if analyst is None else str(analyst),  # type: ignore[arg-type]
                          Fraction(Decimal(str(epsilon))), Fraction(Decimal(str(delta))), str(operator), str(reason))
    return StoredOp(int(seq), str(op_id), at, operation, int(floor))  # type: ignore[call-overload]


def stored(seq: int, kind: Kind, analyst: str | None, epsilon: str, delta: str, floor: int) -> StoredOp:
    """A stored operation on dataset `demo` by `root`, for examples and tests."""
    operation = Operation(kind, "demo", analyst, Fraction(Decimal(epsilon)), Fraction(Decimal(delta)), "root", "test")
    return StoredOp(seq, f"op{seq}", datetime(2026, 1, 1, tzinfo=UTC), operation, floor)


@dataclass(frozen=True, slots=True)
class Allowance:
    """What the operations give a budget now: the current period's `floor` (its history is the charges
    numbered above it) and the (ε, δ) granted since it began, exact."""

    floor: int = 0
    epsilon: Fraction = Fraction(0)
    delta: Fraction = Fraction(0)


NONE = Allowance()


def allowance_of(ops: Iterable[StoredOp], analyst: str | None) -> Allowance:
    """The allowance of `analyst`'s budget (None: the dataset's shared budget) from the dataset's operations:
    the last period that applies to it (its own or a dataset-wide one; only dataset-wide ones for the shared
    budget) and the grants to it after that period."""
    floor, since, epsilon, delta = 0, 0, Fraction(0), Fraction(0)
    for op in sorted(ops, key=lambda op: op.seq):
        if op.operation.kind == "period" and op.operation.analyst in (None, analyst):
            floor, since, epsilon, delta = max(floor, op.floor), op.seq, Fraction(0), Fraction(0)
        elif op.operation.kind == "grant" and op.operation.analyst == analyst and op.seq > since:
            epsilon, delta = epsilon + op.operation.epsilon, delta + op.operation.delta
    return Allowance(floor, epsilon, delta)


class UnusableBudget(BudgetExceeded):
    """The budget in force guarantees nothing: the policy's δ plus the δ granted this period is 1 or more (the
    grants were checked when written, so only a policy δ raised since reaches it). Every query is refused,
    free (fail closed), as a `budget_exceeded` with a hint for the operator, never the 422 of a write."""


UNUSABLE_HINT = ("an operator must lower this budget's delta in the policy, or start a new budget period "
                 "(`dpproxy budget new-period`: the grants lapse); until then nothing is admitted")


def raised(budget: Budget, allowance: Allowance) -> Budget:
    """`budget` with the allowance's grants added, exactly (its decimals kept, docs/privacy.md §8.6); the
    same budget when nothing is granted. A total δ of 1 or more raises `UnusableBudget`."""
    if not (allowance.epsilon or allowance.delta):
        return budget
    epsilon, delta = budget.limits()
    epsilon, delta = epsilon + allowance.epsilon, delta + allowance.delta
    if delta >= 1:
        raise UnusableBudget(f"the policy's delta and the {_text(allowance.delta)} granted this period add up to "
                             "1 or more, which guarantees nothing", delta_granted=_text(allowance.delta),
                             hint=UNUSABLE_HINT)
    return Budget(down(epsilon), down(delta), exact=(epsilon, delta))
