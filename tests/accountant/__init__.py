"""Tests of accountant/: events, privacy maps, filters, per-cell accounting, ledgers and the audit log."""
