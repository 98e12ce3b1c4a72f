"""A Spark dataset's source in the policy: the Spark connection and where each declared table lives.

    [datasets.big]
    engine = "spark"
    [datasets.big.spark]
    master = "local[2]"                       # local[N] | spark://host:port | sc://host:port (Spark Connect)
    [datasets.big.spark.tables]
    visits = { parquet = "data/visits" }       # a Parquet file or directory (relative: to the policy file)
    users = { table = "warehouse.users" }      # or a table of the Spark catalog

Pure: nothing here imports pyspark, so the policy loads (and is checked) on the default install.

Example:
    >>> problems = []
    >>> src = read_spark({"master": "local[2]", "tables": {"visits": {"table": "db.visits"}}},
    ...                  "datasets.big.spark", Path("/p"), lambda at, why: problems.append(f"{at}: {why}"))
    >>> src.master, src.tables[0].view("big"), problems
    ('local[2]', '__dp_big__visits', [])
    >>> read_spark({"master": "yarn"}, "x.spark", Path("/p"), lambda at, why: problems.append(f"{at}: {why}"))
    >>> print(problems[0])
    x.spark.master: must be local[N], spark://host:port or sc://host:port, got 'yarn'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from proxy.query.catalog import TableSchema
from proxy.query.rewrite.render import Target

EngineName = Literal["duckdb", "spark"]

MASTER = re.compile(
    r"local\[(?:[1-9]\d{0,3}|\*)\]"  # one machine, N threads
    r"|spark://[A-Za-z0-9.-]+:\d{1,5}(?:,[A-Za-z0-9.-]+:\d{1,5})*"  # a standalone master (or HA list)
    r"|sc://[A-Za-z0-9.-]+(?::\d{1,5})?(?:/;[A-Za-z0-9_=;.-]*)?"  # Spark Connect
)
LOCAL = re.compile(r"local\[(?:[1-9]\d{0,3}|\*)\]")  # Spark inside this process
CATALOG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){0,2}")  # [catalog.][db.]table

Add = Callable[[str, str], None]


@dataclass(frozen=True, slots=True)
class SparkTable:
    """Where one declared table lives: a Parquet path or a table of the Spark catalog."""

    name: str  # the declared table
    kind: Literal["parquet", "table"]
    location: str  # an absolute path, or [catalog.][db.]table

    def view(self, dataset: str) -> str:
        """The temporary view generated SQL reads this table through: one per dataset, so two datasets on one
        Spark session never see each other's tables."""
        return f"__dp_{dataset}__{self.name}".lower()


@dataclass(frozen=True, slots=True)
class SparkSource:
    master: str
    tables: tuple[SparkTable, ...]

    def target(self, dataset: str) -> Target:
        """How generated SQL is rendered for this source: Spark's dialect, each table read through its view."""
        return Target("spark", tuple((t.name.lower(), t.view(dataset)) for t in self.tables))

    @property
    def connect(self) -> bool:
        """Spark Connect (a remote session) rather than a classic driver in this process."""
        return self.master.startswith("sc://")


def read_engine(raw: Mapping[str, object], loc: str, base: Path, add: Add) -> tuple[EngineName, SparkSource | None]:
    """A dataset's `engine` (default duckdb) and, for Spark, its `spark` table; problems go to `add`."""
    engine = raw.get("engine", "duckdb")
    if engine not in get_args(EngineName):
        add(f"{loc}.engine", f"must be one of {', '.join(get_args(EngineName))}, got {engine!r}")
        return "duckdb", None
    if engine == "duckdb":
        if "spark" in raw:
            add(f"{loc}.spark", 'is read only with engine = "spark"')
        return "duckdb", None
    if "path" in raw:
        add(f"{loc}.path", 'a Spark dataset has no DuckDB file: name its tables\' sources in [spark.tables]')
    return "spark", read_spark(raw.get("spark"), f"{loc}.spark", base, add)


