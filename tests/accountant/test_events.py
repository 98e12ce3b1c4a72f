"""Events: validated on construction, and the JSON wire form round-trips exactly (stored charges)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accountant.events import (
    ComposedEvent,
    Event,
    GaussianEvent,
    LaplaceEvent,
    ParallelEvent,
    ThresholdEvent,
    from_json,
    to_json,
)

finite = st.floats(min_value=1e-12, max_value=1e12, allow_nan=False, allow_infinity=False)
leaves = st.one_of(
    st.builds(LaplaceEvent, st.one_of(st.just(0.0), finite), finite),
    st.builds(GaussianEvent, st.one_of(st.just(0.0), finite), finite),
    st.builds(ThresholdEvent, finite, st.floats(min_value=1e-300, max_value=0.999)),
)
events: st.SearchStrategy[Event] = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.builds(ComposedEvent, st.lists(children, max_size=4).map(tuple)),
        st.builds(ParallelEvent, st.lists(children, max_size=4).map(tuple)),
    ),
    max_leaves=12,
)


@given(events)
def test_wire_form_round_trips_through_json_text(event: Event) -> None:
    text = json.dumps(to_json(event), allow_nan=False)
    assert from_json(json.loads(text)) == event  # exact: floats round-trip through repr


def test_wire_form_names_the_kind() -> None:
    assert to_json(GaussianEvent(2.0, 4.0)) == {"kind": "gaussian", "sensitivity": 2.0, "sigma": 4.0}
    assert to_json(ParallelEvent(())) == {"kind": "parallel", "events": []}


@pytest.mark.parametrize(
    "build",
    [
        lambda: LaplaceEvent(1.0, 0.0),
        lambda: LaplaceEvent(-1.0, 1.0),
        lambda: LaplaceEvent(1.0, math.inf),
        lambda: GaussianEvent(1.0, math.nan),
        lambda: ThresholdEvent(0.0, 1e-6),
        lambda: ThresholdEvent(1.0, 0.0),
        lambda: ThresholdEvent(1.0, 1.0),
    ],
    ids=[
        "zero-scale",
        "negative-sensitivity",
        "infinite-scale",
        "nan-sigma",
        "zero-epsilon",
        "zero-delta",
        "delta-one",
    ],
)
def test_invalid_parameters_are_refused(build: object) -> None:
    with pytest.raises(ValueError):
        build()  # type: ignore[operator]


@pytest.mark.parametrize(
    "data",
    [{"kind": "staircase", "scale": 1.0}, {"scale": 1.0}, {"kind": 3}],
    ids=["unknown-kind", "missing-kind", "non-string-kind"],
)
def test_unknown_kinds_are_refused(data: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="unknown event kind"):
        from_json(data)


def test_stored_parameters_are_revalidated() -> None:
    with pytest.raises(ValueError):
        from_json({"kind": "laplace", "sensitivity": 1.0, "scale": -2.0})
