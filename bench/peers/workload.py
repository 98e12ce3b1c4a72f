"""The peer workload (issues #12 and #29): each query as the product and plain DuckDB read it, and as each peer's
parser accepts the same question. Plain data only: imported by run.py (project venv) and peer_side.py (peers' venv).

The peers' texts differ only where their parsers require it, never in meaning:
- SmartNoise SQL names a table by schema.table (its metadata's `peers.visits`) and reads `day` as a keyword unless
  quoted; its pandas reader stores `day` as an ISO text 'YYYY-MM-DD' (peer_side.py), so BETWEEN on the two
  strings selects the same days as on dates.
- Qrlew 0.9.27 panics ("not yet implemented") on a DATE '…' literal and on CAST(… AS DATE); it compares `day`
  with the ISO strings, which DuckDB casts to dates.
"""

from __future__ import annotations

from dataclasses import dataclass

TWO_WEEKS = ("2026-03-01", "2026-03-14")
# The declared bounds every system is given (issue #12): 20 rows per user (and group, where a system bounds
# per group), amount clamped to [0, 500]; duration_s to [0, 3600] (the demo's fixed bound before it went auto).
MAX_ROWS = 20
AMOUNT = (0.0, 500.0)
DURATION = (0, 3600)
DELTA = 1e-6  # the peers' δ per query (both need one: SmartNoise thresholds its groups, Qrlew adds Gaussian noise)


@dataclass(frozen=True, slots=True)
class PeerQuery:
    name: str
    title: str
    sql: str  # the product's and plain DuckDB's text
    n_keys: int
    smartnoise: str
    qrlew: str
    columns: tuple[str, ...]  # the output columns in order: the keys, then each aggregate's alias


def _query(name: str, title: str, select: str, *, where: str = "", group: str = "", n_keys: int = 0) -> PeerQuery:
    def text(table: str, day: str, low: str, high: str) -> str:
        clause = f" WHERE {day} BETWEEN {low} AND {high}" if where == "two_weeks" else ""
        grouping = f" GROUP BY {group}" if group else ""
        return f"SELECT {select} FROM {table}{clause}{grouping}"

    a, b = TWO_WEEKS
    return PeerQuery(name, title, text("visits", "day", f"DATE '{a}'", f"DATE '{b}'"), n_keys,
                     text("peers.visits", '"day"', f"'{a}'", f"'{b}'"), text("visits", "day", f"'{a}'", f"'{b}'"),
                     tuple(item.split()[-1] for item in select.split(", ")))


QUERIES = (
    _query("region_count", "COUNT by region", "region, COUNT(*) AS n", group="region", n_keys=1),
    _query("category_sum", "SUM(amount) by category", "category, SUM(amount) AS total", group="category", n_keys=1),
    _query("region_category", "COUNT by region, category", "region, category, COUNT(*) AS n",
           group="region, category", n_keys=2),
    _query("two_weeks", "COUNT by category, two weeks", "category, COUNT(*) AS n", where="two_weeks",
           group="category", n_keys=1),
    _query("count_sum", "COUNT, SUM(amount), no GROUP BY", "COUNT(*) AS n, SUM(amount) AS total"),
    _query("region_avg", "AVG(amount) by region", "region, AVG(amount) AS mean", group="region", n_keys=1),
    _query("category_count", "COUNT by category", "category, COUNT(*) AS n", group="category", n_keys=1),
    _query("duration_avg", "AVG(duration_s) by region", "region, AVG(duration_s) AS mean", group="region",
           n_keys=1),
)
BY_NAME = {q.name: q for q in QUERIES}

REGIONS = ("north", "south", "east", "west", "central")
CATEGORIES = ("groceries", "dining", "electronics", "clothing", "travel", "health", "books", "entertainment")
