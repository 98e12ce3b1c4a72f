"""The TPC-H workload through the product's own path, in process: the policy loaded and checked, the bounding store
built by proxy/store/duckdb_store.py (so a `unit_via` key that does not resolve fails here as in `serve`), each
of the 22 texts planned as `POST /v1/query` plans it (a public-only query by plan_public, answered exactly), its
SQL run on the store, and the release made from the rows: with zero noise (the value before noise, every
candidate group kept, as tests/support/differential.py does) for exactness against DuckDB's answer to the text
as written on the source, and with the production sampler for the ε figures. Shared by run.py and
tests/bench/test_tpch.py.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import duckdb

from accountant.errors import ProxyError
from mechanisms.sampling import FixedSampler, Sampler, SecureSampler
from proxy.engines.duckdb_engine import Engine
from proxy.policy.load import load_policy
from proxy.query.catalog import Catalog
from proxy.query.expr import Key
from proxy.query.planner import QueryPlan, plan, plan_public
from proxy.query.release.publish import release
from proxy.store.duckdb_store import build_store

HERE = Path(__file__).resolve().parent
QUERIES = tuple(f"q{i:02d}" for i in range(1, 23))
Rows = list[tuple[object, ...]]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One query: answered (its exact release and whether it equals DuckDB's answer) or refused (code, message)."""

    name: str
    code: str | None = None  # the refusal's stable code; None when answered
    message: str = ""
    public: bool = False
    exact: bool | None = None  # the release before noise equals DuckDB's answer
    product: tuple[tuple[object, ...], ...] = ()
    reference: tuple[tuple[object, ...], ...] = ()


def text(name: str) -> str:
    return (HERE / f"{name}.sql").read_text()


def policy_for(data: Path, directory: Path) -> Path:
    """bench/tpch/policy.toml with its `path` pointing at `data` (written into `directory`)."""
    source = (HERE / "policy.toml").read_text().replace('path = "data/tpch.duckdb"', f'path = "{data.resolve()}"')
    path = directory / "policy.toml"
    path.write_text(source)
    return path


class Workload:
    """The dataset `tpch` of the policy, its store built under `directory`, the source open for the reference."""

    def __init__(self, data: Path, directory: Path) -> None:
        policy = load_policy(policy_for(data, directory))
        dataset = policy.dataset("tpch")
        assert dataset is not None
        self.catalog: Catalog = dataset.catalog
        self.max_rows = dataset.max_release_cells
        store = build_store("tpch", dataset.path, self.catalog, directory, "0" * 64)
        self.store = Engine(store, threads=2, memory_limit="2GB", timeout_s=600.0)
        self.source = duckdb.connect(str(dataset.path), read_only=True)

    def close(self) -> None:
        self.store.close()
        self.source.close()

    def reference(self, sql: str) -> Rows:
        return [tuple(r) for r in self.source.execute(sql).fetchall()]

    def planned(self, sql: str, epsilon: float, catalog: Catalog | None = None) -> QueryPlan:
        return plan(sql, catalog or self.catalog, epsilon=epsilon, delta=1e-7, mechanism="laplace",
                    bounding="store", salt=7)

    def answer(self, name: str) -> Outcome:
        """The query's outcome, its release before noise compared with DuckDB's answer."""
        sql = text(name)
        try:
            public = plan_public(sql, self.catalog, max_rows=self.max_rows)
            if public is not None:
                product = [tuple(r) for r in self.store.run(public.tree.sql(dialect="duckdb")).rows]
                reference = self.reference(sql)
                return Outcome(name, public=True, exact=same(product, reference, ordered=True),
                               product=tuple(product), reference=tuple(reference))
            planned = self.planned(sql, 1.0)
        except ProxyError as err:
            return Outcome(name, code=err.code, message=err.message)
        rows = self.store.run(planned.sql).rows
        product = exact_release(rows, planned)
        reference = self.reference(sql)
        keys = [i for i, o in enumerate(planned.analysis.outputs) if isinstance(o.expr, Key)]
        present = {tuple(normal(r[i]) for i in keys) for r in reference}
        # a public domain releases its empty groups too (zero counts and sums): DuckDB has no row for them
        product = [r for r in product if tuple(normal(r[i]) for i in keys) in present or not all(
            v in (0, None) for i, v in enumerate(r) if i not in keys)]
        ordered = planned.analysis.limit is not None
        return Outcome(name, exact=same(product, reference, ordered=ordered), product=tuple(product),
                       reference=tuple(reference))

    def noisy(self, name: str, epsilon: float, catalog: Catalog, sampler: Sampler | None = None) -> Rows:
        """One release of the query at `epsilon` under `catalog`'s bounds, with the production sampler."""
        planned = self.planned(text(name), epsilon, catalog)
        rows = self.store.run(planned.sql).rows
        return list(release(rows, planned.analysis, planned.price, sampler or SecureSampler()).rows)


