"""Shared test helpers: catalogs, scratch databases, live servers, ledger rows, Spark data."""
