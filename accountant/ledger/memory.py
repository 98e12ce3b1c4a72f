"""A ledger in process memory (`MemoryLedger`), for tests and single-process demos.

Example:
    >>> from accountant.events import LaplaceEvent
    >>> from accountant.filter import Budget
    >>> from accountant.ledger.charges import Admission
    >>> ledger = MemoryLedger()
    >>> charge = ledger.admit(Admission(analyst="ana", dataset="demo", sql_sha256="ab" * 32,
    ...     event=LaplaceEvent(1, 10.0), epsilon=0.1, delta=0.0, composition="basic", budget=Budget(1.0, 1e-6)))
    >>> ledger.spent("ana", "demo")
    Spend(epsilon=0.1, delta=0.0)
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime

from accountant.audit.chain import AuditRecord
from accountant.errors import LedgerBusy
from accountant.filter import Entry, Spend, total
from accountant.ledger.admit import Since, _Admitting, _Memos
from accountant.ledger.budget_ops import StoredOp, allowance_of
from accountant.ledger.charges import ANSWERED, Charge, ChargeFilter, Claim, Clock, StoredRelease, Waits, _utcnow
from accountant.ledger.kept_bounds import KeptBounds
from accountant.ledger.sql_rows import entry_of

# --- in memory --------------------------------------------------------------------------------------


class MemoryLedger(_Admitting):
    """A ledger in process memory, for tests and single-process demos; one lock makes admit atomic."""

    def __init__(self, *, clock: Clock = _utcnow, waits: Waits | None = None) -> None:
        self._lock = threading.Lock()
        self._waits = waits or Waits()
        self._rows: list[Charge] = []  # in insertion order
        self._histories: dict[tuple[str | None, str], list[int]] = {}  # (analyst or None, dataset): row numbers
        self._releases: dict[tuple[str, str, str], StoredRelease] = {}
        self._claims: dict[tuple[str, str], Claim] = {}  # (analyst, key)
        self._kept: dict[tuple[str, str, str], tuple[KeptBounds, int]] = {}  # (dataset, scope, shape): (kept, uses)
        self._clock = clock
        self._memos = _Memos()
        self.admissions: list[AuditRecord] = []  # the admitted entries, in order (no chain in memory)
        self._ops_kept: list[StoredOp] = []  # operators' grants and periods, in order (budget_ops.py)

    @contextmanager
    def _write(self) -> Iterator[None]:
        with self._held(self._waits.lock_s):
            yield

    @contextmanager
    def _held(self, timeout_s: float) -> Iterator[None]:
        """The ledger's lock, waited for at most `timeout_s`."""
        if not self._lock.acquire(timeout=timeout_s):
            raise LedgerBusy(f"the ledger was locked for more than {timeout_s:g} s; retry shortly",
                             retry_after_s=self._waits.retry_after_s)
        try:
            yield
        finally:
            self._lock.release()

    def _reading(self) -> AbstractContextManager[object]:
        return self._lock

    def _operating(self) -> AbstractContextManager[object]:
        return self._write()  # the one lock: no admit is in flight

    def _ops(self, analyst: str | None, dataset: str) -> list[StoredOp]:
        return [op for op in self._ops_kept
                if op.operation.dataset == dataset and op.operation.analyst in (analyst, None)]

    def _all_ops(self, dataset: str | None) -> list[StoredOp]:
        return [op for op in self._ops_kept if dataset is None or op.operation.dataset == dataset]

    def _top(self) -> int:
        return len(self._rows)  # charges are numbered from 1 in insertion order

    def _insert_op(self, op: StoredOp) -> int:
        seq = len(self._ops_kept) + 1
        self._ops_kept.append(StoredOp(seq, op.id, op.at, op.operation, op.floor))
        return seq

    def _claimed(self, analyst: str, key: str) -> Claim | None:
        return self._claims.get((analyst, key))

    def _bind(self, claim: Claim) -> None:
        self._claims[(claim.analyst, claim.key)] = claim

    def _charge(self, charge_id: str) -> Charge:
        return next(c for c in self._rows if c.id == charge_id)

    def claim(self, analyst: str, key: str) -> Claim | None:
        with self._lock:
            return self._claims.get((analyst, key))

    def end_claim(self, analyst: str, key: str, code: str) -> Claim | None:
        with self._held(self._waits.lock_s):
            return self._end(analyst, key, code)

    def _end(self, analyst: str, key: str, outcome: str) -> Claim | None:
        found = self._claims.get((analyst, key))
        if found is not None and found.outcome is None:
            found = self._claims[(analyst, key)] = Claim(found.analyst, found.key, found.dataset,
                                                         found.request_sha256, found.charge_id, outcome)
        return found

    def probe(self, datasets: Sequence[str], timeout_s: float) -> None:
        with self._held(timeout_s):
            pass

    def _insert(self, charge: Charge) -> None:
        self._rows.append(charge)
        for key in ((charge.analyst, charge.dataset), (None, charge.dataset)):
            self._histories.setdefault(key, []).append(len(self._rows))  # its sequence number, counted from 1

    def _record(self, record: AuditRecord, at: datetime) -> None:
        self.admissions.append(record)

    def spent(self, analyst: str, dataset: str) -> Spend:
        with self._lock:
            return total((c.epsilon, c.delta) for c in self._rows if c.analyst == analyst and c.dataset == dataset)

    def _entries(self, analyst: str | None, dataset: str) -> list[Entry]:
        return [entry_of(c) for c in self._rows if c.dataset == dataset and (analyst is None or c.analyst == analyst)]

    def _since(self, analyst: str | None, dataset: str, seq: int) -> Since:
        mine = self._histories.get((analyst, dataset), [])
        before = bisect.bisect_right(mine, seq)  # rows are only appended: the numbers are sorted
        after = Counter(entry_of(self._rows[i - 1]) for i in mine[before:])
        return Since(before, list(after.items()), mine[-1] if mine else 0)

    def entries(self, *, dataset: str, analyst: str | None = None) -> tuple[Entry, ...]:
        with self._lock:  # the current budget period's: the rows numbered above its floor
            floor = allowance_of(self._ops(analyst, dataset), analyst).floor
            return tuple(self._entries(analyst, dataset)[self._histories_below(analyst, dataset, floor):])

    def _histories_below(self, analyst: str | None, dataset: str, floor: int) -> int:
        return bisect.bisect_right(self._histories.get((analyst, dataset), []), floor)

    def _select(
        self,
        analyst: str | None,
        dataset: str | None,
        since: datetime | None,
        until: datetime | None,
    ) -> list[Charge]:
        with self._lock:
            rows = list(enumerate(self._rows))
        picked = [
            (seq, c)
            for seq, c in rows
            if (analyst is None or c.analyst == analyst)
            and (dataset is None or c.dataset == dataset)
            and (since is None or c.at >= since)
            and (until is None or c.at < until)
        ]
        picked.sort(key=lambda row: (row[1].at, row[0]), reverse=True)
        return [c for _, c in picked]

    def _charges(self, where: ChargeFilter, limit: int, offset: int) -> tuple[Charge, ...]:
        analyst, dataset, since, until = where.analyst, where.dataset, where.since, where.until
        return tuple(self._select(analyst, dataset, since, until)[offset : offset + limit])

    def _count(self, where: ChargeFilter) -> int:
        analyst, dataset, since, until = where.analyst, where.dataset, where.since, where.until
        return len(self._select(analyst, dataset, since, until))

    def stored_release(self, analyst: str, dataset: str, request_sha256: str) -> StoredRelease | None:
        with self._lock:
            return self._releases.get((analyst, dataset, request_sha256))

    def store_release(
        self, release: StoredRelease, audit: AuditRecord | None = None, *, idempotency_key: str | None = None
    ) -> bool:
        with self._held(self._waits.lock_s):
            if idempotency_key is not None:
                found = self._claims.get((release.analyst, idempotency_key))
                if found is None or found.charge_id != release.charge_id or found.outcome is not None:
                    return False  # the key's charge has its outcome already
                self._end(release.analyst, idempotency_key, ANSWERED)
            identity = (release.analyst, release.dataset, release.request_sha256)
            if identity in self._releases:
                return False
            self._releases[identity] = release
            if audit is not None:
                self.admissions.append(audit)
            return True

    def keep_bounds(self, kept: KeptBounds) -> None:
        with self._held(self._waits.lock_s):
            self._kept[(kept.dataset, kept.scope, kept.shape_sha256)] = (kept, 0)

    def reuse_bounds(self, dataset: str, scope: str, shape_sha256: str, stamp: str, max_uses: int) -> str | None:
        with self._held(self._waits.lock_s):
            found = self._kept.get((dataset, scope, shape_sha256))
            if found is None or found[0].stamp != stamp or found[1] >= max_uses:
                return None
            self._kept[(dataset, scope, shape_sha256)] = (found[0], found[1] + 1)
            return found[0].bounds

    def close(self) -> None:
        pass
