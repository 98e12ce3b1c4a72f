"""The HTTP contract: pydantic request and response models, nothing else."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from mechanisms.rounding import down, up
from proxy.query.parse.lexical_gate import MAX_LENGTH

MAX_DIGITS = 40  # significant digits of a privacy parameter
EXPONENTS = (-400, 300)  # decimal exponents accepted: beyond, no float carries the number (or it rounds to 0)
_DELTA_LIMIT = Fraction(1, 1000)  # price._check refuses δ >= 0.001: such a δ keeps its nearest float, so it still is


def _exact(value: object) -> Fraction:
    """A JSON number (an exact Decimal, proxy/http/decimal_json.py; a float or int from Python callers) as a
    Fraction, or a ValueError naming what is wrong. Strings and booleans are not numbers."""
    if isinstance(value, bool) or not isinstance(value, Decimal | int | float):
        raise ValueError(f"must be a JSON number, got {type(value).__name__}")
    number = value if isinstance(value, Decimal) else Decimal(value)  # a float: its exact binary value
    if not number.is_finite():
        raise ValueError(f"must be a finite number, got {number}")
    if number and len(number.as_tuple().digits) > MAX_DIGITS:
        raise ValueError(f"has more than {MAX_DIGITS} significant digits")
    if number and not EXPONENTS[0] <= number.adjusted() <= EXPONENTS[1]:
        raise ValueError(f"must be between 1e{EXPONENTS[0]} and 1e{EXPONENTS[1]} in magnitude")
    return Fraction(number)


def _charge_down(value: object) -> object:
    """ε or δ as the largest float at or below the decimal the analyst wrote: the query is priced for it,
    so its charge (and the mechanism's true ε, δ) never exceeds the request's digits, and ten charges of
    0.1 add up to at most 1 exactly."""
    return value if value is None else down(_exact(value))


def _delta_down(value: object) -> object:
    """δ as `_charge_down`, except at or above the largest δ a query may ask for: refused when priced."""
    if value is None:
        return value
    exact = _exact(value)
    return down(exact) if exact < _DELTA_LIMIT else float(exact)


def _noise_up(value: object) -> object:
    return value if value is None else up(_exact(value))  # more noise, never less: charged at its true cost


ChargeNumber = Annotated[float | None, BeforeValidator(_charge_down)]
DeltaNumber = Annotated[float | None, BeforeValidator(_delta_down)]
NoiseNumber = Annotated[float | None, BeforeValidator(_noise_up)]


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    sql: str = Field(min_length=1, max_length=MAX_LENGTH, description="one SELECT statement")
    dataset: str | None = Field(None, max_length=64, description="defaults to your only dataset")
    # JSON numbers arrive as exact Decimals (proxy/http/decimal_json.py); JSON true or "0.1" never become a privacy
    # parameter (strict, and `_exact` refuses them); NaN, ±Infinity, > 40 digits are refused with a message
    epsilon: ChargeNumber = Field(None, gt=0, strict=True, description="ε for this query; defaults to the dataset's")
    delta: DeltaNumber = Field(
        None, ge=0, lt=1, strict=True, description="δ for this query; defaults to the dataset's"
    )
    mechanism: Literal["laplace", "gaussian", "auto"] | None = Field(
        None, description='the noise; defaults to the dataset\'s; "auto": the one with the smaller expected error')
    dialect: str | None = Field(
        None, max_length=32,
        description="the SQL dialect of `sql`: duckdb, postgres, mysql, bigquery, snowflake or tsql; defaults to "
                    "the dataset's",
    )
    confidence: float | None = Field(
        None, gt=0, lt=1, strict=True,
        description="the confidence of the error bars in `noise` (default 0.95); error bars are computed from "
                    "public noise parameters and cost nothing",
    )
    noise_multiplier: NoiseNumber = Field(
        None, gt=0, strict=True,
        description="instead of epsilon: noise = this multiple of each aggregate's sensitivity (Laplace b, "
                    "Gaussian σ); the response reports what it costs",
    )

    @model_validator(mode="after")
    def _one_knob(self) -> QueryRequest:
        if self.epsilon is not None and self.noise_multiplier is not None:
            raise ValueError("send epsilon or noise_multiplier, not both")
        return self


class NoiseOut(BaseModel):
    """The noise and error bars of one released column. Every optional field is left out of the JSON where it
    has no value (each applies to some aggregates only): an answer stays small (issue #30: the README's
    example within 2 KB), and a reader takes an absent field as null."""

    column: str
    mechanism: Literal["laplace", "gaussian", "exponential"]
    scale: float | None = Field(None, description="Laplace b or Gaussian σ, in the column's units; absent if derived")
    ci95: float | None = Field(None, description="half-width of the 95% noise interval; absent if derived")
    confidence: float = Field(0.95, description="the confidence of `ci`, `ci_times_count` and `rank_error`")
    ci: float | None = Field(None, description="COUNT, SUM: half-width of the noise interval at `confidence`")
    ci_times_count: float | None = Field(
        None, description="AVG, VAR, STDDEV: the half-width at `confidence` times the row's noisy count: divide "
                          "by it (docs/privacy.md §9, error bars; STDDEV: in variance units)",
    )
    rank_error: float | None = Field(
        None, description="quantiles (exponential mechanism): at `confidence`, the released value lies between "
                          "the true quantiles of ranks q·n ± this many rows, in every group",
    )
    ci_rows: list[float | None] | None = Field(
        None, description="answers, AVG, VAR, STDDEV: each row's half-width at `confidence`, the larger distance "
                          "from the value to an end of its `interval_rows` (null where the value is NULL)",
    )
    method: Literal["noise", "parts", "rank"] | None = Field(
        None, description="how the error bar is computed: `noise` (COUNT, SUM: the noise's exact interval), "
                          "`parts` (AVG, VAR, STDDEV in an answer: from the row's released noisy parts, "
                          "docs/privacy.md §6), `rank` (quantiles); coverage is over the noise only",
    )
    interval_rows: list[list[float] | None] | None = Field(
        None, description="answers, AVG, VAR, STDDEV: each row's interval [lo, hi] at `confidence` for the value "
                          "the bounded rows give, from the row's noisy parts (method `parts`)",
    )
    parts_rows: list[list[int] | None] | None = Field(
        None, description="answers, AVG, VAR, STDDEV: each row's released noisy parts in their integer units "
                          "(AVG: centred sum, count; VAR, STDDEV: count, centred sum, centred squares), from "
                          "which `interval_rows` is computed; a repeat recomputes it from them (with "
                          "?detail=cells; absent in the default summary)",
    )

    @model_serializer(mode="wrap")
    def _without_nulls(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        # Only the noise entries drop their nulls: elsewhere a null is part of the contract (`charge.events`).
        # No return annotation: with one, pydantic would describe the output by it in the OpenAPI document
        # (`Any` is the empty schema) instead of by the fields above.
        return {name: value for name, value in handler(self).items() if value is not None}


Accounting = Literal["basic", "zcdp", "gdp"]


class CostOut(BaseModel):
    """One query's charge in the currency of one accounting."""

    accounting: Accounting
    epsilon: float | None = Field(None, description="basic: the query's ε")
    delta: float = Field(description="basic: the query's δ; zcdp/gdp: the δ of its partition selection")
    rho: float | None = Field(None, description="zcdp: the query's ρ (δ-approximate zCDP)")
    mu: float | None = Field(None, description="gdp: the query's μ (δ-approximate μ-GDP)")


class ScopeOut(BaseModel):
    """The cells of one table's cell space a charge is for (docs/privacy.md §7)."""

    table: str
    cells: int = Field(description="how many cells the charge covers")
    of: int = Field(description="how many cells the table's cell space has")
    listed: list[dict[str, Any]] = Field(
        description="the cells by coordinate ('<other>': a value outside the declared domain, null: NULL), "
                    "at most 100; empty when the policy's cell space has changed since the charge, and in a summary "
                    "answer (POST /v1/query without ?detail=cells)"
    )
    truncated: bool = Field(description="true when more cells are covered than listed")
    bitmap: str | None = Field(
        description="null in a summary answer (POST /v1/query without ?detail=cells); every covered cell, as "
                    "stored: base64 of the zlib-compressed bitmap (bit i: cell i, "
                    "numpy packbits order); `space` names the cell space it indexes"
    )
    space: str = Field(description="the cell space's fingerprint (table, privacy unit, axes and domains)")


class ChargeOut(BaseModel):
    id: str | None
    epsilon: float = Field(description="the charge under basic composition")
    delta: float
    mechanism: Literal["laplace", "gaussian"]
    composition: Literal["parallel", "sequential"]
    events: dict[str, Any] | None = Field(
        description="the charge's privacy events as accounted; null in a summary answer (POST /v1/query "
                    "without ?detail=cells)")
    accounting: Accounting = Field("basic", description="the dataset's admit rule")
    costs: list[CostOut] = Field(
        default_factory=list,
        description="the charge under basic composition and under every rule that can account for it",
    )
    scope: ScopeOut | None = Field(
        None, description="the cells this charge is for; null: every privacy unit (no cell can be left out)"
    )


class AccountOut(BaseModel):
    """A budget's history under one accounting (see docs/privacy.md §5)."""

    accounting: Accounting
    epsilon_spent: float = Field(description="the history as an ε (at delta_spent): basic: Σε, the same number as "
                                             "`spent`; zcdp/gdp: the ε its ρ or μ converts to")
    delta_spent: float
    epsilon_remaining: float = Field(description="the ε still available, at the budget's δ")
    delta_remaining: float = Field(description="basic: δ left; zcdp/gdp: δ left for partition selection")
    spent: float = Field(description="the history in this accounting's own currency, which `capacity` bounds: Σε "
                                     "(basic: equal to epsilon_spent), Σρ (zcdp) or √Σμ² (gdp)")
    capacity: float = Field(description="the budget in this accounting's currency: ε, ρ or μ")
    selection_delta_spent: float | None = None
    selection_delta_capacity: float | None = Field(None, description="the δ reserved for partition selection")


class ReportedOut(BaseModel):
    """The tightest ε known, at the budget's δ, for the charges as they happened: reporting only."""

    epsilon: float
    delta: float
    accounting: Accounting = Field(description="the accounting that gives it")


class SharedBudgetOut(BaseModel):
    """The dataset's total budget, shared by all its analysts (collusion-safe)."""

    epsilon: float
    delta: float
    epsilon_remaining: float = Field(description="under the accounting in force, at the budget's δ")
    delta_remaining: float
    accounts: list[AccountOut]


class CellOut(BaseModel):
    cell: dict[str, Any] = Field(description="the cell by coordinate ('<other>': outside the domain)")
    account: AccountOut = Field(description="what the charges covering this cell spent, under the rule in force")


class CellSpaceOut(BaseModel):
    """Spend per cell of one table's cell space: a unit pays only for the charges that cover its cell."""

    table: str
    cells: int = Field(description="how many cells the space has")
    heaviest: list[CellOut] = Field(description="the most-charged cells, at most 20")
    elsewhere: AccountOut = Field(description="a cell that no charge scoped to this space covers")


class PairOut(BaseModel):
    epsilon: float | None = Field(description="null: no ε at this δ (its δ is spent on partition selection)")
    delta: float


class CurveOut(BaseModel):
    beta: list[float] = Field(description="type II error at each alpha: the f-DP trade-off curve")
    pairs: list[PairOut] = Field(description="(ε, δ) pairs the curve implies")


class TradeoffOut(BaseModel):
    """f-DP trade-off curves (type I error α vs type II error β) under the rule in force (docs/privacy.md §8):
    of the history spent so far (worst-off unit) and of the whole budget. Pictures of guarantees, not rules."""

    accounting: Accounting
    alpha: list[float]
    history: CurveOut
    budget: CurveOut


class HistoryReportOut(BaseModel):
    """(ε, δ) of your charges as they happened, by a privacy-loss-distribution accountant (dp-accounting):
    a report of the fixed history, NOT a budget rule — admission stays with the rule in force."""

    epsilon: float
    delta: float
    method: Literal["pld"] = "pld"
    note: str = "report of the fixed history (PLD); not a budget rule"


class BudgetOut(BaseModel):
    """A budget: one spent figure per rule. `epsilon_spent`/`delta_spent` here are always basic composition's
    (Σε, Σδ); `epsilon_remaining`/`delta_remaining` are the rule in force's (`accounting`). Under zcdp or gdp the
    rule in force's own spent figure is its entry in `accounts` (`spent` in ρ or μ, and the ε it converts to):
    a different accounting of the same charges, not a second count. Every number is exact (e.g.
    4.699999999999999 where decimal arithmetic says 4.7): compare and compute with them; `display` is the
    rounded text for people."""

    dataset: str
    epsilon: float
    delta: float
    epsilon_spent: float = Field(
        description="basic composition, whatever the rule in force: the worst-off privacy unit's Σε, the maximum "
                    "over cells, which is Σε of your charges when none is scoped to some cells"
    )
    delta_spent: float = Field(description="the same for Σδ")
    epsilon_remaining: float = Field(description="the ε left under the accounting in force, at the budget's δ")
    delta_remaining: float
    accounting: Accounting = Field("basic", description="the dataset's admit rule")
    accounts: list[AccountOut] = Field(
        default_factory=list, description="your history under basic composition and under the rule in force; "
                                          "empty in a summary answer (POST /v1/query without ?detail=cells)"
    )
    reported: ReportedOut | None = None
    shared: SharedBudgetOut | None = Field(None, description="the dataset's total budget over all analysts")
    cells: list[CellSpaceOut] = Field(
        default_factory=list, description="per cell, for each table some charge is scoped to (docs/privacy.md §7); "
                                          "empty in a summary answer (POST /v1/query without ?detail=cells)"
    )
    display: str | None = Field(
        None, description="for people: spent and remaining rounded to 4 significant digits, e.g. 'ε 0.3 of 5 "
                          "spent (basic), 4.7 left (basic); δ 0 of 1e-06 spent, 1e-06 left'; display only, "
                          "programs read the exact fields"
    )


class PartitionsOut(BaseModel):
    kind: Literal["none", "public", "private"]
    threshold: int | None = Field(None, description="distinct-unit threshold of private partition selection")
    note: str | None = Field(None, description="what private partition selection can hide, and how to avoid it")


class BoundOut(BaseModel):
    """One bound chosen per query (docs/privacy.md §10)."""

    bound: Literal["max_rows", "max_groups", "lower", "upper", "total"] = Field(
        description="max_rows, max_groups, a column's lower or upper clamp bound, or the per-unit L1 cap C of a "
                    "column's SUM and AVG (total, docs/privacy.md §10.2)")
    column: str | None = Field(description="the clamped or capped column (lower, upper, total)")
    value: float | None = Field(description="the bound used; null in a preview (choosing it reads the data)")
    limit: float = Field(description="the policy's limit on this bound")
    epsilon: float = Field(description="the epsilon its selection spent (part of the charge)")
    q: float = Field(description="what the choice aims at: for a clamp, the quantile estimated (a lower bound "
                                 "estimates 1 − q); for total, the target number of units whose total exceeds C, "
                                 "t = √2·groups/ε of the sum; for max_rows and max_groups, the target τ = "
                                 "√2·groups/ε of the count: cells (units) left beyond the bound per cell a unit keeps")


class BoundsOut(BaseModel):
    """The contribution bounds of a query chosen per query ("auto" in the policy; docs/privacy.md §10)."""

    max_rows: int | None = Field(description="the bound used (rows per unit and group); null in a preview, "
                                             "where it is not chosen yet (choosing it reads the data)")
    chosen: bool = Field(True, description="false when the query ran at the declared limits (see note)")
    note: str | None = Field(None, description="why nothing was chosen: the query's shape or a given "
                                               "noise_multiplier; it ran at the declared limits, free of selection")
    max_rows_limit: int = Field(description="the largest bound the selection may choose (the policy's limit)")
    epsilon: float = Field(description="the share of the query's epsilon all selections spent (part of the charge)")
    quantile: float = Field(description="the first part's q (0 without parts)")
    parts: list[BoundOut] = Field(default_factory=list, description="every bound chosen, with its own cost")
    reused: bool = Field(False, description="true when the bounds were chosen by an earlier query of the same "
                                            "shape and kept (docs/privacy.md §10.8): this query ran at them as if "
                                            "declared and paid no selection (`epsilon` 0)")


class QueryResponse(BaseModel):
    ok: Literal[True] = True
    dataset: str
    columns: list[str]
    rows: list[list[Any]]
    charge: ChargeOut | None = Field(description="what this answer was charged; null for an exact answer over "
                                                 "public tables alone (`public`), which is free")
    budget: BudgetOut
    noise: list[NoiseOut]
    partitions: PartitionsOut
    bounds: BoundsOut | None = Field(None, description='present when the table chose its max_rows ("auto")')
    unreliable: list[list[int]] = Field(
        default_factory=list,
        description="[row, column] (0-based, into `rows`) of every released value whose error bar at `confidence` "
                    "is wider than the value itself (STDDEV: its variance): noise dominates it. Post-processing of "
                    "public numbers, free (docs/privacy.md §6)",
    )
    public: bool | None = Field(None, description="present, true, on an exact answer over public tables alone: "
                                                  "no noise, no charge (docs/privacy.md §1)")


class PreviewResponse(BaseModel):
    ok: Literal[True] = True
    dataset: str
    sql: str = Field(description="the bounded, clamped SQL that would run")
    columns: list[str]
    charge: ChargeOut
    budget: BudgetOut = Field(description="the budget as it is now")
    budget_after: BudgetOut = Field(description="the budget after this query")
    admissible: bool
    refusal: str | None = Field(None, description="why the query would be refused, if it would be")
    noise: list[NoiseOut]
    partitions: PartitionsOut
    bounds: BoundsOut | None = Field(None, description='present when the table chooses its max_rows ("auto")')


class BudgetReportOut(BaseModel):
    """Reports of one budget's history (GET /v1/budget): pictures and figures, never admit rules."""

    dataset: str
    tradeoff: TradeoffOut | None = Field(None, description="the f-DP trade-off curves, history and whole budget")
    history_report: HistoryReportOut | None = Field(
        None, description="the PLD accountant's (ε, δ) of the fixed history (reporting only)"
    )


class BudgetsResponse(BaseModel):
    ok: Literal[True] = True
    analyst: str
    budgets: list[BudgetOut]
    reports: list[BudgetReportOut] = Field(default_factory=list, description="per budget, in the same order")


class LedgerEntry(BaseModel):
    id: str
    analyst: str
    dataset: str
    at: str
    sql_sha256: str
    epsilon: float
    delta: float
    composition: str
    events: dict[str, Any]
    scope: ScopeOut | None = None


class LedgerResponse(BaseModel):
    ok: Literal[True] = True
    total: int
    limit: int
    offset: int
    charges: list[LedgerEntry]


class ColumnOut(BaseModel):
    name: str
    type: str
    bounds: tuple[float, float] | None
    unit_level: bool
    groupable: bool
    public_domain: list[Any] | None


class TableOut(BaseModel):
    name: str
    privacy_unit: str
    max_groups: int
    max_rows: int
    columns: list[ColumnOut]


class DatasetOut(BaseModel):
    name: str
    mechanism: Literal["laplace", "gaussian", "auto"]
    epsilon: float
    delta: float
    max_epsilon: float
    tables: list[TableOut]


class DatasetsResponse(BaseModel):
    ok: Literal[True] = True
    datasets: list[DatasetOut]


class ErrorResponse(BaseModel):
    ok: Literal[False] = False
    status: int
    code: str
    error: str
    detail: dict[str, Any]
    charged: bool
