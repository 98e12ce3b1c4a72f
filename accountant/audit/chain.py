"""The audit log's chain math, pure: entries, their canonical hash, sealing, and verification.

Entry n stores `prev_hash` (the hash of entry n-1, or `GENESIS` for n = 1) and `hash` = sha256 of the
canonical JSON of all its other fields; `seq` runs 1, 2, 3, … without gaps. `verify_chain` finds any
edited, removed, reordered or inserted entry, and, given the head (seq, hash) kept with the last append,
any entry removed from or added at the end. The stores are in `audit/log.py`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

# `admitted`: a charge committed (written by the admit, in the charge's own transaction); the others are what
# became of a request: answered, answered from the stored release (repeat), refused, failed after or before admit;
# `granted` and `period`: an operator's grant of budget or new budget period (accountant/ledger/budget_ops.py),
# written with it: its text is the operation as JSON, its charge_id the operation's id, its ε/δ what was granted
Decision = Literal["answered", "repeat", "rejected", "failed", "admitted", "granted", "period"]
DECISIONS: tuple[str, ...] = get_args(Decision)
GENESIS = hashlib.sha256(b"dp-proxy audit log v1").hexdigest()  # the prev_hash of entry 1, forever

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _check_text(name: str, value: str | None) -> None:
    if value is None:
        return
    if not isinstance(value, str) or "\x00" in value:
        raise ValueError(f"audit {name} must be text without NUL characters, got {value!r:.80}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"audit {name} must be valid Unicode (no lone surrogates)") from err


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """What became of one request, as the proxy saw it: the input of `append`.

    `epsilon`/`delta` are what this request charged (0 for repeats and rejections); `charge_id` links the
    entry to the ledger (for a repeat, the charge that paid for the stored answer). An `admitted` entry is
    the charge itself (its id, analyst, dataset, normalised SQL, ε and δ), written with it; the request's
    outcome follows as an entry of its own with the same `charge_id`.
    """

    analyst: str | None  # None: the request did not authenticate
    dataset: str | None
    sql: str  # the normalised SQL (as sqlglot prints it), or the text as sent when it does not parse
    decision: Decision
    error_code: str | None = None
    charge_id: str | None = None
    epsilon: float = 0.0
    delta: float = 0.0

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"audit decision must be one of {DECISIONS}, got {self.decision!r}")
        for name in ("analyst", "dataset", "sql", "error_code", "charge_id"):
            _check_text(name, getattr(self, name))
        for name in ("epsilon", "delta"):
            value = getattr(self, name)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number and math.isfinite(value) and value >= 0):
                raise ValueError(f"audit {name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One sealed entry of the log."""

    seq: int
    at: datetime
    analyst: str | None
    dataset: str | None
    sql: str
    sql_sha256: str
    decision: str  # a Decision when written; kept as read, so verify can report a tampered one
    error_code: str | None
    charge_id: str | None
    epsilon: float
    delta: float
    prev_hash: str
    hash: str


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The outcome of checking a chain: `first_bad_seq` is the first entry (or missing seq) that fails."""

    ok: bool
    checked: int  # entries verified good, from seq 1
    first_bad_seq: int | None
    reason: str | None
    head: str = GENESIS  # the hash of the last good entry: record it outside the database to anchor the log


def sql_sha256(sql: str) -> str:
    """The SHA-256 of the SQL text (UTF-8), as the ledger's `Charge.sql_sha256`."""
    return hashlib.sha256(sql.encode("utf-8")).hexdigest()


