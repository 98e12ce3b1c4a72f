"""Ledger contract, run against every implementation, plus SQLite durability and cross-connection races."""

from __future__ import annotations

import contextlib
import multiprocessing
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path

import pytest

from accountant.cell_scope import CellScope
from accountant.cells import ledgered
from accountant.errors import BudgetExceeded, IdempotencyKeyReused, IdempotencyKeySpent, LedgerBusy
from accountant.events import ComposedEvent, Event, GaussianEvent, LaplaceEvent, ThresholdEvent
from accountant.filter import BASIC, Accounting, Budget, Entry, Rule, Spend, usage
from accountant.ledger.admit import NEXT_STEP
from accountant.ledger.charges import ANSWERED, Admission, Charge, Claim, Idempotency, Ledger, StoredRelease, Waits
from accountant.ledger.kept_bounds import KeptBounds
from accountant.ledger.memory import MemoryLedger
from accountant.ledger.sqlite import SqliteLedger

START = datetime(2025, 1, 1, tzinfo=UTC)
BUDGET = Budget(1.0, 1e-6)
TIMEOUT_S = 60  # a deadlock fails the test instead of hanging the suite
EVENT: Event = ComposedEvent((LaplaceEvent(1, 8.0), GaussianEvent(2.0, 3.5), ThresholdEvent(0.25, 1e-9)))


class FakeClock:
    """Hands out START, START + 1 s, … so that ordering and time filters are deterministic."""

    def __init__(self) -> None:
        self._next = START
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            now, self._next = self._next, self._next + timedelta(seconds=1)
            return now


Factory = Callable[..., Ledger]


@pytest.fixture(params=["memory", "sqlite"])
def make_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    opened: list[Ledger] = []

    def make(**kwargs: object) -> Ledger:
        ledger: Ledger
        if request.param == "memory":
            ledger = MemoryLedger(**kwargs)  # type: ignore[arg-type]
        else:
            ledger = SqliteLedger(tmp_path / "ledger.sqlite", **kwargs)  # type: ignore[arg-type]
        opened.append(ledger)
        return ledger

    yield make
    for ledger in opened:
        ledger.close()


def _admit(
    ledger: Ledger,
    epsilon: float = 0.125,
    delta: float = 0.0,
    *,
    analyst: str = "ana",
    dataset: str = "sales",
    budget: Budget = BUDGET,
    event: Event = EVENT,
    accounting: Accounting = BASIC,
    dataset_budget: Budget | None = None,
    idempotency: Idempotency | None = None,
) -> Charge:
    extra: dict[str, object] = {}
    if accounting != BASIC or dataset_budget is not None:  # keep the plain call the older contract makes
        extra = {"accounting": accounting, "dataset_budget": dataset_budget}
    if idempotency is not None:
        extra["idempotency"] = idempotency
    return ledger.admit(Admission(
        analyst=analyst,
        dataset=dataset,
        sql_sha256="ab" * 32,
        event=event,
        epsilon=epsilon,
        delta=delta,
        composition="basic",
        budget=budget,
        **extra,  # type: ignore[arg-type]
    ))


