"""Open each dataset's engine as its policy says: DuckDB on its file (default), or Spark on its sources.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from proxy.engines.duckdb_engine import write_database
    >>> db = Path(tempfile.mkdtemp()) / "d.duckdb"
    >>> write_database(db, ("CREATE TABLE t AS SELECT 1 AS x",))
    >>> with open_engine("d", "duckdb", db, None, threads=1, memory_limit="1GB", timeout_s=5) as engine:
    ...     engine.run("SELECT x FROM t").rows
    ((1,),)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from proxy.engines.base import EngineMisconfigured, QueryEngine
from proxy.engines.duckdb_engine import Engine
from proxy.engines.spark_config import EngineName, SparkSource


@dataclass(frozen=True, slots=True)
class EngineSource:
    """Where one dataset's data is, and the limits its engine runs under."""

    name: str
    path: Path
    spark: SparkSource | None
    threads: int
    memory_limit: str
    timeout_s: float


def _duckdb(source: EngineSource) -> QueryEngine:
    return Engine(source.path, threads=source.threads, memory_limit=source.memory_limit, timeout_s=source.timeout_s)


def _spark(source: EngineSource) -> QueryEngine:
    if source.spark is None:
        raise EngineMisconfigured(f"dataset {source.name}: engine = \"spark\" needs a [spark] table")
    from proxy.engines.spark_engine import SparkEngine  # imports pyspark: only when a dataset uses it

    return SparkEngine(source.name, source.spark, timeout_s=source.timeout_s)


ENGINES: dict[EngineName, Callable[[EngineSource], QueryEngine]] = {"duckdb": _duckdb, "spark": _spark}


def open_engine(
    name: str, engine: EngineName, path: Path, spark: SparkSource | None, *, threads: int, memory_limit: str,
    timeout_s: float,
) -> QueryEngine:
    """The engine of dataset `name` (`ENGINES[engine]`); its catalog is checked by the caller.

    Raises:
        EngineMisconfigured: the data cannot be opened or the engine's hardening did not take.
    """
    return ENGINES[engine](EngineSource(name, path, spark, threads, memory_limit, timeout_s))
