"""What responses show, computed from released values and the ledger: answers, budgets."""
