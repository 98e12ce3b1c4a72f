"""Exact descriptions of the mechanisms a release ran: what the ledger stores for every charge.

Stability contract (as dp_accounting's DpEvent): an event holds the parameters necessary and sufficient to
account for it. Stored charges must stay re-accountable, so classes and fields are never removed and their
meaning never changes; a new mechanism gets a new class. Wire form: {"kind": "...", <fields>}.

All noise is added on an integer grid (sums are scaled to fixed point before DuckDB adds them), so
`sensitivity` is an integer-grid distance and `scale`/`sigma` are in the same grid units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def _check_positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ValueError(f"{name} must be finite and {'>= 0' if allow_zero else '> 0'}, got {value!r}")


@dataclass(frozen=True, slots=True)
class LaplaceEvent:
    """Discrete Laplace noise of `scale` on a vector of L1 `sensitivity`: pure ε = sensitivity / scale.

    Event name: ``laplace``.
    """

    sensitivity: float
    scale: float

    def __post_init__(self) -> None:
        _check_positive("sensitivity", self.sensitivity, allow_zero=True)
        _check_positive("scale", self.scale)


@dataclass(frozen=True, slots=True)
class ExponentialEvent(LaplaceEvent):
    """The exponential mechanism choosing among candidates with probability ∝ exp(−d/`scale`), each d moving
    by at most `sensitivity`/2 between neighbours (over all groups a unit reaches): pure ε = sensitivity /
    scale, the normaliser moving as much as a score (docs/privacy.md §9). Its own kind records what ran.

    It is also ε-bounded-range (docs/privacy.md §5.2.1): for every pair of neighbours, the log-ratio of their
    output probabilities spans at most ε = sensitivity/scale over the outputs (each score moves by at most
    sensitivity/2, in either direction). `zcdp` charges ε²/8 for it (Cesar–Rogers 2021), not the ε²/2 of a
    pure ε-DP mechanism; basic composition, `gdp` and the reports read its pure ε, as for Laplace. Only a
    mechanism with that range may be recorded as one (the exponential mechanism, with or without a
    data-independent base measure; independent ones over the groups or sides a unit reaches, whose ranges add
    up to ε): the ε²/8 rests on it. Any other pure ε-DP mechanism is a `LaplaceEvent`.

    Event name: ``exponential``.
    """


@dataclass(frozen=True, slots=True)
class GaussianEvent:
    """Discrete Gaussian noise of `sigma` on a vector of L2 `sensitivity`: ρ = sensitivity² / (2σ²) zCDP.

    Event name: ``gaussian``.
    """

    sensitivity: float
    sigma: float

    def __post_init__(self) -> None:
        _check_positive("sensitivity", self.sensitivity, allow_zero=True)
        _check_positive("sigma", self.sigma)


@dataclass(frozen=True, slots=True)
class ThresholdEvent:
    """Private partition selection (noisy distinct-unit count against a threshold): (ε, δ)-DP.

    Event name: ``threshold``.
    """

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        _check_positive("epsilon", self.epsilon)
        if not (math.isfinite(self.delta) and 0 < self.delta < 1):
            raise ValueError(f"delta must be in (0, 1), got {self.delta!r}")


@dataclass(frozen=True, slots=True)
class GaussianThresholdEvent:
    """Private partition selection with discrete Gaussian noise of `sigma` on distinct-unit counts: a group is
    released iff its count plus noise reaches `threshold`; a unit touches at most `max_groups` groups.

    The counts of groups both neighbours have move by at most 1 in at most `max_groups` groups (L2 sensitivity
    √max_groups): a Gaussian mechanism, accounted with the other Gaussians of its query (ρ, or the proven μ).
    A group only the added unit creates is released with probability at most P[Z >= threshold − 1], so
    δ = max_groups · P[Z >= threshold − 1] (`mechanisms.threshold.gaussian_delta_of_threshold`).

    Event name: ``gaussian_threshold``.
    """

    max_groups: int
    sigma: float
    threshold: int

    def __post_init__(self) -> None:
        for name in ("max_groups", "threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "max_groups" else 2):
                raise ValueError(f"{name} must be an integer >= {1 if name == 'max_groups' else 2}, got {value!r}")
        _check_positive("sigma", self.sigma)


@dataclass(frozen=True, slots=True)
class ComposedEvent:
    """Mechanisms run on the same data, one after another: losses compose sequentially.

    Event name: ``composed``.
    """

    events: tuple[Event, ...]


@dataclass(frozen=True, slots=True)
class ParallelEvent:
    """Mechanisms run on pairwise disjoint sets of privacy units: the loss is the maximum (docs/privacy.md §4).

    Event name: ``parallel``.
    """

    events: tuple[Event, ...]


@dataclass(frozen=True, slots=True)
class AutoBoundsEvent:
    """A release whose contribution bound was chosen from the data first (proxy/query/auto/bounds.py): the
    exponential mechanism `selection` picks the bound k (a DP quantile of rows per unit and group), then the
    query runs at k with the noise of `query`'s Laplace events rescaled to k. Both ran on the same data, so
    they compose sequentially and this accounts exactly as ``ComposedEvent((selection, query))``.

    `query` is the query priced at the declared limit, before k exists. It is exact for any k: every part is
    Laplace noise whose scale is calibrated to its ε (b(k) = Δ(k)/ε rounded up, ε = Δ(limit)/b(limit)), so
    the pure ε of each part at k is at most the recorded one, and pure ε is all any rule reads of it.

    Several bounds chosen for one query (max_rows, max_groups, a column's clamp: proxy/query/auto/bounds.py)
    each ran one exponential mechanism on the same data: `selection` is the first, `more` the others in the
    order they ran; all compose sequentially with the query, as ``ComposedEvent((selection, *more, query))``.
    An event with no `more` has the wire form it had before the field existed.

    Event name: ``auto_bounds``.
    """

    selection: ExponentialEvent
    query: Event
    more: tuple[ExponentialEvent, ...] = ()


Event = (LaplaceEvent | ExponentialEvent | GaussianEvent | ThresholdEvent | GaussianThresholdEvent | ComposedEvent
         | ParallelEvent | AutoBoundsEvent)

_KINDS: dict[str, type] = {
    "laplace": LaplaceEvent,
    "exponential": ExponentialEvent,
    "gaussian": GaussianEvent,
    "threshold": ThresholdEvent,
    "gaussian_threshold": GaussianThresholdEvent,
    "composed": ComposedEvent,
    "parallel": ParallelEvent,
    "auto_bounds": AutoBoundsEvent,
}
_NAMES = {cls: name for name, cls in _KINDS.items()}


def to_json(event: Event) -> dict[str, Any]:
    """The wire form of an event.

    Example:
        >>> to_json(ComposedEvent((LaplaceEvent(1.0, 10.0),)))
        {'kind': 'composed', 'events': [{'kind': 'laplace', 'sensitivity': 1.0, 'scale': 10.0}]}
    """
    match event:
        case AutoBoundsEvent(selection, query, more):
            wire = {"kind": "auto_bounds", "selection": to_json(selection), "query": to_json(query)}
            return {**wire, "more": [to_json(e) for e in more]} if more else wire
        case ComposedEvent(events) | ParallelEvent(events):
            return {"kind": _NAMES[type(event)], "events": [to_json(e) for e in events]}
        case _:
            fields = {name: getattr(event, name) for name in event.__dataclass_fields__}
            return {"kind": _NAMES[type(event)], **fields}


def from_json(data: dict[str, Any]) -> Event:
    """Rebuild an event from its wire form; the inverse of `to_json`.

    Example:
        >>> from_json({"kind": "gaussian", "sensitivity": 2.0, "sigma": 4.0})
        GaussianEvent(sensitivity=2.0, sigma=4.0)
        >>> from_json(to_json(ExponentialEvent(2.0, 4.0)))
        ExponentialEvent(sensitivity=2.0, scale=4.0)
        >>> from_json(to_json(GaussianThresholdEvent(3, 8.0, 40)))
        GaussianThresholdEvent(max_groups=3, sigma=8.0, threshold=40)
        >>> from_json(to_json(AutoBoundsEvent(ExponentialEvent(1.0, 10.0), LaplaceEvent(5.0, 5.0))))
        AutoBoundsEvent(selection=ExponentialEvent(sensitivity=1.0, scale=10.0), query=LaplaceEvent(sensitivity=5.0, \
scale=5.0), more=())
        >>> to_json(AutoBoundsEvent(ExponentialEvent(1.0, 10.0), LaplaceEvent(5.0, 5.0),
        ...                         (ExponentialEvent(8.0, 80.0),)))  # doctest: +NORMALIZE_WHITESPACE
        {'kind': 'auto_bounds', 'selection': {'kind': 'exponential', 'sensitivity': 1.0, 'scale': 10.0},
         'query': {'kind': 'laplace', 'sensitivity': 5.0, 'scale': 5.0},
         'more': [{'kind': 'exponential', 'sensitivity': 8.0, 'scale': 80.0}]}
    """
    kind = data.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown event kind {kind!r}")
    if cls is AutoBoundsEvent:
        selections = [from_json(e) for e in (data["selection"], *data.get("more", ()))]
        if any(type(e) is not ExponentialEvent for e in selections):
            raise ValueError(f"an auto_bounds selection must be an exponential event, got {data!r}")
        first, *more = selections
        return AutoBoundsEvent(first, from_json(data["query"]), tuple(more))  # type: ignore[arg-type]
    if cls in (ComposedEvent, ParallelEvent):
        return cls(tuple(from_json(e) for e in data["events"]))  # type: ignore[no-any-return]
    integral = {"max_groups", "threshold"} if cls is GaussianThresholdEvent else set()
    fields = {
        name: _integer(data[name]) if name in integral else float(data[name]) for name in cls.__dataclass_fields__
    }
    return cls(**fields)  # type: ignore[no-any-return]


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValueError(f"expected an integer, got {value!r}")
    return int(value)
