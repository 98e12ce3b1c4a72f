"""The reliability flag over HTTP (docs/privacy.md §6): `unreliable` lists exactly the [row, column] positions
whose error bar at the answer's confidence is wider than the value (STDDEV: its variance), and a repeat at
another confidence recomputes it from the stored answer, free.
"""

from __future__ import annotations

from typing import Any

import httpx

SQL = ("SELECT region, COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean, STDDEV(duration_s) AS spread "
       "FROM visits GROUP BY region")


def _expected(body: dict[str, Any]) -> list[list[int]]:
    """The rule, from the body's own public numbers."""
    bars = {n["column"]: n for n in body["noise"]}
    flagged = []
    for j, name in enumerate(body["columns"]):
        if name not in bars:
            continue
        for i, row in enumerate(body["rows"]):
            value, bar = row[j], bars[name]
            width = bar["ci"] if bar["ci"] is not None else bar["ci_rows"][i]
            if value is None or width is None:
                continue
            if width > (value * value if name == "spread" else abs(value)):
                flagged.append([i, j])
    return sorted(flagged)


def test_unreliable_cells_are_those_whose_bar_is_wider_than_the_value(analyst: httpx.Client) -> None:
    response = analyst.post("/v1/query", json={"sql": SQL, "epsilon": 0.02, "delta": 0.0, "mechanism": "laplace"})
    assert response.status_code == 200, response.text
    body = response.json()
    bars = {n["column"]: n for n in body["noise"]}
    assert bars["n"]["ci_rows"] is None and len(bars["mean"]["ci_rows"]) == len(body["rows"])
    assert body["unreliable"] == _expected(body)
    # at ε = 0.02 on the small test demo the spread's noise dominates somewhere: the flag is not vacuous
    assert any(j == body["columns"].index("spread") for _, j in body["unreliable"])
    for i, row in enumerate(body["rows"]):  # each row's bar is ci_times_count over a positive noisy count
        width = bars["mean"]["ci_rows"][i]
        assert (width is None) == (row[body["columns"].index("mean")] is None)
        if width is not None:
            assert width <= bars["mean"]["ci_times_count"]

    again = analyst.post("/v1/query", json={"sql": SQL, "epsilon": 0.02, "delta": 0.0, "mechanism": "laplace",
                                            "confidence": 0.5})
    assert again.status_code == 200 and again.headers["X-DP-Repeat"] == "true"
    repeat = again.json()
    assert repeat["rows"] == body["rows"]
    assert repeat["unreliable"] == _expected(repeat)
    assert set(map(tuple, repeat["unreliable"])) <= set(map(tuple, body["unreliable"]))  # narrower bars: fewer
    ratio = ({n["column"]: n for n in repeat["noise"]}["mean"]["ci_times_count"] / bars["mean"]["ci_times_count"])
    for new, old in zip({n["column"]: n for n in repeat["noise"]}["mean"]["ci_rows"], bars["mean"]["ci_rows"],
                        strict=True):
        assert (new is None and old is None) or abs(new - old * ratio) <= 1e-9 * abs(old * ratio)
