"""Memos of the planner's pure steps (issue #32): a bounded, thread-safe least-recently-used map, keys that tell
apart every input a step's result depends on, and a text's shape: the text with its top-level output labels cut out.

The planner (proxy/query/planner.py) is a pure function of its arguments, so the same arguments may get the same
result back instead of a new one: the parsed statement of a text, and the salt-free part of a plan. What comes
back is shared between requests, so it must never be changed by whoever uses it: the plan's records are frozen,
and no later step mutates a sqlglot tree it is given (every rule copies before it rewrites;
tests/query/test_plan_cache.py checks the whole corpus). Nothing here is random or reads data.

Example:
    >>> memo = Memo(2)
    >>> memo.put("a", 1); memo.put("b", 2); memo.get("a"); memo.put("c", 3)
    1
    >>> memo.get("b") is None, memo.get("a"), memo.get("c")
    (True, 1, 3)
    >>> exact(1) == exact(1.0), exact(0.0) == exact(-0.0), exact(None)
    (False, False, 'None')

A dashboard's or a bench's texts often differ only in the names they give their outputs (`COUNT(*) AS n1`, `AS
n2`): `labels` cuts such names out, and the planner plans a shape once and relabels its plan for every text of it
(`relabelled`; docs/architecture.md, "A plan per shape"):

    >>> shape = labels("SELECT plan, COUNT(*) AS n1 FROM users AS u GROUP BY plan", frozenset({"users", "plan"}))
    >>> shape.key, shape.names
    ('SELECT plan, COUNT(*) AS \\x00 FROM users AS u GROUP BY plan', ('n1',))
    >>> labels("SELECT plan, COUNT(*) AS n2 FROM users AS u GROUP BY plan", frozenset({"plan"})).key == shape.key
    True
    >>> labels("SELECT COUNT(*) AS n FROM t ORDER BY n", frozenset()) is None  # read again by name: not a label
    True
"""

from __future__ import annotations

import functools
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

V = TypeVar("V")
T = TypeVar("T")

MAX_TEXT = 16_384  # longer texts are planned every time: a memo of a few hundred of them stays a few MB


class Memo(Generic[V]):
    """At most `size` entries; the least recently used goes first. A lock guards each call (threads share it)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


def exact(value: object) -> str:
    """A parameter as a key: its repr, so that values Python calls equal but a plan prints differently (1 and 1.0,
    0.0 and -0.0, True and 1) are different keys. A plan's repeat identity is the repr of its records, so a hit must
    return exactly what planning these very arguments returns."""
    return repr(value)


LABEL = re.compile(r"[a-z][a-z0-9_]{0,62}")  # lower case, unquoted, not `_`-led (the rewrite's own `__k0`, `__m0`)
_OPEN = frozenset({TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE})
_CLOSE = frozenset({TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE})


@dataclass(frozen=True, slots=True)
class Shape:
    """A text with its output labels cut out (`key`: each replaced by NUL, which no accepted text holds: the lexical
    gate refuses control characters) and the labels cut, in order."""

    key: str
    names: tuple[str, ...]


def labels(sql: str, declared: frozenset[str], dialect: str = "duckdb") -> Shape | None:
    """The shape of `sql`, or None when it has no output label. A label is the name after `AS` of an output of the
    outermost SELECT (outside every parenthesis, before its FROM), that: matches `LABEL`; prints as itself,
    unquoted, in `dialect` (no keyword); is none of the `declared` names (the catalog's tables and columns, lower
    case: a label may not rename an expression to a column, analyse/select_list.py); and is the only token of the
    text with its spelling, in any case (no clause reads it by name, no other output or table shares it). Two texts
    of one shape then differ only in such names; the planner's proof that their plans differ only in the outputs'
    names is docs/architecture.md's "A plan per shape"."""
    if len(sql) > MAX_TEXT or "\x00" in sql:
        return None
    try:
        tokens = _dialect(dialect).tokenize(sql)  # a new tokenizer per call: threads may share the dialect
    except (SqlglotError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError):
        return None  # planned afresh, and refused there with the parser's own error
    spelled = Counter(t.text.lower() for t in tokens)
    depth, selected, cuts = 0, False, []
    for i, token in enumerate(tokens):
        kind = token.token_type
        if kind in _OPEN:
            depth += 1
        elif kind in _CLOSE:
            depth -= 1
        elif depth == 0 and kind == TokenType.SELECT:
            if selected:
                break  # a second SELECT at the top (a set operation): its names stay in the key
            selected = True
        elif depth == 0 and kind == TokenType.FROM:
            break
        elif (depth == 0 and selected and kind == TokenType.VAR and i > 0
              and tokens[i - 1].token_type == TokenType.ALIAS and label_prints(token.text, dialect)
              and token.text not in declared and spelled[token.text.lower()] == 1
              and sql[token.start:token.end + 1] == token.text):
            cuts.append(token)
    if not cuts:
        return None
    parts, names, at = [], [], 0
    for token in cuts:
        parts.append(sql[at:token.start])
        names.append(token.text)
        at = token.end + 1
    parts.append(sql[at:])
    return Shape("\x00".join(parts), tuple(names))


