"""The bounding store of a dataset (docs/privacy.md §11): built once from the read-only source, kept true, swapped.

Promises:
- the deployment key is generated once (`bounding.key` beside the ledger, mode 600) and never derived from a
  query; the store's ranks are keyed by it (proxy/query/rewrite/store_layout.py), and the store holds only its sha256;
- a store is named and stamped with a fingerprint of its source as DuckDB reads it: the file (path, size, mtime,
  ctime, inode) and its write-ahead log `<file>.wal` (the same stats, or its absence), the catalog, the key and
  the store format; a store whose stamp differs, or that cannot be opened, is never used: it is rebuilt (a
  corrupt file, one from another source or key). A commit that a writer left in the WAL (closed without a
  checkpoint) changes the file's stats in no way, and DuckDB opened read-only replays it: the WAL's stats make
  it a change, and the rebuild reads exactly the rows a query of the source would;
- the source is attached read-only to the builder; the store is written to a temporary file and renamed into
  place, then opened read-only and hardened exactly as the source would be (proxy/engines/base.py);
- `StoreEngine.refresh` (run before each admission) notices a changed source by a stat of the file and of its
  WAL and rebuilds before the next answer (a file touched without a change is rebuilt too: its content is not
  read); a rebuild swaps the engine atomically: a query runs on one store from start to end, and an old store
  is closed once its last query has finished.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

import duckdb

from proxy.engines.base import EngineError, Rows
from proxy.engines.duckdb_engine import Engine
from proxy.query.catalog import Catalog
from proxy.query.rewrite import store_layout, unit_paths
from proxy.query.rewrite.render import DUCKDB
from proxy.store.histogram_cache import ANSWER_ROWS, ANSWERS, Remembered
from proxy.store.swap import Closed, Swap

log = logging.getLogger(__name__)

E = TypeVar("E")  # the engine a store answers with

FORMAT = 6  # bump when store_layout.build_sql changes what a store holds (4: ties broken by row-level values only;
# 5: ranks ordered by the explicit keyed hash, as on Spark, not DuckDB's HASH; 6: each auto column's unit total)
KEY_FILE = "bounding.key"


class StoreError(EngineError):
    """The store cannot be built or used: a clear message naming the dataset, table or file."""

    code = "engine_misconfigured"
    default_message = "the bounding store cannot be built"


class StoreUnavailable(EngineError):
    """A rebuild failed while serving. Fixed message: the reason can depend on the data (it goes to the log)."""

    code = "execution_failed"
    default_message = "the bounding store cannot be rebuilt from the changed source; see the server log"


def deployment_key(directory: Path) -> str:
    """The deployment's bounding key (64 hex digits), created at `directory/bounding.key` (mode 600) if absent.

    Raises:
        StoreError: the key file is readable by others or does not hold a key.
    """
    path = Path(directory) / KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32) + "\n")
        log.info("created the bounding key %s (mode 600)", path)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise StoreError(f"{path} must be readable by its owner only (chmod 600), it has mode {mode:o}")
    key = path.read_text().strip()
    if len(key) != 64 or any(ch not in "0123456789abcdef" for ch in key):
        raise StoreError(f"{path} does not hold a bounding key (64 lowercase hex digits)")
    return key


def fingerprint(source: Path, catalog: Catalog, key: str) -> str:
    """Names one store: the source file as it is now, the catalog, the key (by its hash) and the format."""
    return _stamp(source, _identity(catalog, key))


def _identity(catalog: Catalog, key: str) -> str:
    return hashlib.sha256(json.dumps([FORMAT, repr(catalog), hashlib.sha256(key.encode()).hexdigest()]).encode()
                          ).hexdigest()


Stats = tuple[int, int, int, int, int]  # size, mtime, ctime (ns), inode, device


def _stamp(source: Path, identity: str) -> str:
    resolved = Path(source).resolve()  # the file DuckDB opens (build_store attaches it), and so its WAL's name
    # the WAL first: a checkpoint writes the file, then removes the WAL, so a checkpoint running meanwhile is seen
    # as the file's new stats, never as its old stats without the WAL (the source before the commit)
    try:
        wal: Stats | None = _stats(Path(f"{resolved}.wal").stat())
    except FileNotFoundError:
        wal = None
    return _stamp_of(identity, str(source), _stats(resolved.stat()), wal)  # no source raises, as opening it would


def _stats(stat: os.stat_result) -> Stats:
    """What a change to a file shows in its stats. The ctime changes with every write and every change of the
    mtime, and cannot be set, so a copy that keeps the size and restores the mtime (`cp -p`, `rsync -t`,
    `touch -r`) is still a change; the content is never read."""
    return stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev


@functools.lru_cache(maxsize=64)
def _stamp_of(identity: str, source: str, main: Stats, wal: Stats | None) -> str:
    """The stamp of the file `source` resolves to and of its WAL (None: none), with these stats: computed once
    per stats (`refresh` runs before every admission; two stats are all it costs then). A re-pointed link is
    another inode or device."""
    text = json.dumps([identity, str(Path(source).resolve()), main[:4], None if wal is None else wal[:4]])
    return hashlib.sha256(text.encode()).hexdigest()


@contextlib.contextmanager
def build_lock(directory: Path, dataset: str) -> Iterator[None]:
    """Held while a process checks, builds or opens `dataset`'s store: the processes of `serve --workers N` (and
    `prepare` beside a server) build a store once, and the others open what it built. An advisory lock on a file
    beside the stores; the kernel drops it with the process, so a crashed builder blocks no one."""
    with open(Path(directory) / f".{dataset}.store.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def store_path(directory: Path, dataset: str, stamp: str) -> Path:
    return Path(directory) / f"{dataset}.store-{stamp[:16]}.duckdb"


def build_store(
    dataset: str, source: Path, catalog: Catalog, directory: Path, key: str, *, threads: int = 2,
    memory_limit: str = "8GB",
) -> Path:
    """Build the store of `dataset` from `source` (attached read-only) and return its path.

    Raises:
        StoreError: a table declared one row per unit is not, a key of a `unit_via` path does not resolve to
            exactly one parent row (proxy/query/rewrite/unit_paths.py), or the engine failed (its text is in the
            message: this runs before any query, for the operator).
    """
    stamp = fingerprint(source, catalog, key)
    target = store_path(directory, dataset, stamp)
    temp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temp.unlink(missing_ok=True)
    started = time.perf_counter()
    log.info("building the bounding store of dataset %s from %s into %s", dataset, source, target.name)
    try:
        conn = duckdb.connect(str(temp), config={"threads": threads, "memory_limit": memory_limit,
                                                 "autoload_known_extensions": False,
                                                 "autoinstall_known_extensions": False})
        try:
            conn.execute("SET enable_progress_bar = false")
            conn.execute(f"ATTACH {_string(str(Path(source).resolve()))} AS src (READ_ONLY)")
            for table in catalog.tables:
                if table.one_row_per_unit:
                    extra = conn.execute(store_layout.duplicate_units_sql(table)).fetchone()[0]  # type: ignore[index]
                    if extra:
                        raise StoreError(
                            f"dataset {dataset}: table {table.name} is declared one_row_per_unit but {extra} of its "
                            f"rows share their {table.privacy_unit} with an earlier row; remove the declaration"
                        )
                begun = time.perf_counter()
                if table.unit_via:  # the unit through declared keys: each must resolve to one parent row
                    for hop, sql in enumerate(unit_paths.unresolved_sql(table)):
                        if bad := conn.execute(sql).fetchone()[0]:  # type: ignore[index]
                            raise StoreError(unit_paths.unresolved_message(dataset, table, hop, bad))
                    conn.execute(f'CREATE TABLE "{table.name}" AS '
                                 f"{store_layout.select_sql(table, key, unit_paths.source_sql(table))}")
                else:
                    conn.execute(store_layout.build_sql(table, key))
                rows = conn.execute(f'SELECT COUNT(*) FROM "{table.name}"').fetchone()[0]  # type: ignore[index]
                log.info("bounding store of %s: table %s, %d rows ranked in %.1f s", dataset, table.name, rows,
                         time.perf_counter() - begun)
            for public in catalog.public:  # joins to public tables read them from the store, as declared
                conn.execute(store_layout.copy_public_sql(public))
            conn.execute(f"CREATE TABLE {store_layout.META} (format INTEGER, fingerprint VARCHAR, dataset VARCHAR)")
            conn.execute(f"INSERT INTO {store_layout.META} VALUES (?, ?, ?)", [FORMAT, stamp, dataset])
            conn.execute("DETACH src")
            conn.execute("CHECKPOINT")
        finally:
            conn.close()
        os.chmod(temp, 0o400)  # nothing writes a store after its build
        Path(f"{temp}.wal").unlink(missing_ok=True)
        os.replace(temp, target)
    except duckdb.Error as err:
        raise StoreError(f"dataset {dataset}: building the bounding store failed: {err}") from err
    finally:
        temp.unlink(missing_ok=True)
        Path(f"{temp}.wal").unlink(missing_ok=True)
    log.info("bounding store of %s built in %.1f s: %s", dataset, time.perf_counter() - started, target.name)
    return target


def open_store(path: Path, stamp: str, catalog: Catalog, *, threads: int, memory_limit: str,
               timeout_s: float) -> Engine | None:
    """The store at `path` opened read-only and hardened, if it is the store stamped `stamp`; else None."""
    if not path.is_file():
        return None
    try:
        engine = Engine(path, threads=threads, memory_limit=memory_limit, timeout_s=timeout_s)
    except EngineError as err:
        log.warning("bounding store %s cannot be opened (%s); it will be rebuilt", path.name, err)
        return None
    try:
        meta = engine.run(f"SELECT format, fingerprint FROM {store_layout.META}", max(timeout_s, 60.0)).rows
        tables_ok = all(engine.columns(t.name) for t in (*catalog.tables, *catalog.public))
    except EngineError:
        meta, tables_ok = (), False
    if meta != ((FORMAT, stamp),) or not tables_ok:
        log.warning("bounding store %s is not the store of its source, catalog and key; it will be rebuilt",
                    path.name)
        engine.close()
        return None
    return engine


class BoundingStore(ABC, Generic[E]):
    """What every engine's bounding store does: keep the store of the source as it is now (`refresh`, one build
    at a time), swap it atomically under running queries (proxy/store/swap.py), and remember the histograms it
    answered (proxy/store/histogram_cache.py). A subclass says how its engine stamps, opens, builds and removes
    a store."""

    pattern: ClassVar[str]  # the names of this kind's stores after "<dataset>." (a glob)

    def __init__(self, dataset: str, catalog: Catalog, directory: Path, timeout_s: float,
                 answers: int = ANSWERS) -> None:
        self.dataset, self.catalog, self.directory, self.timeout_s = dataset, catalog, Path(directory), timeout_s
        self._key = deployment_key(self.directory)
        self._build = threading.Lock()  # one build at a time
        self._engines: Swap[E] = Swap(self._discard)
        self._stamp = ""  # the current store's; set under _build
        self._remembered: Remembered[Rows] = Remembered()
        # apart: answers never evict the histograms; `answers` texts (DPPROXY_ANSWER_MEMORY), 0: every answer scans
        self._answers: Remembered[Rows] = Remembered(answers)

    @property
    def path(self) -> Path:
        return self._path(self._stamp)

    def refresh(self) -> None:
        """Make sure the current store is the store of the source as it is now; rebuild it if not.

        Raises:
            StoreError: at start-up, why the store cannot be built (for the operator).
            StoreUnavailable: while serving, a fixed message; the reason goes to the log.
        """
        try:
            self._refresh()
        except (StoreError, OSError) as err:
            if self._engines.current is None and isinstance(err, StoreError):
                raise
            log.error("dataset %s: the bounding store cannot be rebuilt: %s", self.dataset, err)
            raise StoreUnavailable() from None

    @property
    def stamp(self) -> str:
        """The stamp of the store now answering (its source's fingerprint): bounds chosen on one store are
        reused only while it answers (proxy/pipeline.py `at_kept_bounds`)."""
        return self._stamp

    def _refresh(self) -> None:
        if self._source_stamp() == self._stamp:
            return
        with self._build, build_lock(self.directory, self.dataset):
            stamp = self._source_stamp()
            if stamp == self._stamp:
                return
            path = self._path(stamp)
            engine = self._open(path, stamp)
            if engine is None:
                self._remove(path)
                self._build_store(stamp)
                engine = self._open(path, stamp)
                if engine is None:
                    raise StoreError(f"dataset {self.dataset}: the bounding store just built cannot be opened")
            leased = self._engines.swap(engine)
            self._stamp = stamp
            keep = {self._location(engine).name, *(self._location(e).name for e in leased)}
            for stale in self.directory.glob(f"{self.dataset}.{self.pattern}"):  # of earlier sources or keys
                if stale.name not in keep:
                    self._remove(stale)
            log.info("dataset %s now answers from the bounding store %s", self.dataset, path.name)

    def run(self, sql: str, timeout_s: float | None = None) -> Rows:
        """Run `sql` on the current store (one store from start to end, whatever swaps meanwhile)."""
        with self._lease() as engine:
            return engine.run(sql, timeout_s)  # type: ignore[attr-defined, no-any-return]

    def run_remembered(self, sql: str, timeout_s: float | None = None) -> Rows:
        """`run` for a query whose rows are a function of the store alone (a selection histogram): answered from
        memory when this store answered it before (keyed by the store's own location)."""
        with self._lease() as engine:
            return self._remembered.get((str(self._location(engine)), sql),
                                        lambda: engine.run(sql, timeout_s))  # type: ignore[attr-defined]

    def run_answer(self, sql: str, timeout_s: float | None = None) -> Rows:
        """`run` for a query's SQL at its bounds (proxy/pipeline.py `answer`): its exact rows, before any noise, are a
        function of this store and the text alone (the store is read-only; the text holds every bound, literal
        and folded public value), so a text this store answered before is answered from memory
        (docs/privacy.md §10.7.1). At most `answers` texts (DPPROXY_ANSWER_MEMORY, default `ANSWERS`; 0 keeps none)
        of at most `ANSWER_ROWS` rows are kept: the memory is bounded by those, whatever the table's size."""
        with self._lease() as engine:
            return self._answers.get((str(self._location(engine)), sql), lambda: engine.run(sql, timeout_s),
                                     keep=lambda rows: len(rows.rows) <= ANSWER_ROWS)  # type: ignore[attr-defined]

    def columns(self, table: str) -> dict[str, str]:
        with self._lease() as engine:
            return engine.columns(table)  # type: ignore[attr-defined, no-any-return]

    @contextlib.contextmanager
    def _lease(self) -> Iterator[E]:
        try:
            with self._engines.lease() as engine:
                yield engine
        except Closed:
            raise StoreError(f"dataset {self.dataset}: the bounding store is closed") from None

    # what each engine's store says
    @abstractmethod
    def _source_stamp(self) -> str:
        """The stamp of the source as it is now (its files' stats, the catalog, the key, the format)."""

    @abstractmethod
    def _path(self, stamp: str) -> Path:
        """Where the store of `stamp` lives."""

    @abstractmethod
    def _open(self, path: Path, stamp: str) -> E | None:
        """The engine over the store at `path` if it holds `stamp`'s store, else None (it is rebuilt)."""

    @abstractmethod
    def _build_store(self, stamp: str) -> None:
        """Build the store of `stamp` in place (read-only once built)."""

    @abstractmethod
    def _location(self, engine: E) -> Path:
        """The file or directory the engine's store is."""

    @abstractmethod
    def _remove(self, path: Path) -> None:
        """Remove a store that no query reads."""

    @abstractmethod
    def _discard(self, engine: E) -> None:
        """Close a store retired by a swap once its last query has ended."""


class StoreEngine(BoundingStore[Engine]):
    """The engine of a dataset whose queries read its bounding store. Thread-safe; `run` as Engine.run."""

    pattern = "store-*.duckdb"
    target = DUCKDB  # queries are rendered as DuckDB reads them (the store is a DuckDB file)

    def __init__(self, dataset: str, source: Path, catalog: Catalog, directory: Path, *, threads: int = 2,
                 memory_limit: str = "8GB", timeout_s: float = 30.0, answers: int = ANSWERS) -> None:
        super().__init__(dataset, catalog, directory, timeout_s, answers)
        self.source = Path(source)
        self._options = {"threads": threads, "memory_limit": memory_limit}
        self._identity = _identity(catalog, self._key)
        self.refresh()

    def close(self) -> None:
        for engine in self._engines.close():
            engine.close()

    def _source_stamp(self) -> str:
        return _stamp(self.source, self._identity)

    def _path(self, stamp: str) -> Path:
        return store_path(self.directory, self.dataset, stamp)

    def _open(self, path: Path, stamp: str) -> Engine | None:
        return open_store(path, stamp, self.catalog, timeout_s=self.timeout_s, **self._options)  # type: ignore[arg-type]

    def _build_store(self, stamp: str) -> None:
        build_store(self.dataset, self.source, self.catalog, self.directory, self._key,
                    **self._options)  # type: ignore[arg-type]

    def _location(self, engine: Engine) -> Path:
        return engine.path

    def _remove(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            path.unlink()

    def _discard(self, engine: Engine) -> None:
        engine.close()
        current = self._engines.current
        if current is None or engine.path != current.path:
            self._remove(engine.path)  # an old store: its source, catalog or key has changed



def _string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
