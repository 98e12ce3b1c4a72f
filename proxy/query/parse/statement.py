"""Text -> exactly one sqlglot SELECT tree, read in the analyst's SQL dialect (DuckDB's by default). One of the
two places that catch sqlglot's exceptions; everything it raises becomes a QueryError so that no input can
produce a 500. Whatever the dialect, the tree is analysed and rewritten alike, and runs as DuckDB SQL."""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError

from proxy.query.errors import InvalidParameter, SqlSyntaxError, UnsupportedQuery
from proxy.query.parse.lexical_gate import guard

# the dialects BI tools and notebooks send, read by sqlglot's parser for each
DIALECTS = ("duckdb", "postgres", "mysql", "bigquery", "snowflake", "tsql")


def parse(text: str, dialect: str = "duckdb") -> exp.Select:
    """Parse one SELECT statement written in `dialect`.

    Example:
        >>> parse("SELECT COUNT(*) FROM visits").sql()
        'SELECT COUNT(*) FROM visits'
        >>> parse("SELECT TOP 5 [region], COUNT(*) FROM [visits] GROUP BY [region]", "tsql").sql("duckdb")
        'SELECT "region", COUNT(*) FROM "visits" GROUP BY "region" LIMIT 5'
    """
    if dialect not in DIALECTS:
        raise InvalidParameter(
            f"unknown SQL dialect {dialect!r}; supported: {', '.join(DIALECTS)}", parameter="dialect",
            supported=list(DIALECTS),
        )
    guard(text)
    try:
        statements = [s for s in sqlglot.parse(text, read=dialect) if s is not None]
    except ParseError as err:
        first = err.errors[0] if err.errors else {}
        raise SqlSyntaxError(
            f"SQL syntax error: {first.get('description', 'cannot parse the query')}",
            construct="syntax", line=first.get("line"), col=first.get("col"),
        ) from err
    except RecursionError as err:
        raise UnsupportedQuery("the query is nested too deeply", construct="nesting") from err
    except (SqlglotError, ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
        # sqlglot is a lenient transpiler, not a validator: odd input can surface as other errors.
        raise SqlSyntaxError("SQL syntax error: cannot parse the query", construct="syntax") from err
    if len(statements) != 1:
        raise UnsupportedQuery(
            f"send exactly one statement; found {len(statements)}",
            construct="statements", count=len(statements),
        )
    statement = statements[0]
    if not isinstance(statement, exp.Select):
        construct = statement.key.upper()
        raise UnsupportedQuery(
            f"{construct} is not supported; only SELECT ... FROM <table> [WHERE] [GROUP BY] queries run",
            construct=construct,
        )
    return statement


def normalised(tree: exp.Select, dialect: str = "duckdb") -> str:
    """The query as the audit log records it (and the ledger's `sql_sha256` hashes): sqlglot's normal form, printed
    in the dialect it was read in, after a comment naming that dialect unless it is DuckDB's. Printed as DuckDB's
    instead, a query would read as another one: PostgreSQL's `age / 10` divides integers, DuckDB's divides reals,
    and sqlglot prints both as `age / 10`.

    Example:
        >>> normalised(parse("select count(*) from visits where age / 10 = 3", "postgres"), "postgres")
        '/* postgres */ SELECT COUNT(*) FROM visits WHERE age / 10 = 3'
        >>> normalised(parse("select count(*) from visits where age // 10 = 3"))
        'SELECT COUNT(*) FROM visits WHERE age // 10 = 3'
    """
    text = tree.sql(dialect=dialect)
    return text if dialect == "duckdb" else f"/* {dialect} */ {text}"
