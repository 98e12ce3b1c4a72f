"""Names in a query over public tables: each column resolved to a declared column of a relation in scope.

A frame is one SELECT's relations (its FROM and JOIN items), each under a generated alias (`t1`, `t2`, …) and
the names the analyst may qualify it with (its alias, else its table name); a subquery's frame sees the frames
around it (correlation). A column resolves as SQL resolves it: qualified, to the relation of that name in the
nearest frame that has one; unqualified, to the one relation of the nearest frame that declares the name (two
there: ambiguous, refused). What resolves is written as the generated alias and the declared name, so the
rebuilt SQL names only declared columns, whatever the analyst spelt.

Example:
    >>> r = Relation("t1", ("n",), {"n_name": "n_name"})
    >>> Frame((r,), None).column(exp.column("n_name", table="n")).sql()
    '"t1"."n_name"'
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from proxy.query.errors import PolicyError, UnsupportedQuery


@dataclass(frozen=True, slots=True)
class Relation:
    """A relation in scope: its generated alias, the names that qualify it, and its columns (lower-cased name →
    the declared or output name written)."""

    alias: str
    names: tuple[str, ...]
    columns: dict[str, str]


@dataclass(frozen=True, slots=True)
class Frame:
    relations: tuple[Relation, ...]
    outer: Frame | None

    def column(self, node: exp.Column) -> exp.Column:
        """`node` as `"alias"."declared name"` of the relation it names; a refusal when it names none."""
        if node.args.get("db") or node.args.get("catalog") or not isinstance(node.this, exp.Identifier):
            raise UnsupportedQuery(f"{node.sql()}: name a column as column or table.column",
                                   construct="COLUMN", column=node.sql())
        name = node.name.lower()
        frame: Frame | None = self
        while frame is not None:
            if node.table:
                named = [r for r in frame.relations if node.table.lower() in r.names]
                if named:
                    return _written(named[0], name, node)
            else:
                owners = [r for r in frame.relations if name in r.columns]
                if len(owners) > 1:
                    raise UnsupportedQuery(
                        f"column {node.name!r} is ambiguous: several tables in FROM have it; qualify it "
                        "(table.column)", construct="COLUMN", column=node.name)
                if owners:
                    return _written(owners[0], name, node)
            frame = frame.outer
        raise PolicyError(f"unknown column {node.sql()!r}: no table in scope declares it", construct="COLUMN",
                          column=node.name)

    def has(self, name: str) -> bool:
        """Whether an unqualified `name` resolves to a column in this frame or one around it."""
        frame: Frame | None = self
        while frame is not None:
            if any(name.lower() in r.columns for r in frame.relations):
                return True
            frame = frame.outer
        return False


def _written(relation: Relation, name: str, node: exp.Column) -> exp.Column:
    if name not in relation.columns:
        raise PolicyError(f"unknown column {node.sql()!r}: not a declared column of {node.table or 'its table'}",
                          construct="COLUMN", column=node.name)
    return exp.column(relation.columns[name], table=relation.alias, quoted=True)
