"""The layout holds: imports go one way (proxy shell → proxy.query → accountant → mechanisms) and, inside each,
down the rooms of scripts/import_graph.py (`ROOMS`); no import circle; no function-level import except where a
dependency is optional or a command loads only what it runs; packages stay small; side effects stay in their
one module each: duckdb in the engine (and the store build), pyspark in the Spark engine, sqlite3 and psycopg in
the ledger and audit stores, randomness in mechanisms/sampling.py, fastapi/pydantic only in the shell, sqlglot
only in proxy/query. docs/architecture.md is the map this checks."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import import_graph  # noqa: E402

MODULES = sorted(p for package in ("proxy", "accountant", "mechanisms") for p in (ROOT / package).rglob("*.py"))
RANDOMNESS = {"random", "secrets", "numpy.random"}
EDGES = import_graph.edges()
GRAPH = import_graph.imports_of()

# function-level imports of project modules, each for a reason that is not a circle
LAZY = {
    ("accountant.ledger.stores", "accountant.ledger.postgres"): "psycopg is loaded only for a PostgreSQL ledger",
    ("proxy.store.open", "proxy.store.spark_store"): "pyspark is the optional [spark] extra",
    ("proxy.engines.open", "proxy.engines.spark_engine"): "pyspark is the optional [spark] extra",
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _layer(path: Path) -> str:
    relative = path.relative_to(ROOT).as_posix()
    return "query" if relative.startswith("proxy/query/") else relative.split("/")[0]


ALLOWED = {  # a layer may import only itself and what lies to its right
    "proxy": {"proxy", "query", "accountant", "mechanisms"},
    "query": {"query", "accountant", "mechanisms"},
    "accountant": {"accountant", "mechanisms"},
    "mechanisms": {"mechanisms"},
}


def _target_layer(name: str) -> str | None:
    if name.startswith("proxy.query"):
        return "query"
    top = name.split(".")[0]
    return top if top in ("proxy", "accountant", "mechanisms") else None


def test_modules_found() -> None:
    assert len(MODULES) >= 100 and len(EDGES) >= 500


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_imports_go_one_way(path: Path) -> None:
    layer = _layer(path)
    for name in _imports(path):
        target = _target_layer(name)
        assert target is None or target in ALLOWED[layer], f"{layer} must not import {name}"


def test_no_import_circle() -> None:
    assert import_graph.circles(GRAPH) == []


def test_no_import_runs_up_the_rooms() -> None:
    assert [f"{e.source}:{e.line} -> {e.target}" for e in import_graph.upward(EDGES)] == []


def test_every_module_is_in_a_room() -> None:
    assert [m for m in GRAPH if import_graph.room(m) is None and GRAPH[m]] == []


def test_the_room_check_catches_an_upward_arrow() -> None:
    wrong = import_graph.Import("proxy.query.analyse.where", "proxy.query.rewrite.render", 1, False)
    right = import_graph.Import("proxy.query.rewrite.render", "proxy.query.analyse.where", 1, False)
    assert import_graph.upward([wrong, right]) == [wrong]
    assert import_graph.circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_function_level_imports_are_only_the_lazy_ones() -> None:
    nested = {(e.source, e.target) for e in EDGES if e.nested and e.source != "proxy.__main__"}  # per command
    assert nested == set(LAZY)


def test_packages_stay_small() -> None:
    top = [p for p in (ROOT / "proxy").glob("*.py")]
    assert len(top) <= 8, sorted(p.name for p in top)
    for package in {p.parent for p in MODULES}:
        assert len(list(package.glob("*.py"))) <= 16, package  # ~15 modules and an __init__


def test_dp_draws_stay_in_mechanisms() -> None:
    """The shell builds the sampler and passes it down; only the query layer hands it to a mechanism."""
    for path in MODULES:
        if _layer(path) != "proxy":
            continue
        for name in _imports(path):
            if name.startswith("mechanisms."):
                assert name.split(".")[1] in ("sampling", "rounding", "gdp"), f"{path}: {name}"
                if name.startswith("mechanisms.sampling."):
                    assert name.rsplit(".", 1)[1] in ("Sampler", "SecureSampler"), f"{path}: {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_side_effects_stay_in_their_module(path: Path) -> None:
    relative = path.relative_to(ROOT).as_posix()
    tops = {name.split(".")[0] for name in _imports(path)}
    names = _imports(path)
    if "duckdb" in tops:
        # the store builds the bounding store; domains evaluates a computed key on the policy's declared values
        # alone, in an in-memory database with no data, files or extensions; wire/catalog: the PostgreSQL
        # catalog emulated from the policy's names in an in-memory database (no data, external access off)
        assert relative in ("proxy/engines/duckdb_engine.py", "proxy/store/duckdb_store.py",
                            "proxy/query/computed/domains.py", "proxy/wire/catalog.py"), relative
    if "pyspark" in tops or "py4j" in tops:
        assert relative == "proxy/engines/spark_engine.py", relative  # the optional engine, one module
    if "sqlite3" in tops:
        assert relative in ("accountant/ledger/sqlite.py", "accountant/audit/log.py"), relative  # two SQLite stores
    if "psycopg" in tops:
        assert relative in ("accountant/ledger/postgres.py", "accountant/ledger/postgres_pool.py"), relative
    if names & RANDOMNESS or "random" in tops or "secrets" in tops:
        # demo: API keys; store: the deployment's bounding key
        assert relative in ("mechanisms/sampling.py", "proxy/cli/demo.py", "proxy/store/duckdb_store.py"), relative
    if tops & {"fastapi", "pydantic", "pydantic_settings", "starlette", "uvicorn"}:
        assert _layer(path) == "proxy", relative
    if "sqlglot" in tops:
        assert _layer(path) == "query", relative
    if "opendp" in tops:
        assert relative == "mechanisms/sampling.py"
