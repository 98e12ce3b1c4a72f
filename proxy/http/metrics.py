"""Prometheus metrics of one app, in its own CollectorRegistry (tests run several apps in one process).

Request counters and latency histograms count what this process served. The budget figures are not kept
here: `BudgetCollector` reads them from the ledger and the policy at every scrape, so all replicas sharing
a ledger report the same numbers, and a restart loses nothing. Names are listed in docs/operations.md.
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from mechanisms.rounding import up
from proxy import logs
from proxy.http.views.budget import budget_now  # the one computation of a budget: GET /v1/budget's
from proxy.pipeline import STAGES, Env, Stage
from proxy.schemas import BudgetOut

log = logging.getLogger(__name__)

# seconds: from a repeat served from the ledger (~1 ms) to a query at the default time limit (30 s)
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """The counters, histograms and scrape-time gauges of one app."""

    def __init__(self, env_of: Callable[[], Env | None]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "dpproxy_requests", "HTTP requests by route template, method and outcome code ('ok' or the error code)",
            ("route", "method", "code"), registry=self.registry,
        )
        self.request_seconds = Histogram(
            "dpproxy_request_duration_seconds", "HTTP request latency by route template and method",
            ("route", "method"), buckets=BUCKETS, registry=self.registry,
        )
        self.stage_seconds = Histogram(
            "dpproxy_stage_duration_seconds",
            "Time per stage of answering a query: plan (parse, analyse, price, rewrite), admit (the ledger's "
            "check-and-charge), execute (DuckDB), release (noise, thresholds, post-processing)",
            ("stage",), buckets=BUCKETS, registry=self.registry,
        )
        # Labelled children, looked up once: `labels()` validates and locks on every call (~2 µs each, several
        # per query). Every stage appears from the first scrape on, at count 0.
        self._stages = {stage: self.stage_seconds.labels(stage) for stage in STAGES}
        self._done: dict[tuple[str, str, str], tuple[Any, Any]] = {}  # bounded: templates, label()'d codes
        self.in_flight = Gauge("dpproxy_requests_in_flight", "HTTP requests being served", registry=self.registry)
        self.registry.register(BudgetCollector(env_of))

    @contextmanager
    def timed(self, stage: Stage) -> Iterator[None]:
        """Time one pipeline stage (also when it raises): into the histogram and the request's log line."""
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            child = self._stages.get(stage)
            (child if child is not None else self.stage_seconds.labels(stage)).observe(elapsed)
            context = logs.CURRENT.get()
            if context is not None:
                context.stages[stage] = elapsed

    def request_done(self, route: str, method: str, code: str, seconds: float) -> None:
        children = self._done.get((route, method, code))
        if children is None:
            found = (self.requests.labels(route, method, code), self.request_seconds.labels(route, method))
            children = self._done.setdefault((route, method, code), found)
        children[0].inc()
        children[1].observe(seconds)

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The registry and its content type, in the format the scraper's Accept header asks for: Prometheus
        text 0.0.4 by default, OpenMetrics or text 1.0.0 when asked."""
        encode, content_type = choose_encoder(accept or "")
        return encode(self.registry), content_type


@dataclass(frozen=True, slots=True)
class BudgetFigures:
    """One analyst's budget on one dataset, exactly as GET /v1/budget reports it."""

    analyst: str
    role: str
    budget: BudgetOut
    charges: int
    granted_epsilon: float = 0.0  # what operators granted in the current period (rounded up), in `budget` already
    granted_delta: float = 0.0


def budget_figures(env: Env) -> Iterator[BudgetFigures]:
    """Every (analyst, dataset) budget of the policy, computed by the code that answers GET /v1/budget (so
    the gauges and the dashboard agree with it under every accounting rule), plus the number of charges."""
    for analyst in env.policy.analysts:
        for name, allowed in analyst.budgets:
            dataset = env.policy.dataset(name)
            assert dataset is not None  # the policy loader checks that budgets name known datasets
            granted = env.ledger.allowance(dataset=name, analyst=analyst.name)
            yield BudgetFigures(analyst.name, analyst.role, budget_now(env, analyst.name, dataset, allowed),
                                env.ledger.count(analyst=analyst.name, dataset=name),
                                up(granted.epsilon), up(granted.delta))


class BudgetCollector:
    """Budget gauges per analyst and dataset, computed from the ledger and the policy at scrape time."""

    def __init__(self, env_of: Callable[[], Env | None]) -> None:
        self._env_of = env_of

    def collect(self) -> Iterator[Metric]:
        env = self._env_of()
        if env is None:
            return
        up = GaugeMetricFamily("dpproxy_ledger_up", "1 when the ledger answered this scrape, else 0")
        labels = ("analyst", "dataset")
        families = {
            name: GaugeMetricFamily(f"dpproxy_budget_{name}", text, labels=labels)
            for name, text in (
                ("epsilon", "ε budget of the analyst on the dataset (the policy's, plus the period's grants)"),
                ("epsilon_spent", "Σε charged so far (basic composition, rounded up)"),
                ("epsilon_remaining", "ε left under the dataset's accounting rule, at the budget's δ"),
                ("delta", "δ budget of the analyst on the dataset (the policy's, plus the period's grants)"),
                ("delta_spent", "Σδ charged so far (basic composition, rounded up)"),
                ("granted_epsilon", "ε granted by operators in the current budget period (docs/operations.md)"),
                ("granted_delta", "δ granted by operators in the current budget period"),
                ("delta_remaining", "δ left under the dataset's accounting rule"),
            )
        }
        charges = CounterMetricFamily("dpproxy_ledger_charges", "Charges recorded in the ledger", labels=labels)
        operations = CounterMetricFamily("dpproxy_budget_operations", "Grants and new budget periods written by"
                                         " operators", labels=("dataset", "kind"))
        try:
            figures = tuple(budget_figures(env))
            done = Tally((op.operation.dataset, op.operation.kind) for op in env.ledger.operations())
        except Exception:
            log.warning("metrics: the budgets could not be read from the ledger", exc_info=True)
            up.add_metric((), 0)
            yield up
            return
        for f in figures:
            key = (f.analyst, f.budget.dataset)
            for name, family in families.items():
                value = getattr(f.budget, name) if hasattr(f.budget, name) else getattr(f, name)
                family.add_metric(key, value)
            charges.add_metric(key, f.charges)
        for key, count in sorted(done.items()):
            operations.add_metric(key, count)
        up.add_metric((), 1)
        yield up
        yield from families.values()
        yield charges
        yield operations
