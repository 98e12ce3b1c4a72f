"""How many charges each history holds, kept by the database itself, so that an admit can check its memo
(`_Admitting._tallied`) without counting the history.

`tallies` holds one row per (dataset, analyst): the number of charges. A dataset's is the sum over its
analysts (a read of one row per analyst, none per charge): a row per dataset would be locked by every admit
on the dataset from its insert to its commit, which would make admits of different analysts queue.
Triggers on `charges` keep them, in the statement that writes the charge, so a count commits atomically
with its charges and any one statement sees the two agree; whoever writes `charges` (an older dp-proxy
still running during an upgrade, an operator's script) keeps them too. An insert or a row moved to another
analyst or dataset raises the count of its history and a delete lowers it, so a charge that appears below a
memo's watermark (a late commit) changes the count without adding a row above it, and the memo is re-read.
Upgrades fill the counts from the existing charges (`FILL`), with the triggers already in place. So the
memo's safety now rests on the triggers: a writer that bypasses them (PostgreSQL's session_replication_role
= replica, a disabled trigger) and commits a charge below a watermark would go unseen by the memo.

Example:
    >>> import sqlite3
    >>> conn = sqlite3.connect(":memory:")
    >>> _ = conn.execute("CREATE TABLE charges (seq INTEGER PRIMARY KEY, analyst TEXT, dataset TEXT)")
    >>> for statement in SQLITE: _ = conn.execute(statement)
    >>> _ = conn.executemany("INSERT INTO charges (analyst, dataset) VALUES (?, 'd')", [("a",), ("a",), ("b",)])
    >>> _ = conn.execute("DELETE FROM charges WHERE analyst = 'b'")
    >>> conn.execute("SELECT * FROM tallies ORDER BY analyst").fetchall(), conn.execute(tally_sql("dataset = ?"),
    ...     ("d",)).fetchall()
    ([('d', 'a', 2), ('d', 'b', 0)], [(2,)])
"""

from __future__ import annotations

_TABLE = (  # the key's order serves both reads: a pair's row, and a dataset's rows
    "CREATE TABLE IF NOT EXISTS tallies (dataset TEXT NOT NULL, analyst TEXT NOT NULL, charges BIGINT NOT NULL,"
    " PRIMARY KEY (dataset, analyst))"
)


def _add(rows: str, sign: str = "") -> str:
    """The upsert adding (`sign` "-": taking) the charges of `rows` to (from) their counts."""
    return (
        f"INSERT INTO tallies (dataset, analyst, charges) SELECT dataset, analyst, {sign}COUNT(*) FROM {rows}"
        " WHERE TRUE GROUP BY dataset, analyst"  # WHERE: SQLite's upsert after a SELECT needs one
        " ON CONFLICT (dataset, analyst) DO UPDATE SET charges = tallies.charges + excluded.charges"
    )


def _body(*statements: str) -> str:
    return " ".join(f"{statement};" for statement in statements)


def _row(name: str) -> str:
    return f"(SELECT {name}.analyst AS analyst, {name}.dataset AS dataset)"


SQLITE: tuple[str, ...] = (  # SQLite triggers run for each row
    _TABLE,
    f"CREATE TRIGGER IF NOT EXISTS charges_tally_insert AFTER INSERT ON charges BEGIN {_body(_add(_row('NEW')))} END",
    "CREATE TRIGGER IF NOT EXISTS charges_tally_delete AFTER DELETE ON charges"
    f" BEGIN {_body(_add(_row('OLD'), '-'))} END",
    "CREATE TRIGGER IF NOT EXISTS charges_tally_move AFTER UPDATE OF analyst, dataset ON charges"
    f" BEGIN {_body(_add(_row('OLD'), '-'), _add(_row('NEW')))} END",
)

FILL: tuple[str, ...] = (
    "DELETE FROM tallies",
    "INSERT INTO tallies (dataset, analyst, charges) SELECT dataset, analyst, COUNT(*) FROM charges"
    " GROUP BY dataset, analyst",
)

# PostgreSQL's triggers run once per statement, on the rows it wrote (one upsert per history, however many
# rows: a bulk load would otherwise stack a version of one row per charge in its transaction). The SHARE ROW
# EXCLUSIVE lock, taken first and held to the commit, keeps every other writer out until the triggers exist
# and the counts are filled. The functions find `tallies` where the migration made it, whoever writes. The
# indexes serve the admit's read past a watermark.
POSTGRES = f"""
    LOCK TABLE charges IN SHARE ROW EXCLUSIVE MODE;
    {_body(_TABLE)}
    CREATE FUNCTION charges_tally() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF TG_OP IN ('DELETE', 'UPDATE') THEN {_body(_add('old_rows', '-'))} END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN {_body(_add('new_rows'))} END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER charges_tally_insert AFTER INSERT ON charges REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION charges_tally();
    CREATE TRIGGER charges_tally_delete AFTER DELETE ON charges REFERENCING OLD TABLE AS old_rows
        FOR EACH STATEMENT EXECUTE FUNCTION charges_tally();
    CREATE TRIGGER charges_tally_update AFTER UPDATE ON charges REFERENCING OLD TABLE AS old_rows
        NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION charges_tally();
    CREATE FUNCTION charges_untally() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN DELETE FROM tallies; RETURN NULL; END $$;
    CREATE TRIGGER charges_untally AFTER TRUNCATE ON charges FOR EACH STATEMENT EXECUTE FUNCTION charges_untally();
    {_body(*FILL)}
    CREATE INDEX charges_by_pair ON charges (analyst, dataset, seq);
    CREATE INDEX charges_by_dataset_seq ON charges (dataset, seq);
    DROP INDEX charges_by_owner;
    DROP INDEX charges_by_dataset;
"""


def count_sql(clause: str, *, timed: bool) -> str:
    """The number of charges a listing's filters select: their tallies' sum when the filters name only the
    analyst and dataset (`timed` False; the row count is never read), else a count of the rows."""
    return f"SELECT COUNT(*) FROM charges WHERE {clause}" if timed else tally_sql(clause)


def tally_sql(clause: str) -> str:
    """The count of the history `clause` selects (`dataset = …`: the sum over its analysts, or `analyst = …
    AND dataset = …`), 0 when it has none; one row."""
    return f"SELECT COALESCE((SELECT CAST(SUM(charges) AS BIGINT) FROM tallies WHERE {clause}), 0)"
