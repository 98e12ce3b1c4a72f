"""The engine names the rest of the shell imports: the interface and errors (proxy/engines/base.py) and the
default engine, DuckDB (proxy/engines/duckdb_engine.py). Spark is proxy/engines/spark_engine.py, opened
per dataset by proxy/engines/open.py.

Example:
    >>> Engine.target.dialect, issubclass(ExecutionTimeout, EngineError)
    ('duckdb', True)
"""

from proxy.engines.base import (
    EngineError,
    EngineMisconfigured,
    ExecutionFailed,
    ExecutionTimeout,
    QueryEngine,
    Rows,
)
from proxy.engines.duckdb_engine import Engine, write_database

__all__ = [
    "Engine",
    "EngineError",
    "EngineMisconfigured",
    "ExecutionFailed",
    "ExecutionTimeout",
    "QueryEngine",
    "Rows",
    "write_database",
]