def exact_release(rows: Sequence[Sequence[object]], planned: QueryPlan) -> Rows:
    """The release with zero noise, every candidate group of a private key kept (no threshold)."""
    price = planned.price
    if price.selection is not None:
        price = dataclasses.replace(price, selection=dataclasses.replace(price.selection, threshold=-(2**62)))
    return list(release(rows, planned.analysis, price, FixedSampler((0,))).rows)


def with_bounds(catalog: Catalog, bounds: dict[str, tuple[int, int]]) -> Catalog:
    """`catalog` with each named table's (max_rows, max_groups) replaced."""
    tables = tuple(dataclasses.replace(t, max_rows=bounds[t.name][0], max_groups=bounds[t.name][1])
                   if t.name in bounds else t for t in catalog.tables)
    return dataclasses.replace(catalog, tables=tables)


def normal(value: object) -> object:
    """Numbers as floats, dates as ISO text (the release writes dates as text)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, int | float | Decimal):
        return float(value)
    return value


TOLERANCE = 1e-6  # relative: a SUM of an expression adds each row's value on the 1/8192 fixed-point grid
# (analyse/measures.py fixed_point), so it differs from DuckDB's DECIMAL sum by at most half a step per row


def close(a: object, b: object) -> bool:
    """Equal, or equal numbers up to `TOLERANCE` (the fixed-point grid of expression sums; AVG's DOUBLE)."""
    a, b = normal(a), normal(b)
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= TOLERANCE * max(1.0, abs(a), abs(b))
    return a == b


def same(product: Sequence[tuple[object, ...]], reference: Sequence[tuple[object, ...]], *, ordered: bool) -> bool:
    """Row for row (in order when `ordered`, else as sorted multisets), `close` in every column."""
    if not ordered:
        product, reference = _sorted(product), _sorted(reference)
    return len(product) == len(reference) and all(
        len(p) == len(r) and all(close(x, y) for x, y in zip(p, r, strict=True))
        for p, r in zip(product, reference, strict=True))


def _sorted(rows: Sequence[tuple[object, ...]]) -> list[tuple[object, ...]]:
    return sorted(rows, key=lambda row: tuple((v is not None, str(type(normal(v))), normal(v) if v is not None
                                               else 0) for v in row))


def relative_errors(noisy: Sequence[tuple[object, ...]], exact: Sequence[tuple[object, ...]], keys: int
                    ) -> list[float]:
    """|noisy − exact| / |exact| of every numeric released cell whose group DuckDB has (matched by the first
    `keys` columns); a group the release left out counts as error 1."""
    found = {tuple(normal(v) for v in r[:keys]): r for r in noisy}
    out = []
    for row in exact:
        got = found.get(tuple(normal(v) for v in row[:keys]))
        for i in range(keys, len(row)):
            want = normal(row[i])
            if not isinstance(want, float) or want == 0 or math.isnan(want):
                continue
            value = None if got is None else normal(got[i])
            out.append(1.0 if not isinstance(value, float) else abs(value - want) / abs(want))
    return out