def default_bounding(source: SparkSource | None) -> str:
    """A Spark dataset's bounding when its policy sets none: the bounding store (DuckDB's default too) when Spark
    runs in this process over local Parquet files, where the store can be stamped by the files' stats and read
    back from a local directory; per query otherwise (a cluster's workers would need the store directory at the
    same path, and a catalog table or `hdfs://`/`s3a://` path cannot be stamped). docs/operations.md (Spark)
    gives the figures this rests on.

    Example:
        >>> parquet = (SparkTable("visits", "parquet", "/data/visits"),)
        >>> default_bounding(SparkSource("local[2]", parquet)), default_bounding(SparkSource("spark://m:7077", parquet))
        ('store', 'per_query')
        >>> default_bounding(SparkSource("local[2]", (SparkTable("visits", "table", "db.visits"),)))
        'per_query'
    """
    if source is None or not LOCAL.fullmatch(source.master):
        return "per_query"
    local = all(t.kind == "parquet" and "://" not in t.location for t in source.tables)
    return "store" if local else "per_query"


def spark_problems(loc: str, source: SparkSource, tables: tuple[TableSchema, ...], bounding: str | None,
                   add: Add, public: tuple[str, ...] = ()) -> None:
    """A source for every declared table (protected, or `public`: the names of its public tables) and no other;
    and what Spark datasets cannot do yet."""
    declared = {t.name.lower() for t in tables} | {name.lower() for name in public}
    sources = {t.name.lower() for t in source.tables}
    for missing in sorted(declared - sources):
        add(f"{loc}.spark.tables", f"declared table {missing} has no source")
    for extra in sorted(sources - declared):
        add(f"{loc}.spark.tables.{extra}", "is not a declared table")
    if bounding == "store":  # a rebuild is detected by the source files' stats (proxy/store/spark_store.py)
        for table in source.tables:
            if table.kind != "parquet" or "://" in table.location:
                add(f"{loc}.spark.tables.{table.name}", 'the bounding store on Spark needs a local Parquet source '
                    '(its changes are detected by file stats); use bounding = "per_query"')


def read_spark(raw: object, loc: str, base: Path, add: Add) -> SparkSource | None:
    """The `[datasets.<name>.spark]` table, or None after reporting its problems to `add`."""
    if not isinstance(raw, Mapping):
        add(loc, "must be a table with master and tables")
        return None
    before = _Counter(add)
    for key in raw:
        if key not in ("master", "tables"):
            before.add(f"{loc}.{key}", "unknown key; expected master or tables")
    master = raw.get("master")
    if not isinstance(master, str) or not MASTER.fullmatch(master):
        before.add(f"{loc}.master", f"must be local[N], spark://host:port or sc://host:port, got {master!r}")
    tables = raw.get("tables", {})
    found: list[SparkTable] = []
    if not isinstance(tables, Mapping) or not tables:
        before.add(f"{loc}.tables", "must name a source for every declared table")
    else:
        for name, spec in tables.items():
            if (table := _table(str(name), spec, f"{loc}.tables.{name}", base, before.add)) is not None:
                found.append(table)
    if before.count or not isinstance(master, str):
        return None
    return SparkSource(master, tuple(found))


def _table(name: str, spec: object, loc: str, base: Path, add: Add) -> SparkTable | None:
    if not isinstance(spec, Mapping) or len(spec) != 1 or next(iter(spec)) not in ("parquet", "table"):
        add(loc, 'must be { parquet = "path" } or { table = "[catalog.][db.]table" }')
        return None
    kind, value = next(iter(spec.items()))
    if not isinstance(value, str) or not value:
        add(f"{loc}.{kind}", f"must be a non-empty string, got {value!r}")
        return None
    if kind == "table":
        if not CATALOG_NAME.fullmatch(value):
            add(f"{loc}.table", f"must be [catalog.][db.]table of plain names, got {value!r}")
            return None
        return SparkTable(name, "table", value)
    if "://" in value:  # a cluster's storage (hdfs://, s3a://): checked by Spark at start-up
        return SparkTable(name, "parquet", value)
    path = (base / value).resolve()
    if not path.exists():
        add(f"{loc}.parquet", f"{path} does not exist")
        return None
    return SparkTable(name, "parquet", str(path))


class _Counter:
    """Counts the problems it passes on."""

    def __init__(self, add: Add) -> None:
        self._add, self.count = add, 0

    def add(self, at: str, why: str) -> None:
        self.count += 1
        self._add(at, why)