class TestLedgerContract:
    def test_admit_records_the_charge(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        charge = _admit(ledger, 0.25, 1e-7)
        assert len(charge.id) == 32 and int(charge.id, 16) >= 0
        assert charge.at.tzinfo is not None and charge.at.utcoffset() == timedelta(0)
        assert (charge.analyst, charge.dataset, charge.sql_sha256) == ("ana", "sales", "ab" * 32)
        assert (charge.event, charge.composition, charge.epsilon, charge.delta) == (
            EVENT,
            "basic",
            0.25,
            1e-7,
        )
        assert ledger.spent("ana", "sales") == Spend(0.25, 1e-7)  # exact: one charge
        assert ledger.charges() == (charge,)

    def test_spend_is_per_analyst_and_dataset(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        _admit(ledger, 0.5)
        _admit(ledger, 0.25, analyst="bob")
        _admit(ledger, 0.125, dataset="hr")
        assert ledger.spent("ana", "sales") == Spend(0.5, 0.0)
        assert ledger.spent("bob", "sales") == Spend(0.25, 0.0)
        assert ledger.spent("ana", "hr") == Spend(0.125, 0.0)
        assert ledger.spent("nobody", "sales") == Spend(0.0, 0.0)

    def test_charges_filter_and_paginate_newest_first(self, make_ledger: Factory) -> None:
        ledger = make_ledger(clock=FakeClock())
        made = [_admit(ledger, 0.0625, analyst=("ana", "bob")[i % 2]) for i in range(6)]  # at START + i s
        assert ledger.charges() == tuple(reversed(made))
        assert ledger.count() == 6
        assert ledger.charges(analyst="bob") == (made[5], made[3], made[1])
        assert ledger.count(analyst="bob") == 3
        assert ledger.charges(dataset="hr") == () and ledger.count(dataset="hr") == 0
        assert ledger.charges(limit=2) == (made[5], made[4])
        assert ledger.charges(limit=2, offset=2) == (made[3], made[2])
        assert ledger.charges(offset=10) == ()
        since, until = START + timedelta(seconds=2), START + timedelta(seconds=4)
        assert ledger.charges(since=since, until=until) == (made[3], made[2])  # since inclusive, until not
        assert ledger.count(since=since, until=until) == 2
        assert ledger.charges(analyst="ana", since=START + timedelta(seconds=1)) == (made[4], made[2])

    def test_equal_times_keep_insertion_order(self, make_ledger: Factory) -> None:
        ledger = make_ledger(clock=lambda: START)
        made = [_admit(ledger, 0.125) for _ in range(3)]
        assert ledger.charges() == tuple(reversed(made))

    def test_refusal_explains_and_writes_nothing(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        budget = Budget(3.0, 1e-6)
        _admit(ledger, 2.75, budget=budget)
        with pytest.raises(BudgetExceeded) as info:
            _admit(ledger, 0.5, budget=budget)
        error = info.value
        assert str(error) == "query needs ε=0.5 but 0.25 of your ε=3.0 remains"
        assert error.code == "budget_exceeded"
        assert error.detail == {
            "epsilon_remaining": 0.25,
            "delta_remaining": 1e-6,
            "epsilon_requested": 0.5,
            "delta_requested": 0.0,
            "hint": NEXT_STEP,  # the next step: a grant or a new period (docs/operations.md)
        }
        assert ledger.count() == 1
        assert ledger.spent("ana", "sales") == Spend(2.75, 0.0)

    def test_refusal_on_delta(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        budget = Budget(3.0, 1e-6)
        _admit(ledger, 0.5, 1e-6, budget=budget)
        with pytest.raises(BudgetExceeded, match=r"query needs δ=1e-09 but 0.0 of your δ=1e-06 remains"):
            _admit(ledger, 0.5, 1e-9, budget=budget)
        assert ledger.count() == 1

    def test_exact_fill_is_admitted_then_nothing_more(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        for _ in range(8):
            _admit(ledger, 0.125)
        with pytest.raises(BudgetExceeded):
            _admit(ledger, 5e-324)
        _admit(ledger, 0.0)  # a free charge (e.g. a repeat answered from the ledger) still fits
        assert ledger.count() == 9

    @pytest.mark.parametrize(("epsilon", "delta"), [(-0.1, 0.0), (float("nan"), 0.0), (0.1, 1.0)])
    def test_malformed_charges_are_refused(self, make_ledger: Factory, epsilon: float, delta: float) -> None:
        ledger = make_ledger()
        with pytest.raises(ValueError):
            _admit(ledger, epsilon, delta)
        assert ledger.count() == 0

    def test_naive_times_and_bad_pages_are_refused(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        with pytest.raises(ValueError):
            ledger.charges(since=datetime(2025, 1, 1))  # naive on purpose
        with pytest.raises(ValueError):
            ledger.count(until=datetime(2025, 1, 1))
        with pytest.raises(ValueError):
            ledger.charges(limit=-1)

    def test_concurrent_admits_never_overspend(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        threads, admitted_ok = 16, 5
        budget = Budget(0.25 * admitted_ok, 1e-6)  # exact: 1.25
        barrier = threading.Barrier(threads, timeout=TIMEOUT_S)

        def worker() -> str:
            barrier.wait()
            try:
                _admit(ledger, 0.25, budget=budget)
                return "admitted"
            except BudgetExceeded:
                return "refused"

        with ThreadPoolExecutor(threads) as pool:
            futures = [pool.submit(worker) for _ in range(threads)]
            outcomes = [future.result(timeout=TIMEOUT_S) for future in futures]
        assert outcomes.count("admitted") == admitted_ok
        assert ledger.count() == admitted_ok
        assert ledger.spent("ana", "sales") == Spend(1.25, 0.0)


REQUEST = "12" * 32  # a request's identity (proxy/pipeline.py computes it)


class TestIdempotencyContract:
    """An idempotency key binds one charge, in the admit that makes it: a retry with the key writes nothing
    and gets that charge; another request with it is refused; concurrent retries make one charge, and one
    stored release per request is kept (issue 26 item 12)."""

    def test_a_retry_with_the_key_gets_the_charge_it_paid(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        key = Idempotency("job-1", REQUEST)
        first = _admit(ledger, 0.25, idempotency=key)
        assert ledger.claim("ana", "job-1") == Claim("ana", "job-1", "sales", REQUEST, first.id)
        assert _admit(ledger, 0.25, idempotency=key) == first  # nothing written: no second charge
        assert ledger.count() == 1 and ledger.spent("ana", "sales") == Spend(0.25, 0.0)

    def test_keys_are_per_analyst(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        mine = _admit(ledger, 0.25, idempotency=Idempotency("job-1", REQUEST))
        theirs = _admit(ledger, 0.25, analyst="bob", idempotency=Idempotency("job-1", REQUEST))
        assert mine.id != theirs.id and ledger.count() == 2
        assert ledger.claim("bob", "job-1") == Claim("bob", "job-1", "sales", REQUEST, theirs.id)
        assert ledger.claim("cy", "job-1") is None

    def test_a_key_used_for_another_request_is_refused_and_writes_nothing(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        paid = _admit(ledger, 0.25, idempotency=Idempotency("job-1", REQUEST))
        for other in (
            {"idempotency": Idempotency("job-1", "34" * 32)},  # other SQL or parameters
            {"idempotency": Idempotency("job-1", REQUEST), "dataset": "hr"},  # another dataset
            {"idempotency": Idempotency("job-1", REQUEST), "epsilon": 0.5},  # the same request priced otherwise
        ):
            with pytest.raises(IdempotencyKeyReused) as refused:
                _admit(ledger, **{"epsilon": 0.25, **other})  # type: ignore[arg-type]
            assert refused.value.detail["charge_id"] == paid.id
        assert ledger.count() == 1 and ledger.spent("ana", "sales") == Spend(0.25, 0.0)

    def test_a_refused_admit_binds_no_key(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        key = Idempotency("job-1", REQUEST)
        with pytest.raises(BudgetExceeded):
            _admit(ledger, 2.0, idempotency=key)
        assert ledger.claim("ana", "job-1") is None
        assert _admit(ledger, 0.25, idempotency=key).epsilon == 0.25  # the key is still free

    def test_a_key_whose_charge_ended_in_an_error_is_spent(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        key = Idempotency("job-1", REQUEST)
        paid = _admit(ledger, 0.25, idempotency=key)
        ended = Claim("ana", "job-1", "sales", REQUEST, paid.id, "timeout")
        assert ledger.end_claim("ana", "job-1", "timeout") == ended
        assert ledger.end_claim("ana", "job-1", "internal") == ended  # the first outcome stays
        assert ledger.claim("ana", "job-1") == ended and ledger.end_claim("ana", "nokey", "timeout") is None
        with pytest.raises(IdempotencyKeySpent):
            _admit(ledger, 0.25, idempotency=key)
        late = StoredRelease("ana", "sales", REQUEST, paid.id, b"a run that finished after the error")
        assert ledger.store_release(late, idempotency_key="job-1") is False  # never a second outcome
        assert ledger.stored_release("ana", "sales", REQUEST) is None and ledger.count() == 1

    def test_a_stored_release_is_its_keys_outcome(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        paid = _admit(ledger, 0.25, idempotency=Idempotency("job-1", REQUEST))
        release = StoredRelease("ana", "sales", REQUEST, paid.id, b'{"rows": []}')
        assert ledger.store_release(release, idempotency_key="job-1") is True
        answered = Claim("ana", "job-1", "sales", REQUEST, paid.id, ANSWERED)
        assert ledger.end_claim("ana", "job-1", "timeout") == answered  # a late error does not replace it
        assert ledger.stored_release("ana", "sales", REQUEST) == release

    @pytest.mark.parametrize("bad", ["", "a b", "x" * 129, "k\n", "ключ", "a\"b"])
    def test_malformed_keys_are_refused(self, bad: str) -> None:
        with pytest.raises(ValueError, match="idempotency key"):
            Idempotency(bad, REQUEST)

    def test_the_first_release_of_a_request_is_kept_and_says_so(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        charge = _admit(ledger)
        first = StoredRelease("ana", "sales", REQUEST, charge.id, b'{"rows": [[1]]}')
        assert ledger.store_release(first) is True
        assert ledger.store_release(StoredRelease("ana", "sales", REQUEST, charge.id, b"other")) is False
        assert ledger.stored_release("ana", "sales", REQUEST) == first

    def test_concurrent_retries_of_one_key_make_one_charge_and_keep_one_release(
        self, make_ledger: Factory
    ) -> None:
        ledger = make_ledger()
        threads = 12
        barrier = threading.Barrier(threads, timeout=TIMEOUT_S)
        key = Idempotency("retry-me", REQUEST)

        def retry(i: int) -> tuple[str | None, bool]:
            barrier.wait()
            try:
                charge = _admit(ledger, 0.25, idempotency=key)
            except IdempotencyKeySpent:  # another retry's release is the key's outcome already
                return None, False
            body = f'{{"run": {i}}}'.encode()  # each run draws its own noise
            release = StoredRelease("ana", "sales", REQUEST, charge.id, body)
            return charge.id, ledger.store_release(release, idempotency_key="retry-me")

        with ThreadPoolExecutor(threads) as pool:
            outcomes = [f.result(timeout=TIMEOUT_S) for f in [pool.submit(retry, i) for i in range(threads)]]
        paid = {charge_id for charge_id, _ in outcomes} - {None}
        assert len(paid) == 1  # one charge for every retry
        assert [kept for _, kept in outcomes].count(True) == 1  # one run's release kept, the others not sent
        assert ledger.count() == 1 and ledger.spent("ana", "sales") == Spend(0.25, 0.0)
        stored = ledger.stored_release("ana", "sales", REQUEST)
        assert stored is not None and {stored.charge_id} == paid


class TestAccountingContract:
    """The admit rules and the dataset budget, through `Ledger.admit` (a separate contract from
    TestLedgerContract: a ledger implements `_history` before it can run these)."""

    LAPLACE = LaplaceEvent(1, 10.0)  # ε = 0.1, ρ = 0.005, μ = 0.1253

    def _fill(self, ledger: Ledger, accounting: Accounting, **kwargs: object) -> int:
        admitted = 0
        for _ in range(20):
            try:
                ledger.admit(Admission(analyst=kwargs.get("analyst", "ana"), dataset="sales", sql_sha256="cd" * 32,  # type: ignore[arg-type]
                             event=self.LAPLACE, epsilon=0.1, delta=0.0, composition="sequential",
                             budget=Budget(1.0, 1e-6), accounting=accounting,
                             dataset_budget=kwargs.get("dataset_budget")))  # type: ignore[arg-type]
                admitted += 1
            except BudgetExceeded:
                pass
        return admitted

    @pytest.mark.parametrize(("rule", "expected"), [("basic", 9), ("zcdp", 4), ("gdp", 3)])
    def test_each_rule_admits_what_its_filter_allows(self, make_ledger: Factory, rule: Rule, expected: int) -> None:
        ledger = make_ledger()
        assert self._fill(ledger, Accounting(rule, 0.0)) == expected
        assert ledger.count() == expected
        assert ledger.spent("ana", "sales").epsilon >= 0.1 * expected  # the stored charge is still basic ε

    def test_refusal_under_zcdp_names_rho(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        self._fill(ledger, Accounting("zcdp", 0.0))
        with pytest.raises(BudgetExceeded, match=r"query needs ρ=0.005 but 0.00435597 of your ρ=0.024356") as info:
            _admit(ledger, 0.1, event=self.LAPLACE, accounting=Accounting("zcdp", 0.0))
        assert info.value.detail["accounting"] == "zcdp" and info.value.detail["scope"] == "analyst"
        assert ledger.count() == 4

    def test_gaussian_events_are_refused_under_gdp_outside_the_proven_sigma(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        with pytest.raises(BudgetExceeded, match="proven for sigma in"):
            _admit(ledger, 0.1, event=GaussianEvent(1, 4e6), accounting=Accounting("gdp"))
        assert ledger.count() == 0
        _admit(ledger, 0.1, event=GaussianEvent(1, 10.0), accounting=Accounting("gdp"))  # μ_Z proven (§8)
        assert ledger.count() == 1

    def test_threshold_delta_is_paid_from_the_selection_share(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        selection = ThresholdEvent(0.01, 2e-7)  # 5e-7 reserved: two fit, the third does not
        outcomes = []
        for _ in range(3):
            try:
                _admit(ledger, 0.01, 2e-7, event=selection, accounting=Accounting("zcdp", 0.5))
                outcomes.append("admitted")
            except BudgetExceeded as err:
                outcomes.append(str(err))
        assert outcomes[:2] == ["admitted", "admitted"]
        assert outcomes[2].startswith("query needs δ=2e-07 for partition selection but 1e-07 of the δ=5e-07")

    def test_the_dataset_budget_is_shared_by_all_analysts(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        shared = Budget(1.0, 1e-6)  # each analyst alone could spend 9 × 0.1 under basic; together also 9
        counts = [self._fill(ledger, BASIC, analyst=name, dataset_budget=shared) for name in ("ana", "bob", "cy")]
        assert counts == [9, 0, 0]
        with pytest.raises(BudgetExceeded, match="dataset's shared") as info:
            _admit(ledger, 0.1, analyst="bob", event=self.LAPLACE, dataset_budget=shared)
        assert info.value.detail["scope"] == "dataset"
        assert ledger.entries(dataset="sales", analyst="bob") == ()
        assert len(ledger.entries(dataset="sales")) == 9

    def test_the_dataset_budget_uses_the_rule_in_force(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        shared = Budget(1.0, 1e-6)
        zcdp = Accounting("zcdp", 0.0)
        counts = [self._fill(ledger, zcdp, analyst=name, dataset_budget=shared) for name in ("ana", "bob")]
        assert counts == [4, 0]

    def test_concurrent_analysts_never_overspend_the_dataset_budget(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        threads = 12
        shared = Budget(0.5, 1e-6)  # 4 of 0.125 fit, whoever asks
        barrier = threading.Barrier(threads, timeout=TIMEOUT_S)

        def worker(i: int) -> int:
            barrier.wait()
            admitted = 0
            for _ in range(2):
                with contextlib.suppress(BudgetExceeded):
                    _admit(ledger, 0.125, analyst=f"analyst{i}", event=LaplaceEvent(1, 8.0), dataset_budget=shared)
                    admitted += 1
            return admitted

        with ThreadPoolExecutor(threads) as pool:
            futures = [pool.submit(worker, i) for i in range(threads)]
            total_admitted = sum(future.result(timeout=TIMEOUT_S) for future in futures)
        assert total_admitted == 4 and ledger.count() == 4

    def test_entries_are_the_stored_events_and_charges(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        _admit(ledger, 0.25, 1e-7)
        _admit(ledger, 0.125, analyst="bob")
        assert ledger.entries(dataset="sales", analyst="ana") == (Entry(EVENT, 0.25, 1e-7),)
        assert sorted(e.epsilon for e in ledger.entries(dataset="sales")) == [0.125, 0.25]
        assert ledger.entries(dataset="hr") == ()


class TestCellContract:
    """Per-cell accounting through `Ledger.admit` (accountant/cells.py): scopes are stored with their
    charges, disjoint cells compose in parallel, and concurrent admits never overspend any cell."""

    CELLS = 8

    def _scoped(self, ledger: Ledger, cells: list[int], epsilon: float = 0.25, **kwargs: object) -> Charge:
        scope = CellScope.of("visits", "space-1", self.CELLS, cells)
        return ledger.admit(Admission(analyst=str(kwargs.get("analyst", "ana")), dataset="sales", sql_sha256="ab" * 32,
                            event=LaplaceEvent(1, 1 / epsilon), epsilon=epsilon, delta=0.0, composition="parallel",
                            budget=Budget(0.5, 0.0), scope=scope,
                            dataset_budget=kwargs.get("dataset_budget")))  # type: ignore[arg-type]

    def test_scopes_are_stored_with_their_charges(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        charge = self._scoped(ledger, [1, 6])
        plain = _admit(ledger, 0.125)
        assert ledger.charges() == (plain, charge) and charge.scope is not None and plain.scope is None
        assert charge.scope.indices().tolist() == [1, 6]
        assert [e.scope for e in ledger.entries(dataset="sales")] in ([None, charge.scope], [charge.scope, None])

    def test_disjoint_cells_compose_in_parallel_and_overlaps_add_up(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        for cell in range(self.CELLS):  # 8 × 0.25 in a budget of 0.5: all fit, one per cell
            self._scoped(ledger, [cell])
        for cell in range(self.CELLS):  # a second round fills every cell exactly
            self._scoped(ledger, [cell])
        with pytest.raises(BudgetExceeded):
            self._scoped(ledger, [3])
        with pytest.raises(BudgetExceeded):  # every unit is in some full cell
            _admit(ledger, 0.125, budget=Budget(0.5, 0.0))
        assert ledger.count() == 16 and ledger.spent("ana", "sales") == Spend(4.0, 0.0)  # Σ: 16 × 0.25

    def test_reports_read_the_same_sums_as_admit(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        for cells in ([0], [1, 2], [0, 2]):
            self._scoped(ledger, cells, 0.125)
            self._scoped(ledger, cells, 0.125, analyst="bob")
        _admit(ledger, 0.125, event=LaplaceEvent(1, 8.0))
        for analyst in ("ana", "bob", None):
            for rule in ("basic", "zcdp", "gdp"):
                fresh = ledgered(ledger.entries(dataset="sales", analyst=analyst), rule)  # type: ignore[arg-type]
                kept = ledger.tallied(dataset="sales", analyst=analyst, rule=rule)  # type: ignore[arg-type]
                assert (kept.total, kept.bound()) == (fresh.total, fresh.bound())
        assert ledger.tallied(dataset="sales", analyst="ana").bound().amount == Fraction(3, 8)  # cell 0 (and 2)

    def test_concurrent_admits_never_overspend_a_cell(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        threads = 12
        barrier = threading.Barrier(threads, timeout=TIMEOUT_S)

        def worker(i: int) -> list[int]:
            barrier.wait()
            admitted = []
            for _ in range(2):
                with contextlib.suppress(BudgetExceeded):
                    self._scoped(ledger, [i % 3, 3 + i % 3] if i % 4 else [i % 3])  # overlapping scopes
                    admitted.append(i)
            return admitted

        with ThreadPoolExecutor(threads) as pool:
            futures = [pool.submit(worker, i) for i in range(threads)]
            done = [i for future in futures for i in future.result(timeout=TIMEOUT_S)]
        per_cell = [0] * self.CELLS
        for charge in ledger.charges(limit=1000):
            assert charge.scope is not None
            for cell in charge.scope.indices():
                per_cell[cell] += 1
        assert max(per_cell) == 2 and per_cell[:3] == [2, 2, 2]  # each of cells 0..2 exactly full
        assert len(done) == ledger.count()


class TestKeptBoundsContract:
    """Chosen bounds kept for reuse (accountant/ledger/kept_bounds.py; docs/privacy.md §10.8), in every store."""

    def test_reused_only_at_the_stamp_in_the_scope_and_within_the_count(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        shape = "ab" * 32
        assert ledger.reuse_bounds("demo", "", shape, "s1", 5) is None  # nothing kept
        ledger.keep_bounds(KeptBounds("demo", "", shape, "s1", '{"k": 1}'))
        assert ledger.reuse_bounds("demo", "", shape, "s2", 5) is None  # another store answers now
        assert ledger.reuse_bounds("demo", "ana", shape, "s1", 5) is None  # another scope
        assert ledger.reuse_bounds("other", "", shape, "s1", 5) is None
        assert [ledger.reuse_bounds("demo", "", shape, "s1", 2) for _ in range(3)] == ['{"k": 1}', '{"k": 1}', None]
        assert ledger.reuse_bounds("demo", "", shape, "s1", 3) == '{"k": 1}'  # a larger limit: one use more
        ledger.keep_bounds(KeptBounds("demo", "", shape, "s2", '{"k": 2}'))  # drawn afresh: replaced, count 0
        assert ledger.reuse_bounds("demo", "", shape, "s1", 9) is None
        assert [ledger.reuse_bounds("demo", "", shape, "s2", 1) for _ in range(2)] == ['{"k": 2}', None]

    def test_kept_bounds_survive_reopening(self, make_ledger: Factory) -> None:
        first = make_ledger()
        first.keep_bounds(KeptBounds("demo", "ana", "cd" * 32, "s", '{"k": 3}'))
        again = make_ledger()
        if isinstance(first, MemoryLedger):  # nothing survives a process in memory
            assert again.reuse_bounds("demo", "ana", "cd" * 32, "s", 1) is None
        else:
            assert again.reuse_bounds("demo", "ana", "cd" * 32, "s", 1) == '{"k": 3}'


def test_sqlite_history_is_re_accounted_after_reopening(tmp_path: Path) -> None:
    # a ledger written under basic composition can be read under zCDP from its stored events
    path = tmp_path / "ledger.sqlite"
    ledger = SqliteLedger(path)
    for _ in range(3):
        _admit(ledger, 0.1, event=LaplaceEvent(1, 10.0))
    ledger.close()
    reopened = SqliteLedger(path)
    try:
        assert usage(reopened.entries(dataset="sales"), "zcdp").amount == 3 * Fraction(0.005000000000000001)
        _admit(reopened, 0.1, event=LaplaceEvent(1, 10.0), accounting=Accounting("zcdp", 0.0))
        with pytest.raises(BudgetExceeded):
            _admit(reopened, 0.1, event=LaplaceEvent(1, 10.0), accounting=Accounting("zcdp", 0.0))
    finally:
        reopened.close()


# --- SQLite only ------------------------------------------------------------------------------------


def test_sqlite_charges_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = SqliteLedger(path)
    charge = _admit(ledger, 0.1, 3e-7)
    ledger.close()
    reopened = SqliteLedger(path)
    try:
        assert reopened.charges() == (charge,)  # every field, the event and the exact floats included
        assert reopened.spent("ana", "sales") == Spend(0.1, 3e-7)
    finally:
        reopened.close()


def test_sqlite_file_is_wal_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    SqliteLedger(path).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(4,)]
    conn.close()


def test_sqlite_refuses_an_unknown_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    SqliteLedger(path).close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE schema_version SET version = 99")
    conn.close()
    with pytest.raises(RuntimeError, match="schema version 99"):
        SqliteLedger(path)


def test_separate_connections_on_one_file_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    threads, admitted_ok = 16, 6
    budget = Budget(0.125 * admitted_ok, 1e-6)
    barrier = threading.Barrier(threads, timeout=TIMEOUT_S)

    def worker() -> list[Charge]:
        admitted = []
        try:
            ledger = SqliteLedger(path)  # its own connection: only SQLite's locking serialises the admits
        finally:
            barrier.wait()  # reached even if opening failed, so no other worker waits forever
        try:
            for _ in range(2):
                with contextlib.suppress(BudgetExceeded):
                    admitted.append(_admit(ledger, 0.125, budget=budget))
        finally:
            ledger.close()
        return admitted

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(worker) for _ in range(threads)]
        admitted = [charge for future in futures for charge in future.result(timeout=TIMEOUT_S)]
    check = SqliteLedger(path)
    try:
        assert len(admitted) == admitted_ok
        assert check.count() == admitted_ok
        assert check.spent("ana", "sales") == Spend(0.75, 0.0)
    finally:
        check.close()


def _admit_in_process(path: str, attempts: int) -> int:
    ledger = SqliteLedger(path)
    admitted = 0
    try:
        for _ in range(attempts):
            with contextlib.suppress(BudgetExceeded):
                _admit(ledger, 0.125)
                admitted += 1
    finally:
        ledger.close()
    return admitted


def test_separate_processes_on_one_file_never_overspend(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.sqlite")
    SqliteLedger(path).close()
    # an executor, not multiprocessing.Pool: a worker that dies raises BrokenProcessPool instead of hanging
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_admit_in_process, path, 6) for _ in range(3)]
        counts = [future.result(timeout=TIMEOUT_S) for future in futures]
    assert sum(counts) == 8  # 1.0 / 0.125, out of 18 attempts
    check = SqliteLedger(path)
    try:
        assert check.count() == 8
    finally:
        check.close()


def test_a_stored_gaussian_blocks_gdp_admits_instead_of_failing(tmp_path: Path) -> None:
    # a history charged under zcdp, read under gdp (a rule switch the docs forbid): refused, never a 500
    ledger = MemoryLedger()
    _admit(ledger, 0.1, 1e-8, event=GaussianEvent(1, 4e6))  # σ beyond the proven range of μ_Z
    with pytest.raises(BudgetExceeded, match="proven for sigma in"):
        _admit(ledger, 0.1, event=LaplaceEvent(1, 10.0), accounting=Accounting("gdp"))
    assert ledger.count() == 1


def test_sqlite_admits_give_up_on_a_frozen_writer_within_the_bound(tmp_path: Path) -> None:
    """A process frozen inside a write transaction held SQLite's write lock and every admit waited 30 s
    (then a 500); now each waits at most `Waits.lock_s`, then `LedgerBusy`, writing nothing (issue 26 item 11)."""
    path = tmp_path / "ledger.sqlite"
    ledger = SqliteLedger(path, waits=Waits(lock_s=0.3))
    frozen = sqlite3.connect(path, isolation_level=None)
    try:
        frozen.execute("BEGIN IMMEDIATE")  # as a process stopped inside an admit holds it
        for attempt in (lambda: _admit(ledger), lambda: ledger.probe(["sales"], 0.3)):
            started = time.monotonic()
            with pytest.raises(LedgerBusy) as busy:
                attempt()
            assert time.monotonic() - started < 2.0 and busy.value.retry_after_s >= 1
        assert ledger.count() == 0
        frozen.execute("ROLLBACK")
        ledger.probe(["sales"], 0.3)
        assert _admit(ledger).epsilon == 0.125
    finally:
        frozen.close()
        ledger.close()
