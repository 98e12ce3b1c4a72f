"""The operator dashboard: GET /dashboard (a static page, no data in it) and GET /dashboard/data (admin JSON).

The page (dashboard.html, no build step) asks for an admin key, keeps it in the tab's sessionStorage and
fetches /dashboard/data with it; it is served under a Content-Security-Policy that lets only its own inline
script and style run. The data holds names from the policy, figures from the ledger, charge ids, error codes,
the operators' grants and periods, and, for admins only as GET /v1/audit does, each recent charge's query text
and audit entry (the normalised SQL the analyst sent, never data) and the largest spenders by query shape.
docs/operations.md describes the design.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections import defaultdict
from datetime import UTC, datetime
from fractions import Fraction
from importlib import resources

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from accountant.audit.log import AuditEntry, AuditFilter, AuditLog
from accountant.filter import Budget
from accountant.ledger.charges import Charge
from mechanisms.rounding import up as _up  # how the ledger rounds a spend
from proxy.http.metrics import budget_figures
from proxy.http.middleware.access_log import Rejections
from proxy.http.ops import CREDENTIALED, NO_STORE, AnalystDep, EnvDep, OperationOut, operation_out
from proxy.http.views import budget_curves, budget_shapes
from proxy.http.views.budget import stored
from proxy.pipeline import Env
from proxy.policy import access
from proxy.schemas import BudgetOut, TradeoffOut

router = APIRouter(tags=["ops"])

RECENT = 20  # charges and rejections listed on the dashboard
SPEND_WINDOW = 5000  # newest charges drawn in the spend-over-time chart


def _page() -> tuple[bytes, str]:
    """The dashboard page and its Content-Security-Policy: only its own inline script and style may run."""
    html = resources.files("proxy.http").joinpath("dashboard.html").read_text(encoding="utf-8")
    digests = {}
    for tag in ("script", "style"):
        (inline,) = re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.DOTALL)
        digests[tag] = f"'sha256-{base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()}'"
    policy = (f"default-src 'none'; script-src {digests['script']}; style-src {digests['style']}; "
              "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return html.encode(), policy


PAGE, PAGE_CSP = _page()


@router.get("/dashboard", include_in_schema=False)
def page() -> Response:
    """The operator dashboard: a static page (no data in it) that asks for an admin key."""
    headers = {"Content-Security-Policy": PAGE_CSP, "X-Content-Type-Options": "nosniff",
               "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}
    return Response(PAGE, media_type="text/html; charset=utf-8", headers=headers)


class BudgetRow(BaseModel):
    """One analyst's budget on one dataset, with the figures of GET /v1/budget."""

    analyst: str
    role: str
    dataset: str
    accounting: str  # the dataset's admit rule: epsilon_remaining is under it
    epsilon: float
    epsilon_spent: float
    epsilon_remaining: float
    delta: float
    delta_spent: float
    delta_remaining: float
    charges: int
    tradeoff: TradeoffOut | None = None  # the f-DP curves of the history and of the budget (budget_detail)


class SpendSeries(BaseModel):
    analyst: str
    dataset: str
    points: list[tuple[str, float]]  # (ISO time, cumulative ε spent after the charge at that time)


class ChargeRow(BaseModel):
    id: str
    at: str
    analyst: str
    dataset: str
    epsilon: float
    delta: float
    composition: str
    sql: str | None = None  # the query text of its `admitted` audit entry (None: no entry in the window read)
    audit_seq: int | None = None  # that entry's number in the chain: the page links the charge to it


class AuditRow(BaseModel):
    """A recent charge's `admitted` entry of the audit chain, as GET /v1/audit lists it."""

    seq: int
    at: str
    charge_id: str | None
    sql_sha256: str
    prev_hash: str
    hash: str


class SpenderRow(BaseModel):
    shape: str  # the normalised SQL with its literals blanked (views/budget_shapes.py)
    epsilon: float  # Σε of its charges in the window, rounded up
    charges: int
    analysts: list[str]


class RejectionRow(BaseModel):
    at: str
    analyst: str | None
    dataset: str | None
    route: str
    status: int
    code: str


class DashboardData(BaseModel):
    generated_at: str
    budgets: list[BudgetRow]
    spend: list[SpendSeries]
    spend_window: int  # how many of the newest charges the series draw (older ones are one starting level)
    recent_charges: list[ChargeRow]
    recent_rejections: list[RejectionRow]  # this process only: a ring buffer, lost on restart
    rejections_kept: int
    audit_entries: list[AuditRow]  # the admitted entries of recent_charges, newest first
    spenders: list[SpenderRow]  # the largest spenders by query shape, over the spend window
    operations: list[OperationOut]  # the operators' grants and periods, newest first


