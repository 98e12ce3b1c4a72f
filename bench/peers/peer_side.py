"""The peers' side of bench/peers/run.py, run under the peers' own Python (bench/peers/requirements.txt).

    /work/peervenv/bin/python bench/peers/peer_side.py < request.json > answers.json

The request names the DuckDB file, ε, the number of answers, the queries and the peers; the reply holds each
peer's raw answers (rows as [keys..., values...]) with the wall and CPU seconds of each, and its version. The
scoring is run.py's, in the project's venv, so every system is scored by the same code. A peer that cannot be
imported or that fails on a query is reported with the error, never dropped silently.

- SmartNoise SQL (`snsql.from_df`, its pandas reader: the frame is loaded into an in-memory SQLite once, then
  each query is rewritten and run there): metadata with user_id the private id, `max_ids` = 20 rows per user
  (it bounds rows per user over all groups, reservoir-sampled), amount in [0, 500], duration_s in [0, 3600],
  its defaults otherwise (groups thresholded by δ, `censor_dims`). It has no engine for DuckDB.
- Qrlew (`pyqrlew`): `Relation.rewrite_with_differential_privacy` with the privacy unit user_id,
  `max_multiplicity` = 20, amount and duration_s ranges as above, region's and category's public values
  declared (as the product's policy declares them, so neither spends on partition selection), and the table's
  size (Qrlew reads the row count as public: it bounds counts by it). The rewritten SQL, PostgreSQL dialect,
  runs unchanged on DuckDB over the same file the product reads, so both peers' noise is drawn in SQL by the
  engine (Qrlew's RANDOM()) or in Python (SmartNoise). Qrlew's schema is taken from an empty SQLite table with
  the same columns (`Dataset.from_database` needs a SQLAlchemy engine; DuckDB has none installed here).
"""

from __future__ import annotations

import json
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import duckdb
from workload import AMOUNT, BY_NAME, CATEGORIES, DELTA, DURATION, MAX_ROWS, REGIONS, PeerQuery