def entry_hash(entry: AuditEntry) -> str:
    """sha256 of the canonical JSON of every field but `hash` (sorted keys, no spaces, UTF-8, at in UTC µs).

    Example:
        >>> e = seal(AuditRecord("ana", "sales", "SELECT 1", "answered"), seq=1, at=_EPOCH, prev_hash=GENESIS)
        >>> entry_hash(e) == e.hash, len(e.hash)
        (True, 64)
    """
    fields: dict[str, Any] = {name: getattr(entry, name) for name in AuditEntry.__dataclass_fields__}
    del fields["hash"]
    fields["at"] = entry.at.astimezone(UTC).isoformat(timespec="microseconds")
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal(record: AuditRecord, *, seq: int, at: datetime, prev_hash: str) -> AuditEntry:
    """The entry that follows `prev_hash` at `seq`, with its hash."""
    if at.utcoffset() is None:
        raise ValueError(f"audit time must be timezone-aware, got {at!r}")
    unsealed = AuditEntry(
        seq=seq, at=at.astimezone(UTC), analyst=record.analyst, dataset=record.dataset, sql=record.sql,
        sql_sha256=sql_sha256(record.sql), decision=record.decision, error_code=record.error_code,
        charge_id=record.charge_id, epsilon=float(record.epsilon), delta=float(record.delta),
        prev_hash=prev_hash, hash="",
    )
    return AuditEntry(**{**_as_dict(unsealed), "hash": entry_hash(unsealed)})


def _as_dict(entry: AuditEntry) -> dict[str, Any]:
    return {name: getattr(entry, name) for name in AuditEntry.__dataclass_fields__}


def chain(records: Iterable[AuditRecord], *, at: datetime = _EPOCH) -> tuple[AuditEntry, ...]:
    """Seal `records` as a log of their own, from seq 1 and `GENESIS` (all at time `at`).

    Example:
        >>> log = chain([AuditRecord("ana", "s", "SELECT 1", "answered"), AuditRecord(None, None, "x", "rejected")])
        >>> [e.seq for e in log], log[0].prev_hash == GENESIS, log[1].prev_hash == log[0].hash
        ([1, 2], True, True)
        >>> verify_chain(log, head=(2, log[1].hash)).ok
        True
    """
    entries: list[AuditEntry] = []
    for record in records:
        prev = entries[-1].hash if entries else GENESIS
        entries.append(seal(record, seq=len(entries) + 1, at=at, prev_hash=prev))
    return tuple(entries)


def verify_chain(entries: Iterable[AuditEntry], head: tuple[int, str] | None = None) -> VerifyResult:
    """Check entries read in seq order: seq 1, 2, … with no gap; each links to the one before; each hash
    matches its contents; and, if given, the log ends at the `head` (seq, hash) recorded with the last append.

    Example:
        >>> log = chain([AuditRecord("ana", "s", "SELECT 1", "answered")] * 3)
        >>> result = verify_chain([log[0], log[2]])
        >>> result.ok, result.checked, result.first_bad_seq, result.head == log[0].hash
        (False, 1, 3, True)
        >>> result.reason
        'entry 3 found where entry 2 belongs: entries are missing or out of order'
        >>> verify_chain(log[:2], head=(3, log[2].hash)).reason
        'the log ends at entry 2 but the head records entry 3: entries at the end were removed'
    """
    expected, prev, checked = 1, GENESIS, 0

    def bad(seq: int, reason: str) -> VerifyResult:
        return VerifyResult(False, checked, seq, reason, prev)

    for entry in entries:
        if entry.seq != expected:
            return bad(entry.seq, f"entry {entry.seq} found where entry {expected} belongs: "
                                  "entries are missing or out of order")
        if entry.prev_hash != prev:
            return bad(entry.seq, f"entry {entry.seq} does not link to entry {expected - 1}: "
                                  "an entry before it was changed, removed or inserted")
        if entry.sql_sha256 != sql_sha256(entry.sql):
            return bad(entry.seq, f"entry {entry.seq}: sql_sha256 does not match its SQL text")
        if entry.decision not in DECISIONS:
            return bad(entry.seq, f"entry {entry.seq}: unknown decision {entry.decision!r}")
        if entry_hash(entry) != entry.hash:
            return bad(entry.seq, f"entry {entry.seq}: the hash does not match its contents: it was edited")
        prev, expected, checked = entry.hash, expected + 1, checked + 1
    last = expected - 1
    if head is not None and head != (last, prev):
        head_seq, _ = head
        if head_seq > last:
            return bad(last + 1, f"the log ends at entry {last} but the head records entry {head_seq}: "
                                 "entries at the end were removed")
        if head_seq < last:
            return bad(head_seq + 1, f"the log goes on past the head (entry {head_seq}): "
                                     "entries were added behind the log's back")
        return bad(last, f"entry {last} is not the last entry the head records: it was replaced")
    return VerifyResult(True, checked, None, None, prev)
