"""PostgreSQL for tests: the server's address, and a fresh schema per test, dropped afterwards.

The server is required, never skipped: when it cannot be reached the tests fail and say how to start it
(CI starts it). `DPPROXY_TEST_POSTGRES` overrides the default address.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

BASE_URL = os.environ.get("DPPROXY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@cache
def _reachable() -> str | None:
    try:
        with psycopg.connect(BASE_URL, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as err:
        return f"{type(err).__name__}: {err}".strip()
    return None


def _shown(url: str) -> str:
    """The address without its password (CI logs are shared)."""
    parts = conninfo_to_dict(url)
    return " ".join(f"{key}={value}" for key, value in parts.items() if key != "password")


def require_postgres() -> str:
    """The server's URL; fails the calling test (never skips) when the server cannot be reached."""
    problem = _reachable()
    if problem is not None:
        pytest.fail(
            f"PostgreSQL is not reachable at {_shown(BASE_URL)} ({problem}). These tests need a PostgreSQL 15 server:"
            " start one (CI does) or point DPPROXY_TEST_POSTGRES at one.",
            pytrace=False,
        )
    return BASE_URL


def url_in(schema: str) -> str:
    """`BASE_URL` with `schema` as the search path: every table the code creates or reads lives there."""
    separator = "&" if "?" in BASE_URL else "?"
    return f"{BASE_URL}{separator}options=-csearch_path%3D{schema}"


@contextmanager
def fresh_schema() -> Iterator[tuple[str, str]]:
    """A new empty schema and the URL that uses it; the schema and everything in it is dropped afterwards."""
    base = require_postgres()
    schema = f"t_{uuid.uuid4().hex}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema, url_in(schema)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def execute(url: str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Run one statement on its own connection (as an outsider would: to inspect or tamper)."""
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []
