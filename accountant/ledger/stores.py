"""Choose the ledger's storage by its address: a SQLite file path or a PostgreSQL URL.

    ledger.sqlite, /var/lib/dp/ledger.sqlite, sqlite:///rel.sqlite, sqlite:////abs.sqlite  -> SqliteLedger
    postgresql://user@host:5432/db?options=-csearch_path%3Ddp, postgres://…               -> PostgresLedger

The audit log lives at the same address (its own table), so one setting names both.
"""

from __future__ import annotations

import os
from typing import Literal

from accountant.ledger.charges import Ledger, Waits
from accountant.ledger.sqlite import SqliteLedger

Kind = Literal["sqlite", "postgresql"]
_POSTGRES = ("postgresql://", "postgres://")
_SQLITE = "sqlite:///"


def store_of(url_or_path: str | os.PathLike[str]) -> tuple[Kind, str]:
    """The kind of store and what to open it with (a file path, or the PostgreSQL URL unchanged).

    Example:
        >>> store_of("sqlite:///ledger.sqlite"), store_of("sqlite:////var/dp/ledger.sqlite")
        (('sqlite', 'ledger.sqlite'), ('sqlite', '/var/dp/ledger.sqlite'))
        >>> store_of("postgresql://postgres@127.0.0.1:5432/test")
        ('postgresql', 'postgresql://postgres@127.0.0.1:5432/test')
        >>> store_of("mysql://user:secret@db/ledger")
        Traceback (most recent call last):
        ...
        ValueError: unsupported ledger address (scheme 'mysql'): use a file path, sqlite:///PATH or postgresql://…
    """
    text = os.fspath(url_or_path)
    if text.startswith(_POSTGRES):
        return "postgresql", text
    if text.startswith(_SQLITE):
        path = text.removeprefix(_SQLITE)
        if path:
            return "sqlite", path
    elif "://" not in text and text:
        return "sqlite", text
    scheme = text.split("://", 1)[0] if "://" in text else text
    # the address itself is not quoted: a URL may hold a password
    raise ValueError(f"unsupported ledger address (scheme {scheme!r}): use a file path, sqlite:///PATH or postgresql://…")


def open_ledger(url_or_path: str | os.PathLike[str], waits: Waits | None = None) -> Ledger:
    """Open (creating or migrating its tables if needed) the ledger at `url_or_path`, its waits bounded by
    `waits` (the defaults of `Waits` when None)."""
    kind, target = store_of(url_or_path)
    if kind == "postgresql":
        from accountant.ledger.postgres import PostgresLedger  # psycopg is loaded only for PostgreSQL

        return PostgresLedger(target, waits=waits)
    return SqliteLedger(target, waits=waits)
