"""The SQL the product generates for a fixed corpus, one line per (query, bounding, engine), for comparing two
trees: the red-team and BI corpora (tests/fixtures/) and every workload query (bench/query_latency.py), planned
on the demo catalog with per-query and store bounding, with fixed and automatic bounds (at max_rows = 3), and
rendered for DuckDB and Spark. A refusal prints its code.

    python scripts/sql_corpus.py > before.txt   # ... change the code ...
    python scripts/sql_corpus.py | diff before.txt -
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.pipeline import engine_sql  # noqa: E402
from proxy.query.auto_release import plan_at, selection_text  # noqa: E402
from proxy.query.catalog import Catalog  # noqa: E402
from proxy.query.errors import QueryError  # noqa: E402
from proxy.query.planner import plan  # noqa: E402
from proxy.query.rewrite.render import DUCKDB, Target  # noqa: E402
from tests.support.demo_catalog import DEMO  # noqa: E402

_REPEAT = re.compile(r"<<(.*?)\*(\d+)>>", re.DOTALL)


def corpus() -> list[tuple[str, str]]:
    """(dialect, query) of every case, in file order."""
    found: list[tuple[str, str]] = []
    for name in ("redteam.sql", "bi_corpus.sql"):
        dialect = "duckdb"
        for line in (ROOT / "tests" / "fixtures" / name).read_text(encoding="utf-8").splitlines():
            if line.startswith("-- tool:"):
                dialect = line.partition("dialect:")[2].strip() or "duckdb"
            if not line.strip() or line.startswith("--"):
                continue
            text = json.loads(line) if line.startswith('"') else line
            found.append((dialect, _REPEAT.sub(lambda m: m.group(1) * int(m.group(2)), text)))
    source = (ROOT / "bench" / "query_latency.py").read_text()
    workload = source[source.index("WORKLOAD = ("):]
    for chunk in re.findall(r'Workload\("[^"]+", "[^"]*",\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)', workload):
        found.append(("duckdb", "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', chunk))))
    return found


def _auto(catalog: Catalog) -> Catalog:
    tables = tuple(dataclasses.replace(t, auto_max_rows=True, max_rows=64) for t in catalog.tables)
    return dataclasses.replace(catalog, tables=tables)


class _Spark:
    target = Target("spark", (("visits", "dp_1_visits"), ("users", "dp_1_users"), ("departments", "dp_1_dep")))


class _DuckDB:
    target = DUCKDB


def lines() -> list[str]:
    out = []
    for number, (dialect, sql) in enumerate(corpus()):
        for label, catalog in (("fixed", DEMO), ("auto", _auto(DEMO))):
            for bounding in ("per_query", "store"):
                try:
                    planned = plan(sql, catalog, epsilon=1.0, delta=1e-8, mechanism="laplace", salt=7,
                                   dialect=dialect, bounding=bounding)
                    texts = []
                    for engine in (_DuckDB(), _Spark()):
                        if planned.auto is not None:
                            texts.append(selection_text(planned, engine.target))
                            texts.append(engine_sql(plan_at(planned, 3), engine))  # type: ignore[arg-type]
                        else:
                            texts.append(engine_sql(planned, engine))  # type: ignore[arg-type]
                    noise = [(n.sensitivity, n.scale) for n in planned.price.noise]
                    result = hashlib.sha256(repr((texts, noise, planned.price.epsilon)).encode()).hexdigest()[:16]
                except QueryError as error:
                    result = f"refused {error.code}"
                except Exception as error:  # a crash is part of the record
                    result = f"crash {type(error).__name__}"
                out.append(f"{number:4d} {label:5s} {bounding:9s} {result}  {sql[:80]!r}")
    return out


if __name__ == "__main__":
    print("\n".join(lines()))
