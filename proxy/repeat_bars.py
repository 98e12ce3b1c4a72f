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

from proxy import auto_run
from proxy.pipeline import Prepared
from proxy.query.analyse import Analysis
from proxy.query.price import Price
from proxy.schemas import NoiseOut, QueryResponse

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
    if stored.bounds is not None and stored.bounds.max_rows is not None:  # the bound the stored answer used
        planned = auto_run.plan_at(planned, stored.bounds.max_rows)
    again = stored.model_copy(update={"noise": noise_of(planned.analysis, planned.price, level)})
    return again.model_dump_json(exclude=None if stored.bounds is not None else {"bounds"}).encode()
