"""The ledger of charges: the one place budget state lives, and the only read-modify-write (docs/architecture.md).

`admit` checks a charge against the analyst's remaining budget (and, if the dataset has one, the total
budget shared by all its analysts) and records it in one atomic step, before any result exists; there are
no refunds. `SqliteLedger` makes that step one `BEGIN IMMEDIATE` transaction, so threads and processes
sharing a file can never overspend. Charges store the exact `Event` (as JSON) next to their (ε, δ) under
basic composition, so spend can be re-accounted under any rule, and the cells they could touch. The
accounting math is not here: `cells.py`, `filter.py` and `report.py` run on the history read inside the
transaction (only what is new since the last admit, see `_Admitting._tallied`).

This module names the ledger's parts, each in a module of its own: the records and the `Ledger` protocol
(charges.py), the one admit every store shares (ledger/admit.py), the stores (ledger/memory.py,
ledger/sqlite.py, postgres.py), the SQL row codecs the last two share (sql_rows.py) and the per-history
counts their triggers keep, which spare an admit counting the history (tallies.py).
"""
