"""`dpproxy audit-verify LEDGER`: check the audit log's hash chain and print the result.

Exit status: 0 the chain is intact, 1 it was tampered with (the first bad entry and why are printed),
2 it could not be checked (unreachable database, unreadable file, unknown address). The address is not
echoed: a PostgreSQL URL may hold a password.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from accountant.audit import open_audit

OK, TAMPERED, UNCHECKED = 0, 1, 2


def audit_verify(url_or_path: str) -> int:
    """Verify the audit log at `url_or_path` (a SQLite path, sqlite:///… or postgresql://…); the exit code."""
    try:
        audit = open_audit(url_or_path)
        try:
            result = audit.verify()
        finally:
            audit.close()
    # any failure to open or read the log means "not checked" (2), never "intact" (0)
    except Exception as err:
        print(f"audit log: not checked: {type(err).__name__}: {err}", file=sys.stderr)
        return UNCHECKED
    if result.ok:
        print(f"audit log: ok, {result.checked} entries, head {result.head}")
        return OK
    print(f"audit log: TAMPERED at entry {result.first_bad_seq}: {result.reason}"
          f" ({result.checked} entries verified before it)")
    return TAMPERED


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m proxy.audit_cli LEDGER   (a SQLite path, sqlite:///PATH or postgresql://…)",
              file=sys.stderr)
        return UNCHECKED
    return audit_verify(args[0])


if __name__ == "__main__":
    sys.exit(main())
