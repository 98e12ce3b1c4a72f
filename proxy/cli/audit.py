"""`dpproxy audit-verify LEDGER`: check the audit log's hash chain and its coverage of the ledger, and print both.

Two checks: the hash chain is intact (`AuditLog.verify`), and every charge in the ledger at that address has
its `admitted` entry (same id, analyst, dataset, SQL hash, ε and δ) and every `admitted` entry its charge
(`AuditLog.coverage`). Exit status: 0 both hold, 1 either fails (the first bad entry and why, or the
charges without an entry and the entries without a charge, are printed), 2 it could not be checked
(unreachable database, unreadable file, unknown address). The address is not echoed: a PostgreSQL URL may
hold a password.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from accountant.audit.log import open_audit

OK, TAMPERED, UNCHECKED = 0, 1, 2
LISTED = 20  # charge ids printed per kind of gap


def audit_verify(url_or_path: str) -> int:
    """Verify the audit log at `url_or_path` (a SQLite path, sqlite:///… or postgresql://…); the exit code."""
    try:
        audit = open_audit(url_or_path)
        try:
            result = audit.verify()
            covered = audit.coverage(listed=LISTED)
        finally:
            audit.close()
    # any failure to open or read the log means "not checked" (2), never "intact" (0)
    except Exception as err:
        print(f"audit log: not checked: {type(err).__name__}: {err}", file=sys.stderr)
        return UNCHECKED
    if result.ok:
        print(f"audit log: ok, {result.checked} entries, head {result.head}")
    else:
        print(f"audit log: TAMPERED at entry {result.first_bad_seq}: {result.reason}"
              f" ({result.checked} entries verified before it)")
    if covered.ok:
        print(f"charges: ok, {covered.charges} charges, each with its admitted entry")
    for count, ids, what in (
        (covered.unaudited_count, covered.unaudited, "charges have no admitted audit entry"),
        (covered.orphaned_count, covered.orphaned, "admitted audit entries have no charge in the ledger"),
    ):
        if count:
            more = f" (first {len(ids)})" if count > len(ids) else ""
            print(f"charges: MISSING: {count} {what}{more}: {', '.join(ids)}")
    return OK if result.ok and covered.ok else TAMPERED


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m proxy.cli.audit LEDGER   (a SQLite path, sqlite:///PATH or postgresql://…)",
              file=sys.stderr)
        return UNCHECKED
    return audit_verify(args[0])


if __name__ == "__main__":
    sys.exit(main())