def _plain(value: Any) -> Any:
    """A JSON value: numbers as float, everything else (keys) as text, NULL as null."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def _timed(fn: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


class SmartNoise:
    name = "smartnoise"
    package = "smartnoise-sql"

    def __init__(self, conn: duckdb.DuckDBPyConnection, epsilon: float) -> None:
        import snsql

        started = time.perf_counter()
        frame = conn.execute("SELECT user_id, region, age, strftime(day, '%Y-%m-%d') AS day, category, amount, "
                             "duration_s FROM visits").df()
        table = {"max_ids": MAX_ROWS, "row_privacy": False,
                 "user_id": {"type": "int", "private_id": True},
                 "region": {"type": "string"}, "category": {"type": "string"}, "age": {"type": "int"},
                 "day": {"type": "string"},
                 "amount": {"type": "float", "lower": AMOUNT[0], "upper": AMOUNT[1], "nullable": True},
                 "duration_s": {"type": "int", "lower": DURATION[0], "upper": DURATION[1]}}
        self.reader = snsql.from_df(frame, privacy=snsql.Privacy(epsilon=epsilon, delta=DELTA),
                                    metadata={"peers": {"peers": {"visits": table}}})
        self.setup_seconds = time.perf_counter() - started

    def answer(self, query: PeerQuery) -> list[list[Any]]:
        header, *rows = self.reader.execute(query.smartnoise)
        order = [list(header).index(column) for column in query.columns]
        return [[_plain(row[i]) for i in order] for row in rows]


class Qrlew:
    name = "qrlew"
    package = "pyqrlew"

    def __init__(self, conn: duckdb.DuckDBPyConnection, epsilon: float) -> None:
        import pyqrlew
        from sqlalchemy import create_engine, text

        started = time.perf_counter()
        engine = create_engine("sqlite://")
        with engine.begin() as sqlite:
            sqlite.execute(text("CREATE TABLE visits (user_id BIGINT, region TEXT, age INTEGER, day DATE, "
                                "category TEXT, amount DOUBLE, duration_s INTEGER)"))
        empty = pyqrlew.Dataset.from_database("demo", engine)
        rows = conn.execute("SELECT COUNT(*) FROM visits").fetchone()[0]  # type: ignore[index]
        size = json.loads(empty.size or "{}")
        _set_sizes(size, str(rows))
        described = str(empty).split("\n")[0].removeprefix("Dataset: ")
        dataset = pyqrlew.Dataset.from_str(described, empty.schema, json.dumps(size))
        dataset = dataset.visits.amount.with_range(*AMOUNT)
        dataset = dataset.visits.duration_s.with_range(*DURATION)
        dataset = dataset.with_possible_values(None, "visits", "region", list(REGIONS))
        self.dataset = dataset.with_possible_values(None, "visits", "category", list(CATEGORIES))
        self.conn, self.epsilon = conn, epsilon
        self.setup_seconds = time.perf_counter() - started

    def answer(self, query: PeerQuery) -> list[list[Any]]:
        relation = self.dataset.relation(query.qrlew)
        private = relation.rewrite_with_differential_privacy(
            self.dataset, [("visits", [], "user_id")], {"epsilon": self.epsilon, "delta": DELTA},
            max_multiplicity=float(MAX_ROWS))
        cursor = self.conn.execute(private.relation().to_query())
        names = [d[0] for d in cursor.description]
        order = [names.index(c) for c in query.columns] if set(query.columns) <= set(names) else range(len(names))
        return [[_plain(row[i]) for i in order] for row in cursor.fetchall()]


def _set_sizes(node: Any, rows: str) -> None:
    """Every table and column size in Qrlew's size statistics set to the table's row count."""
    if isinstance(node, dict):
        if "multiplicity" in node:  # a table's or a column's statistics (a distribution has none)
            node["size"] = rows
        for value in node.values():
            _set_sizes(value, rows)
    elif isinstance(node, list):
        for item in node:
            _set_sizes(item, rows)


PEERS = {"smartnoise": SmartNoise, "qrlew": Qrlew}


def run(request: dict[str, Any]) -> dict[str, Any]:
    conn = duckdb.connect(request["db"], read_only=True, config={"threads": request.get("threads", 2)})
    conn.execute("SET enable_progress_bar = false")
    out: dict[str, Any] = {"python": sys.version.split()[0], "peers": {}}
    for name in request["peers"]:
        peer: dict[str, Any] = {"queries": {}}
        out["peers"][name] = peer
        cls = PEERS[name]
        try:
            peer["version"] = metadata.version(cls.package)
            system = cls(conn, float(request["epsilon"]))
            peer["setup_seconds"] = system.setup_seconds
        except Exception as err:  # the peer is skipped with its reason, and the run goes on
            peer["skipped"] = f"{type(err).__name__}: {err}"
            print(f"peers: {name} skipped: {peer['skipped']}", file=sys.stderr, flush=True)
            continue
        for query_name in request["queries"]:
            query = BY_NAME[query_name]
            print(f"peers: {name} {query_name}", file=sys.stderr, flush=True)
            answers, wall, cpu = [], [], []
            try:
                for _ in range(int(request["answers"])):
                    rows, seconds, cpu_seconds = _timed(lambda q=query, s=system: s.answer(q))
                    answers.append(rows)
                    wall.append(seconds)
                    cpu.append(cpu_seconds)
                peer["queries"][query_name] = {"answers": answers, "seconds": wall, "cpu_seconds": cpu}
            except BaseException as err:  # Qrlew panics (a BaseException) on SQL it does not support
                if isinstance(err, KeyboardInterrupt):
                    raise
                peer["queries"][query_name] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
    conn.close()
    return out


if __name__ == "__main__":
    json.dump(run(json.load(sys.stdin)), sys.stdout)
