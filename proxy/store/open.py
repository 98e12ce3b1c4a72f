"""Open each dataset's bounding store as its engine says (`STORES`): DuckDB's file beside the ledger, or Spark's
Parquet; each built (or rebuilt) first when missing or stale (proxy/store/duckdb_store.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proxy.engines.spark_config import EngineName
from proxy.policy.load import DatasetPolicy
from proxy.settings import Settings
from proxy.store.duckdb_store import BoundingStore, StoreEngine

if TYPE_CHECKING:  # pyspark is the optional [spark] extra: its store is imported only when a dataset uses it
    from proxy.store.spark_store import SparkStoreEngine


def _duckdb(dataset: DatasetPolicy, directory: Path, settings: Settings) -> StoreEngine:
    return StoreEngine(dataset.name, dataset.path, dataset.catalog, directory, threads=settings.threads,
                       memory_limit=settings.memory_limit, timeout_s=settings.query_timeout_s,
                       answers=settings.answer_memory)


def _spark(dataset: DatasetPolicy, directory: Path, settings: Settings) -> SparkStoreEngine:
    from proxy.store.spark_store import SparkStoreEngine

    assert dataset.spark is not None  # the policy loader requires a [spark] source for engine = "spark"
    return SparkStoreEngine(dataset.name, dataset.spark, dataset.catalog, directory, timeout_s=settings.query_timeout_s,
                             answers=settings.answer_memory)


Opener = Callable[[DatasetPolicy, Path, Settings], BoundingStore[Any]]
STORES: dict[EngineName, Opener] = {"duckdb": _duckdb, "spark": _spark}


def open_bounding_store(dataset: DatasetPolicy, directory: Path, settings: Settings) -> BoundingStore[Any]:
    """The dataset's bounding store in `directory`, built (or rebuilt) first when missing or stale."""
    return STORES[dataset.engine](dataset, directory, settings)