@functools.lru_cache(maxsize=16)
def _dialect(name: str) -> Dialect:
    return Dialect.get_or_raise(name)


def label_prints(name: str, dialect: str) -> bool:
    """`name` is a label's spelling (`LABEL`) that `dialect` prints as itself, unquoted (so not a reserved word).

    Example:
        >>> label_prints("n1", "duckdb"), label_prints("user", "duckdb"), label_prints("N1", "duckdb")
        (True, False, False)
    """
    return LABEL.fullmatch(name) is not None and exp.to_identifier(name).sql(dialect=dialect) == name


def word_count(text: str, name: str) -> int:
    """How often `name` occurs in `text` as a whole word (not inside a longer name or a quoted one).

    Example:
        >>> word_count('SELECT COUNT(*) AS n1 FROM t /* n1 */ WHERE "n1" = n10', "n1")
        2
    """
    return len(re.findall(rf"(?<![A-Za-z0-9_$\"]){re.escape(name)}(?![A-Za-z0-9_$\"])", text))


def relabels(planned: Any, names: tuple[str, ...], fixed: str | None) -> bool:
    """Whether the salt-free plan `planned` of a text whose labels are `names` (its shape's) holds each label in
    exactly two places, the one output it names and the one word of the normalised text, and nowhere else (not in
    the price, the automatic bounds, a tree, nor the salt-free SQL `fixed`): then `relabelled` may name them anew."""
    if len(set(names)) != len(names):
        return False
    records = repr(replace(planned, source_sql="", normalized_sql=""))
    outputs = [o.name for o in planned.analysis.outputs]
    return all(outputs.count(name) == 1 and word_count(planned.normalized_sql, name) == 1
               and word_count(records, name) == 1 and (fixed is None or word_count(fixed, name) == 0)
               for name in names)


def relabelled(planned: T, old: tuple[str, ...], new: tuple[str, ...], sql: str) -> T:
    """The plan `planned` (`relabels` held) with its labels `old` renamed `new`, position by position, in its
    outputs and normalised text, and `sql` as its source text."""
    names = dict(zip(old, new, strict=True))
    word = "|".join(re.escape(name) for name in old)
    normalised = re.sub(rf"(?<![A-Za-z0-9_$\"])({word})(?![A-Za-z0-9_$\"])", lambda m: names[m.group(1)],
                        planned.normalized_sql)  # type: ignore[attr-defined]
    analysis = planned.analysis  # type: ignore[attr-defined]
    outputs = tuple(replace(o, name=names.get(o.name, o.name)) for o in analysis.outputs)
    return replace(planned, source_sql=sql, normalized_sql=normalised,  # type: ignore[type-var]
                   analysis=replace(analysis, outputs=outputs))
