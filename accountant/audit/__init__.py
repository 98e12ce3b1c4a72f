"""The audit log: hash-chained entries of every query request, and the chain's tables."""
