"""Imports go one way (proxy shell → proxy.query → accountant → mechanisms), and side effects stay in
their one module each: duckdb in proxy/engines/duckdb_engine.py, pyspark in proxy/engines/spark_engine.py,
sqlite3 in accountant/sqlite_ledger.py and accountant/audit.py,
psycopg in accountant/postgres.py, randomness in
mechanisms/sampling.py, fastapi/pydantic only in the proxy shell, sqlglot only in proxy/query."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(p for package in ("proxy", "accountant", "mechanisms") for p in (ROOT / package).rglob("*.py"))
RANDOMNESS = {"random", "secrets", "numpy.random"}


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
    assert len(MODULES) >= 25


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_imports_go_one_way(path: Path) -> None:
    layer = _layer(path)
    for name in _imports(path):
        target = _target_layer(name)
        assert target is None or target in ALLOWED[layer], f"{layer} must not import {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_side_effects_stay_in_their_module(path: Path) -> None:
    relative = path.relative_to(ROOT).as_posix()
    tops = {name.split(".")[0] for name in _imports(path)}
    names = _imports(path)
    if "duckdb" in tops:
        # store: builds the bounding store; key_domains: evaluates a computed key on the policy's declared values
        # alone, in an in-memory database with no data, files or extensions; wire/catalog: the PostgreSQL
        # catalog emulated from the policy's names in an in-memory database (no data, external access off)
        assert relative in ("proxy/engines/duckdb_engine.py", "proxy/store.py", "proxy/query/key_domains.py",
                            "proxy/wire/catalog.py"), relative
    if "pyspark" in tops or "py4j" in tops:
        assert relative == "proxy/engines/spark_engine.py", relative  # the optional engine, one module
    if "sqlite3" in tops:
        assert relative in ("accountant/sqlite_ledger.py", "accountant/audit.py"), relative  # the two SQLite stores
    if "psycopg" in tops:
        assert relative == "accountant/postgres.py", relative
    if names & RANDOMNESS or "random" in tops or "secrets" in tops:
        # demo: API keys; store: the deployment's bounding key
        assert relative in ("mechanisms/sampling.py", "proxy/demo.py", "proxy/store.py"), relative
    if tops & {"fastapi", "pydantic", "pydantic_settings", "starlette", "uvicorn"}:
        assert _layer(path) == "proxy", relative
    if "sqlglot" in tops:
        assert _layer(path) == "query", relative
    if "opendp" in tops:
        assert relative == "mechanisms/sampling.py"
