"""Apache Spark as a dataset's engine: the only module that imports pyspark (the optional `[spark]` extra).

Promises, as the DuckDB engine's (docs/architecture.md, the security boundary): it runs only SQL the query
layer generated and rendered for it (proxy/query/rewrite/render.py checks every node and table first), over
one temporary view per declared table; files are never read by name in SQL (`spark.sql.runSQLOnFiles` is off)
and no function can be registered (generated SQL has no CREATE); the session's settings are checked at
start-up; every query runs under a job tag of its own that a timer cancels at the time limit, which is then
reported as a timeout; errors carry fixed messages, the engine's text goes to the log.

One Spark session serves every Spark dataset of the process (a JVM holds one SparkContext): the policy
gives them one master. Closing an engine drops its views; `stop_session` ends the session.

Example (no session is started by this):
    >>> spark_type("decimal(10,2)"), spark_type("bigint"), spark_type("string"), spark_type("timestamp")
    ('DECIMAL(10,2)', 'BIGINT', 'VARCHAR', 'TIMESTAMP')
"""

from __future__ import annotations

import logging
import os
import re
import threading
import uuid
from collections.abc import Callable
from typing import Any

from proxy.engines.base import EngineMisconfigured, ExecutionFailed, ExecutionTimeout, Rows, catalog_problems
from proxy.engines.spark_config import SparkSource
from proxy.query.catalog import Catalog

log = logging.getLogger(__name__)

# Checked after start-up: each must read back exactly so, or the engine refuses to serve.
SESSION_SETTINGS = {
    "spark.sql.runSQLOnFiles": "false",  # no `parquet.`/path`` tables: files only through declared views
    "spark.sql.ansi.enabled": "true",  # an overflow or a bad cast fails the query, never wraps or turns NULL
    "spark.sql.parser.escapedStringLiterals": "false",  # the literal escaping sqlglot's Spark generator writes
    "spark.sql.caseSensitive": "false",  # declared names resolve as in DuckDB
    "spark.sql.session.timeZone": "UTC",
}
DRIVER_SETTINGS = {  # fixed when a classic session starts (a Spark Connect server sets its own)
    "spark.ui.enabled": "false",  # no web UI listing queries and plans
    "spark.ui.showConsoleProgress": "false",  # a server must not draw on stderr
}
INTERRUPT_ON_CANCEL = "spark.job.interruptOnCancel"  # SparkContext.SPARK_JOB_INTERRUPT_ON_CANCEL
CANCEL_EVERY_S = 0.05  # a job submitted just after a cancel is cancelled by the next one

_SPARK_TYPES = {"tinyint": "TINYINT", "smallint": "SMALLINT", "int": "INTEGER", "bigint": "BIGINT",
                "float": "FLOAT", "double": "DOUBLE", "string": "VARCHAR", "date": "DATE", "boolean": "BOOLEAN"}
_session_lock = threading.Lock()


def spark_type(simple: str) -> str:
    """DuckDB's name for a Spark column type (its `simpleString`), so the policy's types compare alike."""
    if simple.startswith("decimal("):
        return simple.upper().replace(" ", "")
    return _SPARK_TYPES.get(simple, simple.upper())


def local_settings(master: str) -> dict[str, str]:
    """Settings for a one-machine master: Spark's 200 shuffle partitions are 200 tasks per stage even for a
    small table; local[N] gets 2·N.

    Example:
        >>> local_settings("local[2]"), local_settings("spark://m:7077")
        ({'spark.sql.shuffle.partitions': '4'}, {})
    """
    match = re.fullmatch(r"local\[(\d+|\*)\]", master)
    if match is None:
        return {}
    threads = (os.cpu_count() or 2) if match[1] == "*" else int(match[1])
    return {"spark.sql.shuffle.partitions": str(2 * threads)}


def session(master: str) -> Any:
    """The process's Spark session on `master`, started with the hardened settings when there is none.

    Raises:
        EngineMisconfigured: Spark cannot start or connect, another master is in use, or a setting did not take.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise EngineMisconfigured("a dataset uses Spark: install the extra, pip install 'dp-proxy[spark]'") from None
    with _session_lock:
        try:
            builder = SparkSession.builder.appName("dp-proxy")
            if master.startswith("sc://"):
                spark = builder.remote(master).getOrCreate()
            else:
                for key, value in {**DRIVER_SETTINGS, **SESSION_SETTINGS}.items():
                    builder = builder.config(key, value)
                spark = builder.master(master).getOrCreate()
            for key, value in {**SESSION_SETTINGS, **local_settings(master)}.items():
                spark.conf.set(key, value)
        except EngineMisconfigured:
            raise
        except Exception as err:
            raise EngineMisconfigured(f"cannot start Spark on {master}: {type(err).__name__}: {err}") from err
    expected = {**SESSION_SETTINGS, **local_settings(master)}
    if not master.startswith("sc://"):
        running = spark.sparkContext.master
        if running != master:
            raise EngineMisconfigured(f"Spark is already running on {running}; this dataset asks for {master}")
        spark.sparkContext.setLogLevel("ERROR")
        expected |= DRIVER_SETTINGS
    problems = [f"{key} is {_setting(spark, key)!r}, expected {want!r}" for key, want in expected.items()
                if _setting(spark, key) != want]
    if problems:
        raise EngineMisconfigured("Spark settings did not take: " + "; ".join(problems))
    return spark


def stop_session() -> None:
    """Stop the process's Spark session, if one runs (the next `session` starts a new one)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return
    with _session_lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()


def _setting(spark: Any, key: str) -> str | None:
    try:
        return str(spark.conf.get(key))
    except Exception:  # an unset static key on Spark Connect
        return None


