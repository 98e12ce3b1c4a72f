"""The lexical gate: cheap checks on the raw text before sqlglot sees it.

sqlglot's tokenizer and recursive-descent parser are not hardened against hostile input (deep nesting ends
in RecursionError, huge texts cost time), so length, nesting depth and characters are bounded first.
A small scanner tracks string literals, quoted identifiers and comments, so a quote inside a comment or an
identifier cannot flip the gate's idea of what is a string. Non-ASCII characters are allowed only inside
single-quoted string literals and comments: identifiers and keywords are plain ASCII, which rules out
homoglyph and invisible-character tricks.
"""

from __future__ import annotations

from proxy.query.errors import SqlSyntaxError, UnsupportedQuery

MAX_LENGTH = 20_000
MAX_DEPTH = 32
_ALLOWED_CONTROL = frozenset("\t\n\r")


def guard(text: str) -> str:
    """Return `text` unchanged if it passes the gate, else raise.

    Example:
        >>> guard("SELECT COUNT(*) AS \\"it's\\" FROM visits WHERE region = 'nörth' -- don't")
        'SELECT COUNT(*) AS "it\\'s" FROM visits WHERE region = \\'nörth\\' -- don\\'t'
    """
    if len(text) > MAX_LENGTH:
        raise UnsupportedQuery(
            f"query is {len(text)} characters long; the limit is {MAX_LENGTH}",
            construct="length", limit=MAX_LENGTH,
        )
    if not text.strip():
        raise SqlSyntaxError("the query is empty; send one SELECT statement", construct="empty")
    depth = 0
    state = "code"  # code | string | identifier | line_comment | block_comment
    position = 0
    while position < len(text):
        char, pair = text[position], text[position : position + 2]
        if not char.isprintable() and char not in _ALLOWED_CONTROL:
            raise SqlSyntaxError(
                f"invalid character U+{ord(char):04X} at offset {position}",
                construct="character", offset=position, hint="remove control or invisible characters",
            )
        if state == "code":
            if char == "'":
                state = "string"
            elif char == '"':
                state = "identifier"
            elif pair == "--":
                state, position = "line_comment", position + 1
            elif pair == "/*":
                state, position = "block_comment", position + 1
            elif not char.isascii():
                raise SqlSyntaxError(
                    f"non-ASCII character {char!r} at offset {position} outside a string literal",
                    construct="character", offset=position,
                    hint="identifiers and keywords must be ASCII; quote text values with '...'",
                )
            elif char == "(":
                depth += 1
                if depth > MAX_DEPTH:
                    raise UnsupportedQuery(
                        f"parentheses nest deeper than {MAX_DEPTH} levels",
                        construct="nesting", offset=position, limit=MAX_DEPTH,
                    )
            elif char == ")":
                depth -= 1
        elif state == "string" and char == "'":
            state = "code"  # '' inside a literal closes and reopens it: still correct
        elif state == "identifier":
            if char == '"':
                state = "code"
            elif not char.isascii():
                raise SqlSyntaxError(
                    f"non-ASCII character {char!r} at offset {position} in a quoted identifier",
                    construct="character", offset=position, hint="identifiers must be ASCII",
                )
        elif state == "line_comment" and char == "\n":
            state = "code"
        elif state == "block_comment" and pair == "*/":
            state, position = "code", position + 1
        position += 1
    return text
