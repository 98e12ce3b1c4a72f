"""What a query over public tables alone becomes: the rebuilt tree, the released names and the row limit."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from proxy.query.catalog import PublicTable


@dataclass(frozen=True, slots=True)
class PublicQuery:
    """A query over public tables, rebuilt: what runs (`tree`, with LIMIT at most `max_rows + 1`), the public
    tables it reads (each once, in the order met), the released column names, and the row limit to keep to.

    Example:
        >>> from proxy.query.catalog import ColumnSpec
        >>> t = PublicTable("nation", (ColumnSpec("n_name", "VARCHAR"),), ("n_name",))
        >>> PublicQuery((t,), ("n_name",), exp.select("1"), 10).label
        'the public table nation'
    """

    tables: tuple[PublicTable, ...]
    columns: tuple[str, ...]
    tree: exp.Select
    max_rows: int

    @property
    def label(self) -> str:
        """The tables read, for a message: `the public table a` or `the public tables a, b`."""
        names = ", ".join(t.name for t in self.tables)
        return f"the public table{'s' if len(self.tables) > 1 else ''} {names}"
