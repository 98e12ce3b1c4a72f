"""Computed values: per-row functions over declared columns, as keys, filters, and their domains."""
