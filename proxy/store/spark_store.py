"""The bounding store of a Spark dataset (docs/privacy.md §11): proxy/store/duckdb_store.py's store, built by
Spark as Parquet.

Promises, as the DuckDB store's (proxy/store/duckdb_store.py):
- the ranks are keyed by the deployment key (`bounding.key` beside the ledger) through the explicit keyed hash
  (keyed_hash.py, `store_layout.STORE_HASH`), which DuckDB and Spark compute identically: the store holds the same
  rows and ranks whichever engine builds it (tests/engines/test_spark_store.py);
- a store is a directory `<dataset>.spark-store-<stamp>` of one Parquet directory per table (a public table's
  declared columns copied, as DuckDB's store copies them) and a meta file, named and stamped with a
  fingerprint of its sources (every Parquet file's path, size, mtime, ctime and inode), the catalog, the key (by
  its hash) and the store format; a store whose meta differs is never used: it is rebuilt;
- it is written to a temporary directory, made read-only (files 0444, directories 0555) and renamed into
  place; queries read it through temporary views only (generated SQL has no writes: render.py);
- `refresh` (run before each admission) notices a changed source by its files' stats and rebuilds before the
  next answer; a rebuild swaps the views atomically: a query runs on one store from start to end, and an old
  store's views are dropped once its last query has finished.

Queries are rendered for the engine's `target` before the charge, as on a Spark dataset bounded per query (the
store's SQL, DuckDB text, through render.py's check: `render_text`); the target's views keep their names across
rebuilds (`__dp_<dataset>__store__<table>`, replaced by the new store's), so SQL rendered before a swap runs after it.

Example:
    >>> store_path(Path("/d"), "demo", "0123456789abcdef0123")
    PosixPath('/d/demo.spark-store-0123456789abcdef')
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from pathlib import Path

from proxy.engines.spark_config import SparkSource, SparkTable
from proxy.engines.spark_engine import SparkEngine
from proxy.query.catalog import Catalog
from proxy.query.rewrite import store_layout
from proxy.query.rewrite.render import Target, render_built
from proxy.store.duckdb_store import FORMAT, BoundingStore, StoreError
from proxy.store.histogram_cache import ANSWERS

log = logging.getLogger(__name__)

META_FILE = "_store_meta.json"


def source_files(source: SparkSource) -> list[tuple[str, str, int, int, int, int]]:
    """(table, file, size, mtime, ctime, inode) of every file of the dataset's Parquet sources: what a rebuild is
    detected by. A file added or removed changes the list, a file rewritten or replaced changes its stats: the
    ctime changes with every write and every change of the mtime and cannot be set, so a file replaced in place
    with its size and mtime kept (`cp -p`, `rsync -t`) is a change too (proxy/store/duckdb_store.py `_stats`).

    Raises:
        StoreError: a table is not a local Parquet path (a catalog table or a cluster's storage cannot be
            stat'ed here; use bounding = "per_query").
    """
    files = []
    for table in source.tables:
        if table.kind != "parquet" or "://" in table.location:
            raise StoreError(f"table {table.name}: the bounding store on Spark needs a local Parquet source "
                             f"(its changes are detected by its files' stats), not {table.location}")
        root = Path(table.location)
        found = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in found:
            stat = path.stat()
            files.append((table.name, str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns,
                          stat.st_ino))
    return files


def identity(catalog: Catalog, key: str) -> str:
    """The store's meaning apart from its source: format, hash, catalog and key (by its hash)."""
    key_hash = hashlib.sha256(key.encode()).hexdigest()
    return hashlib.sha256(json.dumps([FORMAT, store_layout.STORE_HASH, repr(catalog), key_hash]).encode()).hexdigest()


def stamp_of(source: SparkSource, ident: str) -> str:
    return hashlib.sha256(json.dumps([ident, source_files(source)]).encode()).hexdigest()


def store_path(directory: Path, dataset: str, stamp: str) -> Path:
    return Path(directory) / f"{dataset}.spark-store-{stamp[:16]}"


def build_spark_store(dataset: str, source: SparkSource, catalog: Catalog, directory: Path, key: str,
                      stamp: str) -> Path:
    """Build the store of `dataset` with Spark into its directory (renamed into place) and return its path.

    Raises:
        StoreError: a table declared one row per unit is not, or Spark failed (its text is in the message:
            this runs before any query, for the operator).
    """
    target = store_path(directory, dataset, stamp)
    temp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    _remove(temp)
    started = time.perf_counter()
    log.info("building the bounding store of dataset %s with Spark into %s", dataset, target.name)
    reader = SparkEngine(f"{dataset}__build", source, timeout_s=24 * 3600.0)
    spark = reader._spark
    views = reader.target
    try:
        for table in catalog.tables:
            if table.one_row_per_unit:
                counted = spark.sql(render_built(store_layout.duplicate_units_sql(table), views)).collect()
                if counted[0][0]:
                    raise StoreError(
                        f"dataset {dataset}: table {table.name} is declared one_row_per_unit but {counted[0][0]} "
                        f"of its rows share their {table.privacy_unit} with an earlier row; remove the declaration")
            begun = time.perf_counter()
            text = render_built(store_layout.select_sql(table, key, f'"{table.name}"'), views)
            spark.sql(text).write.parquet(str(temp / table.name))
            log.info("bounding store of %s: table %s ranked in %.1f s", dataset, table.name,
                     time.perf_counter() - begun)
        for public in catalog.public:  # joins to public tables read them from the store (as duckdb_store.py)
            columns = ", ".join(f'"{c.name}"' for c in public.columns)
            spark.sql(render_built(f'SELECT {columns} FROM "{public.name}"', views)).write.parquet(
                str(temp / public.name))
        (temp / META_FILE).write_text(json.dumps({"format": FORMAT, "fingerprint": stamp, "dataset": dataset}))
        _read_only(temp)
        os.replace(temp, target)
    except StoreError:
        raise
    except Exception as err:
        raise StoreError(f"dataset {dataset}: building the bounding store on Spark failed: {type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''}") from err
    finally:
        reader.close()
        _remove(temp)
    log.info("bounding store of %s built by Spark in %.1f s: %s", dataset, time.perf_counter() - started,
             target.name)
    return target


def open_spark_store(path: Path, stamp: str, dataset: str, master: str, catalog: Catalog,
                     timeout_s: float) -> SparkEngine | None:
    """The store at `path`, if it is the store stamped `stamp`, as the dataset's store views (replacing those of
    an earlier store); else None."""
    try:
        meta = json.loads((path / META_FILE).read_text())
    except (OSError, ValueError):
        return None
    if meta != {"format": FORMAT, "fingerprint": stamp, "dataset": dataset}:
        log.warning("bounding store %s is not the store of its source, catalog and key; it will be rebuilt",
                    path.name)
        return None
    tables = tuple(SparkTable(t.name, "parquet", str(path / t.name)) for t in (*catalog.tables, *catalog.public))
    try:
        return SparkEngine(f"{dataset}__store", SparkSource(master, tables), timeout_s=timeout_s)
    except Exception as err:
        log.warning("bounding store %s cannot be opened (%s); it will be rebuilt", path.name, err)
        return None


class SparkStoreEngine(BoundingStore[SparkEngine]):
    """The engine of a Spark dataset whose queries read its bounding store. Thread-safe; `run` as
    SparkEngine.run, for SQL rendered for `target`."""

    pattern = "spark-store-*"

    def __init__(self, dataset: str, source: SparkSource, catalog: Catalog, directory: Path, *,
                 timeout_s: float = 30.0, answers: int = ANSWERS) -> None:
        super().__init__(dataset, catalog, directory, timeout_s, answers)
        self.source = source
        self._identity = identity(catalog, self._key)
        self.refresh()

    @property
    def target(self) -> Target:
        """Spark's dialect over the store's views (their names never change: module docstring)."""
        return SparkSource(self.source.master, self.source.tables).target(f"{self.dataset}__store")

    def ready(self, timeout_s: float) -> None:
        with self._lease() as engine:
            engine.ready(timeout_s)

    def close(self) -> None:
        """Drop the store's views (the store stays on disk for the next start)."""
        current = self._engines.current
        self._engines.close()
        if current is not None:
            current.close()

    def _source_stamp(self) -> str:
        return stamp_of(self.source, self._identity)

    def _path(self, stamp: str) -> Path:
        return store_path(self.directory, self.dataset, stamp)

    def _open(self, path: Path, stamp: str) -> SparkEngine | None:
        return open_spark_store(path, stamp, self.dataset, self.source.master, self.catalog, self.timeout_s)

    def _build_store(self, stamp: str) -> None:
        build_spark_store(self.dataset, self.source, self.catalog, self.directory, self._key, stamp)

    def _location(self, engine: SparkEngine) -> Path:
        return _directory(engine)

    def _remove(self, path: Path) -> None:
        _remove(path)

    def _discard(self, engine: SparkEngine) -> None:
        _remove(_directory(engine))  # its views are the new store's now (same names): only its files go


def _directory(engine: SparkEngine) -> Path:
    """The store directory an engine's views read."""
    return Path(engine.source.tables[0].location).parent


def _read_only(root: Path) -> None:
    """Nothing writes a store after its build: files 0444, directories 0555 (deepest first)."""
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        os.chmod(path, 0o555 if path.is_dir() else 0o444)
    os.chmod(root, 0o555)


def _remove(path: Path) -> None:
    """Remove a store directory made read-only by `_read_only` (write bits back first)."""
    if not path.exists():
        return
    for sub in [path, *path.rglob("*")]:
        if sub.is_dir():
            with contextlib.suppress(OSError):
                os.chmod(sub, 0o755)
    shutil.rmtree(path, ignore_errors=True)