class SparkEngine:
    """One dataset's tables on Spark, read through temporary views. Thread-safe: each query has its own job
    tag, and Spark runs concurrent queries side by side."""

    def __init__(self, dataset: str, source: SparkSource, *, timeout_s: float = 30.0) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.dataset, self.source, self.timeout_s = dataset, source, timeout_s
        self.target = source.target(dataset)
        self._spark = session(source.master)
        self._views: list[str] = []
        for table in source.tables:
            try:
                reader = self._spark.read
                frame = reader.parquet(table.location) if table.kind == "parquet" else self._spark.table(table.location)
                frame.createOrReplaceTempView(table.view(dataset))
            except Exception as err:
                self.close()
                raise EngineMisconfigured(
                    f"dataset {dataset}: cannot read table {table.name} from {table.kind} {table.location}: "
                    f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                ) from err
            self._views.append(table.view(dataset))

    def run(self, sql: str, timeout_s: float | None = None) -> Rows:
        """Run one rendered query, cancelling its jobs after `timeout_s` (default: the engine's).

        Raises:
            ExecutionTimeout: the time limit cancelled the query (or it finished only after it).
            ExecutionFailed: any other engine error (its text is logged, never raised).
        """

        def query() -> Rows:
            frame = self._spark.sql(sql)
            rows = tuple(tuple(row) for row in frame.collect())
            return Rows(tuple(frame.columns), rows)

        return self._timed(self.timeout_s if timeout_s is None else timeout_s, query)

    def ready(self, timeout_s: float) -> None:
        """Readiness: a job of two tasks, run by the cluster's executors (or the Connect server)."""
        counted = self._timed(timeout_s, lambda: Rows(("n",), ((self._spark.range(0, 2, 1, 2).count(),),)))
        if counted.rows != ((2,),):
            raise RuntimeError("Spark did not count two rows")

    def _timed(self, limit: float, work: Callable[[], Rows]) -> Rows:
        """`work` under a job tag of its own, which a timer cancels after `limit` seconds."""
        tag = f"dpproxy-{uuid.uuid4().hex}"
        timed_out, finished = threading.Event(), threading.Event()

        def cancel() -> None:  # until the query ends: a job may start after the first cancel
            timed_out.set()
            while not finished.is_set():
                self._cancel(tag)
                finished.wait(CANCEL_EVERY_S)

        timer = threading.Timer(limit, cancel)
        timer.daemon = True
        try:
            self._start(tag)
            timer.start()
            result = work()
        except Exception as err:
            if timed_out.is_set():
                log.warning("Spark query cancelled after %.3gs", limit)
                raise ExecutionTimeout() from None
            log.warning("Spark query failed: %s: %s", type(err).__name__, err)
            raise ExecutionFailed() from None
        finally:
            finished.set()
            timer.cancel()
            self._end(tag)
        if timed_out.is_set():  # finished, but past the limit: never released
            raise ExecutionTimeout()
        return result

    def refresh(self) -> None:
        """Nothing to do: Spark lists a Parquet directory when its view is created (at start-up)."""

    def columns(self, table: str) -> dict[str, str]:
        """Column name -> type (DuckDB's name) of declared `table`'s view; {} when there is no such table."""
        views = dict(self.target.tables)
        if table.lower() not in views:
            return {}
        schema = self._spark.table(views[table.lower()]).schema
        return {field.name: spark_type(field.dataType.simpleString()) for field in schema.fields}

    def check_catalog(self, catalog: Catalog) -> tuple[str, ...]:
        """Human-readable mismatches between the policy's tables and their Spark sources; () when they agree."""
        return catalog_problems(self.columns, catalog, f"the Spark sources of {self.dataset}")

    def close(self) -> None:
        """Drop this dataset's views (the session stays for other datasets). Safe to call twice."""
        for view in self._views:
            try:
                self._spark.catalog.dropTempView(view)
            except Exception as err:  # a stopped session has no views left to drop
                log.info("dropping view %s: %s", view, type(err).__name__)
        self._views = []

    def __enter__(self) -> SparkEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # One tag per query, on the thread that runs it: jobs carry the tags of the thread that submits them (Spark
    # SQL's helper threads copy them), so cancelling a tag reaches this query's jobs and no other's, even on a
    # thread that ran another query before (a job group would be the thread's one group, and pyspark 4 has no
    # clearJobGroup). Classic session: SparkContext's job tags, plain strings that the timer's thread cancels
    # (a classic SparkSession's tags are mapped per thread). Spark Connect: the session's tags, interrupted on
    # the server.
    def _start(self, tag: str) -> None:
        if self.source.connect:
            self._spark.addTag(tag)
        else:
            context = self._spark.sparkContext
            context.addJobTag(tag)
            context.setInterruptOnCancel(True)  # stop the running tasks now, not at their next record

    def _cancel(self, tag: str) -> None:
        try:
            if self.source.connect:
                self._spark.interruptTag(tag)
            else:
                self._spark.sparkContext.cancelJobsWithTag(tag)
        except Exception as err:
            log.warning("cancelling %s: %s", tag, type(err).__name__)

    def _end(self, tag: str) -> None:
        """Take the query's tag off its thread (a pooled thread runs the next query without it)."""
        try:
            if self.source.connect:
                self._spark.removeTag(tag)
            else:
                context = self._spark.sparkContext
                context.removeJobTag(tag)
                context.setLocalProperty(INTERRUPT_ON_CANCEL, None)  # type: ignore[arg-type]  # None unsets it
        except Exception as err:
            log.warning("ending %s: %s: %s", tag, type(err).__name__, err)
