"""The reliability flag over HTTP (docs/privacy.md §6): `unreliable` lists exactly the [row, column] positions
whose error bar at the answer's confidence is wider than the value, and a repeat at another confidence
recomputes it from the stored answer's noisy parts, free.
"""

from __future__ import annotations

from typing import Any

import httpx

SQL = ("SELECT region, COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean, STDDEV(duration_s) AS spread "
       "FROM visits GROUP BY region")
FULL = "/v1/query?detail=cells"  # with the noisy parts under each AVG's bars (the default summary leaves them out)


def _expected(body: dict[str, Any]) -> list[list[int]]:
    """The rule, from the body's own public numbers."""
    bars = {n["column"]: n for n in body["noise"]}
    flagged = []
    for j, name in enumerate(body["columns"]):
        if name not in bars:
            continue
        for i, row in enumerate(body["rows"]):
            value, bar = row[j], bars[name]
            width = bar["ci"] if bar.get("ci") is not None else bar["ci_rows"][i]
            if value is None or width is None:
                continue
            if width > abs(value):
                flagged.append([i, j])
    return sorted(flagged)


def test_unreliable_cells_are_those_whose_bar_is_wider_than_the_value(analyst: httpx.Client) -> None:
    response = analyst.post(FULL, json={"sql": SQL, "epsilon": 0.02, "delta": 0.0, "mechanism": "laplace"})
    assert response.status_code == 200, response.text
    body = response.json()
    bars = {n["column"]: n for n in body["noise"]}
    assert "ci_rows" not in bars["n"] and len(bars["mean"]["ci_rows"]) == len(body["rows"])
    assert bars["mean"]["parts_rows"] is not None  # with ?detail=cells (the summary leaves them out)
    assert body["unreliable"] == _expected(body)
    # the flag is not vacuous: at ε = 0.02 on the small test demo the spread's noise dominates in some region in
    # about 94 % of answers (150 draws: 9 without), so in at least one of five fresh answers but with probability
    # about 0.06^5 < 1e-6; each obeys the rule
    spread = body["columns"].index("spread")
    flagged = [body]
    for i in range(1, 5):
        if any(j == spread for _, j in flagged[-1]["unreliable"]):
            break
        other = analyst.post(FULL, json={"sql": SQL, "epsilon": 0.02 + i * 1e-6, "delta": 0.0, "mechanism": "laplace"})
        assert other.status_code == 200 and other.headers.get("X-DP-Repeat") != "true", other.text
        flagged.append(other.json())
        assert flagged[-1]["unreliable"] == _expected(flagged[-1])
    assert any(j == spread for _, j in flagged[-1]["unreliable"])
    for i, row in enumerate(body["rows"]):  # each row's bar: its interval's farther end from the value
        width, interval = bars["mean"]["ci_rows"][i], bars["mean"]["interval_rows"][i]
        value = row[body["columns"].index("mean")]
        assert (width is None) == (value is None) == (interval is None)
        if width is not None:
            assert interval[0] <= value <= interval[1] and width == max(value - interval[0], interval[1] - value)
            count = bars["mean"]["parts_rows"][i][1]  # the row's noisy count: the any-data bar is wider
            assert width <= bars["mean"]["ci_times_count"] / count

    again = analyst.post(FULL, json={"sql": SQL, "epsilon": 0.02, "delta": 0.0, "mechanism": "laplace",
                                     "confidence": 0.5})
    assert again.status_code == 200 and again.headers["X-DP-Repeat"] == "true"
    repeat = again.json()
    assert repeat["rows"] == body["rows"]
    assert repeat["unreliable"] == _expected(repeat)
    assert set(map(tuple, repeat["unreliable"])) <= set(map(tuple, body["unreliable"]))  # narrower bars: fewer
    mean = {n["column"]: n for n in repeat["noise"]}["mean"]
    assert mean["parts_rows"] == bars["mean"]["parts_rows"]  # the same released parts, a narrower interval
    for new, old in zip(mean["interval_rows"], bars["mean"]["interval_rows"], strict=True):
        assert (new is None and old is None) or (old[0] <= new[0] and new[1] <= old[1])