@router.get("/dashboard/data", include_in_schema=False, response_model=DashboardData, responses=CREDENTIALED)
def dashboard_data(request: Request, analyst: AnalystDep, env: EnvDep, response: Response) -> DashboardData:
    """Everything the dashboard draws (admins only): budgets, spend over time, recent charges with their query
    text and audit entry, rejections, the largest spenders by query shape, the grants. Never data."""
    access.require_admin(analyst)
    response.headers.update(NO_STORE)
    rejections: Rejections = request.app.state.rejections
    budgets = [
        BudgetRow(
            analyst=f.analyst, role=f.role, dataset=f.budget.dataset, accounting=f.budget.accounting,
            epsilon=f.budget.epsilon, epsilon_spent=f.budget.epsilon_spent,
            epsilon_remaining=f.budget.epsilon_remaining, delta=f.budget.delta, delta_spent=f.budget.delta_spent,
            delta_remaining=f.budget.delta_remaining, charges=f.charges, tradeoff=_tradeoff(env, f.analyst, f.budget),
        )
        for f in budget_figures(env)
    ]
    window = env.ledger.charges(limit=SPEND_WINDOW)
    truncated = env.ledger.count() > len(window)
    audited = _admitted(getattr(request.app.state, "audit", None), len(window))
    return DashboardData(
        generated_at=_iso(datetime.now(UTC)),
        budgets=budgets,
        spend=_spend_series(env, window, truncated),
        spend_window=SPEND_WINDOW,
        recent_charges=[
            ChargeRow(id=c.id, at=_iso(c.at), analyst=c.analyst, dataset=c.dataset, epsilon=c.epsilon,
                      delta=c.delta, composition=c.composition,
                      sql=audited[c.id].sql if c.id in audited else None,
                      audit_seq=audited[c.id].seq if c.id in audited else None)
            for c in window[:RECENT]
        ],
        recent_rejections=[
            RejectionRow(at=_iso(r.at), analyst=r.analyst, dataset=r.dataset, route=r.route, status=r.status,
                         code=r.code)
            for r in rejections.recent(RECENT)
        ],
        rejections_kept=env.settings.rejections_kept,
        audit_entries=[
            AuditRow(seq=e.seq, at=_iso(e.at), charge_id=e.charge_id, sql_sha256=e.sql_sha256, prev_hash=e.prev_hash,
                     hash=e.hash)
            for e in (audited[c.id] for c in window[:RECENT] if c.id in audited)
        ],
        spenders=[
            SpenderRow(shape=r.shape, epsilon=r.epsilon, charges=r.charges, analysts=list(r.analysts))
            for r in budget_shapes.spenders(
                (c.analyst, c.epsilon, audited[c.id].sql if c.id in audited else None) for c in window)
        ],
        operations=[operation_out(op) for op in reversed(env.ledger.operations())][:RECENT],
    )


def _admitted(audit: AuditLog | None, newest: int) -> dict[str, AuditEntry]:
    """The newest `newest` `admitted` entries of the chain by charge id: one per charge, so they cover the
    charges of the window (an entry is written with its charge, in its transaction)."""
    if audit is None or newest == 0:
        return {}
    found = audit.entries(AuditFilter(decision="admitted"), limit=newest)
    return {e.charge_id: e for e in found if e.charge_id is not None}


def _tradeoff(env: Env, analyst: str, figures: BudgetOut) -> TradeoffOut | None:
    """The trade-off curves of one analyst's history on one dataset under its rule (as GET /v1/budget)."""
    dataset = env.policy.dataset(figures.dataset)
    if dataset is None:
        return None
    return budget_curves.curves(stored(env, dataset.name, analyst), dataset, Budget(figures.epsilon, figures.delta))


def _spend_series(env: Env, newest_first: tuple[Charge, ...], truncated: bool) -> list[SpendSeries]:
    """Cumulative ε charged per analyst and dataset after each charge, summed exactly and rounded up as the
    ledger does, so each series ends at `Ledger.spent` (Σε). That is the budget's spend unless charges are
    scoped to cells: then the budget table's spend, the worst-off unit's (docs/privacy.md §7), is lower.
    When the window holds only the newest charges, each series starts at the level the older ones left."""
    grouped: dict[tuple[str, str], list[Charge]] = defaultdict(list)
    for charge in reversed(newest_first):
        grouped[(charge.analyst, charge.dataset)].append(charge)
    series = []
    for (analyst, dataset), charges in sorted(grouped.items()):
        exact = Fraction(0)
        if truncated:
            before = Fraction(env.ledger.spent(analyst, dataset).epsilon) - sum(
                (Fraction(c.epsilon) for c in charges), Fraction(0))
            exact = max(before, Fraction(0))
        points = []
        for charge in charges:
            exact += Fraction(charge.epsilon)
            points.append((_iso(charge.at), _up(exact)))
        series.append(SpendSeries(analyst=analyst, dataset=dataset, points=points))
    return series




def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()
