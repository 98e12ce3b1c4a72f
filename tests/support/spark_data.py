"""Shared by the Spark tests: the demo's tables as Parquet, and a policy that points the demo at Spark.

The same rows serve both engines: DuckDB reads demo.duckdb, Spark reads Parquet files DuckDB wrote from it.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb

from proxy.engines.duckdb_engine import Engine
from proxy.store.duckdb_store import StoreEngine
from tests.support.live import fixed_bounds

MASTER = "local[2]"
TABLES = ("visits", "users")


def export_parquet(database: Path, directory: Path, tables: tuple[str, ...] = TABLES) -> dict[str, Path]:
    """Each table of `database` as `directory/<table>.parquet` (written once; reused when present)."""
    directory.mkdir(parents=True, exist_ok=True)
    out = {t: directory / f"{t}.parquet" for t in tables}
    missing = [t for t, path in out.items() if not path.exists()]
    if missing:
        conn = duckdb.connect(str(database), read_only=True)
        try:
            for table in missing:
                conn.execute(f"COPY {table} TO '{out[table]}' (FORMAT parquet)")
        finally:
            conn.close()
    return out


def spark_policy(duckdb_policy: Path, parquet: dict[str, Path], directory: Path, master: str = MASTER,
                 bounding: str = "per_query", auto: bool = False) -> Path:
    """A copy of a DuckDB policy (one dataset, `demo`) in `directory` whose dataset reads `parquet` on Spark,
    bounded per query (default) or by its bounding store built by Spark (`bounding = "store"`), at the visits
    table's fixed bounds (tests/conftest.py: fixed_bounds) unless `auto` (the demo's automatic bounds)."""
    directory.mkdir(parents=True, exist_ok=True)
    text = duckdb_policy.read_text(encoding="utf-8")
    if not auto:
        text = fixed_bounds(text)
    sources = "\n".join(f"{t} = {{ parquet = {json.dumps(str(p))} }}" for t, p in parquet.items())
    text, found = re.subn(r"^path = .*\n", 'engine = "spark"\n', text, count=1, flags=re.MULTILINE)
    assert found == 1, "the policy has no path line"
    text = re.sub(r'^bounding = "store".*$', f'bounding = "{bounding}"', text, count=1, flags=re.MULTILINE)
    head, tail = text.split("[datasets.demo.tables.", 1)
    spark = f'[datasets.demo.spark]\nmaster = "{master}"\n\n[datasets.demo.spark.tables]\n{sources}\n\n'
    text = head + spark + "[datasets.demo.tables." + tail
    text = re.sub(r"^ledger = .*$", f"ledger = {json.dumps(str(directory / 'ledger.sqlite'))}", text,
                  count=1, flags=re.MULTILINE)
    policy = directory / "policy.toml"
    policy.write_text(text, encoding="utf-8")
    return policy


@contextlib.contextmanager
def beside_duckdb(env: Any, database: Path) -> Iterator[tuple[Any, Any, Any]]:
    """(env, its Spark engine of `demo`, DuckDB bounded alike over `database`: a DuckDB store in the Spark store's
    directory when Spark serves `demo` from its store, else the source bounded per query); closes them all after."""
    spark = env.engine("demo")
    directory = getattr(spark, "directory", None)  # a SparkStoreEngine's
    duck: Any = (StoreEngine("demo", database, env.policy.dataset("demo").catalog, directory, threads=2,
                             memory_limit="1GB", timeout_s=600) if directory is not None else
                 Engine(database, threads=2, memory_limit="1GB", timeout_s=600))
    try:
        yield env, spark, duck
    finally:
        duck.close()
        for _, engine in env.engines:
            engine.close()
