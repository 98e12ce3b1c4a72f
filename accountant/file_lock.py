"""One in-process lock per SQLite file, taken by every writer of that file in this process before SQLite's own.

The ledger and the audit log keep separate connections to one file (accountant/ledger/sqlite.py,
accountant/audit/log.py). When two of them want SQLite's write lock at once, the loser does not queue: SQLite's
busy handler polls, sleeping 1, 2, 5, 10, … up to 100 ms between tries, so under load a request can sleep
far longer than the write it waits for. Writers in one process therefore queue on this lock first (a
plain FIFO handover, no sleeping); SQLite's lock and busy timeout still order writers in other processes.

Example:
    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     a, b = pathlib.Path(tmp) / "x.db", pathlib.Path(tmp) / "y.db"
    ...     same = writer_lock(a) is writer_lock(pathlib.Path(tmp) / "." / "x.db")
    ...     other = writer_lock(a) is writer_lock(b)
    >>> same, other
    (True, False)
"""

from __future__ import annotations

import os
import threading

_LOCKS: dict[str, threading.Lock] = {}
_GUARD = threading.Lock()


def writer_lock(path: str | os.PathLike[str]) -> threading.Lock:
    """The lock every writer of the database file at `path` takes in this process (the same object for
    every spelling of the path)."""
    key = os.path.realpath(os.fspath(path))
    with _GUARD:
        return _LOCKS.setdefault(key, threading.Lock())
