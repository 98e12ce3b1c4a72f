"""The request path (DESIGN.md §1): plan (pure, free to reject) → admit (atomic charge) → run → release.

A charge is committed before any result exists and is never refunded: if the engine fails afterwards, the
charge stays and the error says so (`charged: true`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from accountant.filter import Budget, Spend
from accountant.ledger import Charge, Ledger
from mechanisms.sampling import Sampler
from proxy.auth import dataset_for
from proxy.engine import Engine
from proxy.policy import AnalystPolicy, DatasetPolicy, Policy
from proxy.query import QueryPlan, plan
from proxy.query.errors import InvalidParameter
from proxy.query.release import Release, release
from proxy.schemas import QueryRequest
from proxy.settings import Settings


@dataclass(frozen=True, slots=True)
class Env:
    """Everything a request needs, built once at start-up. Holds things; does nothing."""

    settings: Settings
    policy: Policy
    engines: tuple[tuple[str, Engine], ...]
    ledger: Ledger
    sampler: Sampler

    def engine(self, dataset: str) -> Engine:
        return next(engine for name, engine in self.engines if name == dataset)


@dataclass(frozen=True, slots=True)
class Prepared:
    dataset: DatasetPolicy
    budget: Budget
    plan: QueryPlan


@dataclass(frozen=True, slots=True)
class Answer:
    prepared: Prepared
    charge: Charge
    release: Release
    spent: Spend


def prepare(req: QueryRequest, analyst: AnalystPolicy, policy: Policy, salt: int) -> Prepared:
    """Authorise the dataset and plan the query: no data, no budget touched. `salt` keys the bounding."""
    name, budget = dataset_for(analyst, req.dataset)
    dataset = policy.dataset(name)
    assert dataset is not None  # the policy loader checks that budgets name known datasets
    epsilon = dataset.epsilon if req.epsilon is None else req.epsilon
    if epsilon > dataset.max_epsilon:
        raise InvalidParameter(
            f"epsilon {epsilon} is above this dataset's per-query maximum {dataset.max_epsilon}",
            parameter="epsilon", max_epsilon=dataset.max_epsilon,
        )
    delta = dataset.delta if req.delta is None else req.delta
    mechanism = req.mechanism or dataset.mechanism
    planned = plan(req.sql, dataset.catalog, epsilon=epsilon, delta=delta, mechanism=mechanism, salt=salt)
    return Prepared(dataset, budget, planned)


def answer(
    req: QueryRequest, analyst: AnalystPolicy, env: Env, on_admitted: Callable[[Charge], None]
) -> Answer:
    prepared = prepare(req, analyst, env.policy, env.sampler.salt())
    price = prepared.plan.price
    charge = env.ledger.admit(
        analyst=analyst.name, dataset=prepared.dataset.name, sql_sha256=prepared.plan.sql_sha256,
        event=price.event, epsilon=price.epsilon, delta=price.delta, composition=price.composition,
        budget=prepared.budget,
    )
    on_admitted(charge)  # from here on, every failure reports charged: true
    rows = env.engine(prepared.dataset.name).run(prepared.plan.sql, env.settings.query_timeout_s)
    result = release(rows.rows, prepared.plan.analysis, price, env.sampler)
    return Answer(prepared, charge, result, env.ledger.spent(analyst.name, prepared.dataset.name))
