"""A repeat's error bars at the confidence it asks for (issue #15): the stored answer, its numbers untouched.

An identical request is answered from the ledger's stored release (proxy/pipeline.py): the same rows, the same
noise, nothing charged. `confidence` is not part of that identity, and the error bars are recomputed at the
repeat's confidence: they are functions of the release's public noise parameters only (the plan's scales, and
on an auto table the bound the stored answer released), so this reveals nothing and costs nothing, while the
rows stay byte for byte the first answer's. Including confidence in the identity instead would charge again
and draw fresh noise for a request that only wants wider or narrower error bars.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.http.views.answer import noised_outputs, unreliable, with_row_bars
from proxy.pipeline import Prepared
from proxy.query import auto_release
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.measures import fixed_point
from proxy.query.auto.bounds import ChosenBound, ChosenBounds
from proxy.query.price.charge import Price
from proxy.schemas import BoundsOut, NoiseOut, QueryResponse

NoiseOf = Callable[[Analysis, Price, float | None], list[NoiseOut]]


def _has_bar(noise: NoiseOut) -> bool:
    return noise.ci is not None or noise.ci_times_count is not None or noise.rank_error is not None


def at_confidence(body: bytes, prepared: Prepared, noise_of: NoiseOf) -> bytes:
    """The stored answer `body` with every error bar at the repeat's confidence; `body` itself, byte for byte,
    when its bars are already at that confidence (or it has none)."""
    level = 0.95 if prepared.confidence is None else float(prepared.confidence)
    stored = QueryResponse.model_validate_json(body)
    if all(n.confidence == level for n in stored.noise if _has_bar(n)):
        return body
    planned = prepared.plan
    if stored.bounds is not None and stored.bounds.chosen and stored.bounds.max_rows is not None:
        bounds = chosen(stored.bounds, planned.analysis)  # what the answer ran at: kept bounds as if declared
        planned = (auto_release.plan_reused(planned, bounds) if stored.bounds.reused
                   else auto_release.plan_at(planned, bounds))
    noise = [_rescaled(new, old) for new, old in zip(noise_of(planned.analysis, planned.price, level), stored.noise,
                                                     strict=True)]
    parts = _stored_parts(planned.analysis, stored)
    if parts is not None:  # each row's interval from the noisy parts the answer released, at the new confidence
        noise = with_row_bars(planned.analysis, planned.price, stored.rows, parts, noise)
    again = stored.model_copy(update={"noise": noise, "unreliable": unreliable(planned.analysis, stored.rows, noise)})
    return again.model_dump_json(exclude={"public"} if stored.bounds is not None else {"bounds", "public"}).encode()


def _rescaled(new: NoiseOut, old: NoiseOut) -> NoiseOut:
    """`new` with the stored per-row half-widths at its confidence where the stored answer has no noisy parts
    (an answer stored before they were kept): each is ci_times_count over the row's noisy count, which the
    repeat keeps, so the ratio of the two ci_times_count carries it over."""
    if old.ci_rows is None or not old.ci_times_count or new.ci_times_count is None or old.parts_rows is not None:
        return new
    ratio = new.ci_times_count / old.ci_times_count
    return new.model_copy(update={"ci_rows": [None if w is None else w * ratio for w in old.ci_rows]})


def _stored_parts(analysis: Analysis, stored: QueryResponse) -> list[list[tuple[int, ...] | None]] | None:
    """Per row and output, the noisy parts the stored answer released (`parts_rows`), as `Release.parts`."""
    by_output: dict[int, list[list[int] | None]] = {}
    for j, entry in zip(noised_outputs(analysis), stored.noise, strict=True):
        if entry.parts_rows is not None:
            by_output[j] = entry.parts_rows
    if not by_output:
        return None
    width = len(analysis.outputs)
    return [[None if j not in by_output or by_output[j][i] is None else tuple(by_output[j][i] or ())
             for j in range(width)] for i in range(len(stored.rows))]


def chosen(bounds: BoundsOut, analysis: Analysis) -> ChosenBounds:
    """Every bound a stored answer reports it ran at (rows, groups, clamps, caps), as the selection chose them.

    A clamp keeps the declared end it did not choose; a cap is reported in the column's units, C / grid, exact
    in binary for the power-of-two grids of proxy/query/analyse/measures.py, so C comes back exactly.
    """
    table = analysis.table
    clamps: dict[str, list[float]] = {}
    caps: list[tuple[str, int]] = []
    for part in bounds.parts:
        spec = table.column(part.column or "")
        if part.value is None or spec is None or spec.bounds is None:
            continue
        if part.bound == "total":
            caps.append((spec.name, round(part.value * fixed_point(spec)[0])))
        elif part.bound in ("lower", "upper"):
            clamps.setdefault(spec.name, [spec.bounds[0], spec.bounds[1]])[part.bound == "upper"] = part.value
    groups = next((p.value for p in bounds.parts if p.bound == "max_groups"), None)
    return ChosenBounds(
        tuple(ChosenBound(p.bound, p.column, p.value, p.limit, p.epsilon, p.q) for p in bounds.parts),
        int(bounds.max_rows if bounds.max_rows is not None else table.max_rows),
        analysis.max_groups if groups is None else int(groups),
        tuple((name, min(lo, hi), max(lo, hi)) for name, (lo, hi) in clamps.items()),
        tuple(caps),
    )
