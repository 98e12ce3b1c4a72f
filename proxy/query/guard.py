"""The lexical gate: cheap checks on the raw text before sqlglot sees it.

sqlglot's tokenizer and recursive-descent parser are not hardened against hostile input (deep nesting ends
in RecursionError, huge texts cost time), so length, nesting depth and characters are bounded first.
Non-ASCII characters are allowed only inside single-quoted string literals: identifiers and keywords are
plain ASCII, which rules out homoglyph and invisible-character tricks.
"""

from __future__ import annotations

from proxy.query.errors import SqlSyntaxError, UnsupportedQuery

MAX_LENGTH = 20_000
MAX_DEPTH = 32
_ALLOWED_CONTROL = frozenset("\t\n\r")


def guard(text: str) -> str:
    """Return `text` unchanged if it passes the gate, else raise.

    Example:
        >>> guard("SELECT COUNT(*) FROM visits")
        'SELECT COUNT(*) FROM visits'
        >>> guard("SELECT ((((1))))" + ")" * 0)
        'SELECT ((((1))))'
    """
    if len(text) > MAX_LENGTH:
        raise UnsupportedQuery(
            f"query is {len(text)} characters long; the limit is {MAX_LENGTH}",
            construct="length", limit=MAX_LENGTH,
        )
    if not text.strip():
        raise SqlSyntaxError("the query is empty; send one SELECT statement", construct="empty")
    depth = 0
    in_string = False
    for position, char in enumerate(text):
        if char == "'":
            in_string = not in_string  # '' inside a literal toggles twice: still correct
            continue
        if not char.isprintable() and char not in _ALLOWED_CONTROL:
            raise SqlSyntaxError(
                f"invalid character U+{ord(char):04X} at offset {position}",
                construct="character", offset=position, hint="remove control or invisible characters",
            )
        if in_string:
            continue
        if not char.isascii():
            raise SqlSyntaxError(
                f"non-ASCII character {char!r} at offset {position} outside a string literal",
                construct="character", offset=position,
                hint="identifiers and keywords must be ASCII; quote text values with '...'",
            )
        if char == "(":
            depth += 1
            if depth > MAX_DEPTH:
                raise UnsupportedQuery(
                    f"parentheses nest deeper than {MAX_DEPTH} levels",
                    construct="nesting", offset=position, limit=MAX_DEPTH,
                )
        elif char == ")":
            depth -= 1
    return text
