"""The SQL the PostgreSQL front-end (proxy/wire/) reads before the pipeline: pure, no data.

- `statement_count(sql)`: how many statements a message holds (the front-end takes one at a time).
- `bind(sql, values)`: a prepared statement's `$n` parameters replaced by typed literals, in the tree.
- `catalog_sql(sql, relations)`: a SELECT that reads only the emulated catalog (`pg_catalog`,
  `information_schema`) or no table at all, as DuckDB SQL over the emulation's tables (proxy/wire/catalog.py);
  None for any other query (a data query: the pipeline's).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Sequence
from decimal import Decimal

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from proxy.query.errors import InvalidParameter, SqlSyntaxError

DIALECT = "postgres"
CATALOG_SCHEMAS = {"pg_catalog": "wire_pg", "information_schema": "wire_is"}  # -> the emulation's schemas
# type names of PostgreSQL that DuckDB lacks, as DuckDB reads them in a catalog query
_OID_TYPES = {"OID", "REGCLASS", "REGTYPE", "REGPROC", "REGPROCEDURE", "REGNAMESPACE", "REGROLE", "XID", "CID"}

# functions of PostgreSQL the emulation defines (as `wire_<name>` macros: proxy/wire/catalog.py)
EMULATED_FUNCTIONS = frozenset({
    "version", "current_setting", "pg_backend_pid", "format_type", "pg_get_userbyid", "obj_description",
    "col_description", "shobj_description", "pg_encoding_to_char", "has_table_privilege", "has_schema_privilege",
    "has_database_privilege", "pg_get_expr", "pg_get_indexdef", "pg_get_constraintdef", "pg_table_is_visible",
    "pg_type_is_visible", "pg_function_is_visible", "current_schemas", "pg_postmaster_start_time",
    "pg_get_viewdef", "pg_relation_size", "pg_total_relation_size", "pg_is_in_recovery", "txid_current",
    "pg_get_function_identity_arguments", "quote_ident", "inet_server_addr", "inet_server_port",
    "pg_get_statisticsobjdef_columns", "pg_relation_is_publishable", "pg_get_partkeydef", "array_upper",
    "pg_get_triggerdef", "pg_get_ruledef", "pg_get_serial_sequence", "to_regtype", "to_regclass",
    "pg_collation_is_visible", "has_any_column_privilege", "has_column_privilege", "array_lower", "parse_ident",
})
_SCALAR_IN_FROM = {"string_to_array", "split", "string_split", "current_schemas", "regexp_split_to_array"}  # not tables
# the table functions a catalog query may call (PostgreSQL's; DuckDB's own, such as duckdb_settings(), are not)
_TABLE_FUNCTIONS = {"unnest", "explode", "generate_series", "exploding_generate_series", "generate_subscripts", "range"}
_DUCKDB_NAMES = {"json_build_object": "json_object"}  # PostgreSQL's functions DuckDB has under another name
_SESSION_FUNCTIONS: dict[type[exp.Expr], str] = {
    exp.CurrentVersion: "version", exp.CurrentSchema: "current_schema", exp.CurrentUser: "current_user",
    exp.CurrentDatabase: "current_database", exp.SessionUser: "current_user",
}

BindValue = str | int | float | bool | Decimal | datetime.date | datetime.datetime | None


def statement_count(sql: str) -> int:
    """Statements in `sql` (empty ones between semicolons not counted); 1 when it does not tokenize
    (the parser then says what is wrong).

    Example:
        >>> statement_count("SELECT 1; SELECT 2"), statement_count("SELECT ';';"), statement_count("  ")
        (2, 1, 0)
    """
    try:
        tokens = sqlglot.tokenize(sql, read=DIALECT)
    except SqlglotError:
        return 1
    count, pending = 0, False
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            count, pending = count + pending, False
        else:
            pending = True
    return count + pending


_KEYWORD_ALIAS = re.compile(r"\bAS\s+(SELECT|INSERT|UPDATE|DELETE|TABLE|FROM|WHERE|ORDER|GROUP|USER)\b", re.I)


def _parse(sql: str, lenient: bool = False) -> exp.Expr:
    """One statement's tree; `lenient` (catalog queries) retries with keywords used as column aliases quoted
    (`AS select`: PostgreSQL takes any keyword there, sqlglot does not)."""
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except SqlglotError as err:
        quoted = _KEYWORD_ALIAS.sub(lambda m: f'AS "{m.group(1).lower()}"', sql) if lenient else sql
        if quoted != sql:
            return _parse(quoted)
        raise SqlSyntaxError(f"could not parse the statement: {str(err).splitlines()[0][:200]}") from err
    if tree is None:
        raise SqlSyntaxError("an empty statement")
    return tree


def parameter_count(sql: str) -> int:
    """The highest `$n` in `sql` (0 without parameters, or when it does not parse).

    Example:
        >>> parameter_count("SELECT region FROM visits WHERE age > $2 AND region = $1")
        2
    """
    try:
        tree = _parse(sql)
    except SqlSyntaxError:
        return 0
    return max((_index(p) for p in tree.find_all(exp.Parameter)), default=0)


def parameter_columns(sql: str) -> dict[int, str]:
    """For each `$n` compared with a column (`=`, `<`, `IN`, `BETWEEN`, ...), that column's name: the type a
    client is told to send it as.

    Example:
        >>> sql = "SELECT COUNT(*) FROM t WHERE age > $1 AND region IN ($2, 'x') AND $3 = v.day"
        >>> sorted(parameter_columns(sql).items())
        [(1, 'age'), (2, 'region'), (3, 'day')]
    """
    try:
        tree = _parse(sql)
    except SqlSyntaxError:
        return {}
    found: dict[int, str] = {}
    for parameter in tree.find_all(exp.Parameter):
        parent = parameter.parent
        while isinstance(parent, exp.Tuple | exp.Paren):
            parent = parent.parent
        column = None
        if isinstance(parent, exp.Binary):
            other = parent.expression if parent.this is parameter else parent.this
            column = other if isinstance(other, exp.Column) else None
        elif isinstance(parent, exp.In | exp.Between):
            column = parent.this if isinstance(parent.this, exp.Column) else None
        if column is not None and _index(parameter):
            found[_index(parameter)] = column.name.lower()
    return found


def _index(node: exp.Parameter) -> int:
    text = node.this.name if isinstance(node.this, exp.Expr) else str(node.this)
    return int(text) if text.isdigit() else 0


def literal(value: BindValue) -> exp.Expr:
    """A typed SQL literal for one bound value.

    Example:
        >>> [literal(v).sql("postgres") for v in ("it's", 3, 2.5, True, None, datetime.date(2024, 1, 2))]
        ["'it''s'", '3', '2.5', 'TRUE', 'NULL', "CAST('2024-01-02' AS DATE)"]
    """
    match value:
        case None:
            return exp.null()
        case bool():
            return exp.Boolean(this=value)
        case int() | Decimal():
            return exp.Literal.number(str(value))
        case float():
            if value != value or value in (float("inf"), float("-inf")):
                raise InvalidParameter("a bound parameter must be a finite number", parameter="bind")
            return exp.Literal.number(repr(value))
        case datetime.datetime():
            return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), exp.DataType.build("TIMESTAMP"))
        case datetime.date():
            return exp.cast(exp.Literal.string(value.isoformat()), exp.DataType.build("DATE"))
    return exp.Literal.string(str(value))


def bind(sql: str, values: Sequence[BindValue]) -> str:
    """`sql` with each `$n` replaced by the literal of `values[n-1]`, printed again (never spliced as text).

    Example:
        >>> bind("SELECT region, COUNT(*) FROM visits WHERE region = $1 AND age > $2 GROUP BY region",
        ...      ["no'rth", 30])
        "SELECT region, COUNT(*) FROM visits WHERE region = 'no''rth' AND age > 30 GROUP BY region"
    """
    tree = _parse(sql)
    wanted = max((_index(p) for p in tree.find_all(exp.Parameter)), default=0)
    if wanted != len(values):
        raise InvalidParameter(f"the statement has {wanted} parameters and {len(values)} were bound",
                               parameter="bind")
    if not values:
        return sql

    def substitute(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Parameter) and 1 <= _index(node) <= len(values):
            return literal(values[_index(node) - 1])
        return node

    return tree.transform(substitute).sql(dialect=DIALECT)


def without_schema(sql: str, schema: str = "public") -> str:
    """`sql` with the `schema` qualifier dropped from its tables and columns: clients qualify the tables the
    emulated catalog lists under `public` (`"public"."visits"`); the policy's tables are unqualified.

    Example:
        >>> without_schema('SELECT "visits"."region", COUNT(*) FROM "public"."visits" GROUP BY 1')
        'SELECT "visits"."region", COUNT(*) FROM "visits" GROUP BY 1'
        >>> without_schema("SELECT COUNT(*) FROM visits")
        'SELECT COUNT(*) FROM visits'
    """
    if schema not in sql.lower():
        return sql
    try:
        tree = _parse(sql)
    except SqlSyntaxError:  # the pipeline's parser says what is wrong, where
        return sql
    touched = False
    for node in (*tree.find_all(exp.Table), *tree.find_all(exp.Column)):
        if node.args.get("db") is not None and node.db.lower() == schema and node.args.get("catalog") is None:
            node.set("db", None)
            touched = True
    return tree.sql(dialect=DIALECT) if touched else sql


def catalog_sql(sql: str, relations: frozenset[str]) -> str | None:
    """DuckDB SQL for a SELECT that reads only catalog relations (`pg_catalog.*`, `information_schema.*`,
    an unqualified `pg_*` name among `relations`) or no table; None otherwise (a data query). Catalog names
    are moved to the emulation's schemas, `pg_catalog.` is dropped from function names, and the PostgreSQL
    syntax DuckDB lacks (`OPERATOR(pg_catalog.~)`, `COLLATE`, casts to `regclass` and the like) rewritten.

    Example:
        >>> catalog_sql("SELECT relname FROM pg_catalog.pg_class WHERE relname OPERATOR(pg_catalog.~) '^v' "
        ...             "COLLATE pg_catalog.default", frozenset({"pg_class"}))
        "SELECT relname FROM wire_pg.pg_class WHERE REGEXP_MATCHES(relname, '^v')"
        >>> catalog_sql("SELECT COUNT(*) FROM visits", frozenset()) is None
        True
    """
    tree = _parse(sql, lenient=True)
    if not isinstance(tree, exp.Query):
        return None
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        if isinstance(table.this, exp.Func):  # unnest, generate_series: no data there; nothing else
            if _function_name(table.this) not in _TABLE_FUNCTIONS | _SCALAR_IN_FROM:
                return None
            continue
        if not isinstance(table.this, exp.Identifier):  # a string (a file name): never the catalog's
            return None
        schema, name = table.db.lower(), table.name.lower()
        if schema in CATALOG_SCHEMAS or (not schema and name in relations) or (not schema and name in ctes):
            continue
        return None
    if isinstance(tree, exp.Select):  # columns named as PostgreSQL names them, before the names change
        tree.set("expressions", [e if isinstance(e, exp.Alias | exp.Star | exp.Column) else
                                 exp.alias_(e, pg_name(e), quoted=True) for e in tree.expressions])
    return _post_order(tree, lambda n: _to_duckdb(n, ctes)).sql(dialect="duckdb")


def _post_order(node: exp.Expr, rewrite: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """`rewrite` applied to every node, children before their parent (a rewritten node's children are done)."""
    for child in list(node.iter_expressions()):
        new = _post_order(child, rewrite)
        if new is not child:
            child.replace(new)
    return rewrite(node)


def pg_name(node: exp.Expr) -> str:
    """The name PostgreSQL gives an unaliased output column.

    Example:
        >>> [pg_name(sqlglot.parse_one(s, read="postgres")) for s in ("c.relname", "pg_catalog.version()",
        ...  "current_schema()", "1", "x::text", "'a'::text")]
        ['relname', 'version', 'current_schema', '?column?', 'x', 'text']
    """
    match node:
        case exp.Column():
            return node.name
        case exp.Dot() if isinstance(node.expression, exp.Func):
            return pg_name(node.expression)
        case exp.Anonymous():
            return node.name.lower()
        case exp.Cast():
            inner = pg_name(node.this)
            return node.to.sql("postgres").lower().split(".")[-1] if inner == "?column?" else inner
        case exp.CurrentVersion():
            return "version"
        case exp.Func():
            return _SESSION_FUNCTIONS.get(type(node), node.sql_name().lower())
    return "?column?"


def _to_duckdb(node: exp.Expr, ctes: set[str]) -> exp.Expr:
    if isinstance(node, exp.Collate):
        return node.this
    if isinstance(node, exp.Cast):
        return _cast(node)
    if isinstance(node, exp.Column) and node.args.get("db") is not None and node.db.lower() in CATALOG_SCHEMAS:
        node.set("db", exp.to_identifier(CATALOG_SCHEMAS[node.db.lower()]))  # pg_catalog.pg_class.relname
        return node
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Func):  # pg_catalog.unnest(...): DuckDB's own
        node.set("db", None)
        alias = node.alias
        if _function_name(node.this) in _SCALAR_IN_FROM and alias:  # FROM string_to_array(...) s: one row
            return exp.select(exp.alias_(node.this, alias)).subquery(alias)
        return node
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier) and not (
            not node.db and node.name.lower() in ctes):
        schema = CATALOG_SCHEMAS.get(node.db.lower(), "wire_pg")
        node = node.copy()
        node.set("db", exp.to_identifier(schema))
        node.set("catalog", None)
        node.set("this", exp.to_identifier(node.name.lower()))
        return node
    if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) and node.this.name.lower() == "pg_catalog" \
            and isinstance(node.expression, exp.Func):
        return _function(node.expression)
    if isinstance(node, exp.Func):
        return _function(node)
    if isinstance(node, exp.Operator):
        operator = str(node.args.get("operator", "")).split(".")[-1].strip()
        left, right = node.this, node.expression
        match operator:
            case "~":
                return exp.RegexpLike(this=left, expression=right)
            case "!~":
                return exp.not_(exp.RegexpLike(this=left, expression=right))
            case "~*":
                return exp.RegexpILike(this=left, expression=right)
            case "=" | "<>" | "<" | ">" | "<=" | ">=":
                return _binary(operator, left, right)
        return node
    return node


def _function_name(node: exp.Func) -> str:
    return node.name.lower() if isinstance(node, exp.Anonymous) else node.sql_name().lower()


def _function(node: exp.Func) -> exp.Expr:
    """A function the emulation answers itself (a `wire_` macro of proxy/wire/catalog.py), else `node`."""
    if type(node) in _SESSION_FUNCTIONS:
        return exp.Anonymous(this=f"wire_{_SESSION_FUNCTIONS[type(node)]}", expressions=[])
    if isinstance(node, exp.Anonymous) and node.name.lower() in _DUCKDB_NAMES:
        return exp.Anonymous(this=_DUCKDB_NAMES[node.name.lower()], expressions=list(node.expressions))
    if isinstance(node, exp.Anonymous) and node.name.lower() in EMULATED_FUNCTIONS:
        return exp.Anonymous(this=f"wire_{node.name.lower()}", expressions=list(node.expressions))
    return node


def _binary(operator: str, left: exp.Expr, right: exp.Expr) -> exp.Expr:
    kinds: dict[str, type[exp.Binary]] = {"=": exp.EQ, "<>": exp.NEQ, "<": exp.LT, ">": exp.GT, "<=": exp.LTE,
                                          ">=": exp.GTE}
    return kinds[operator](this=left, expression=right)


def _cast(node: exp.Cast) -> exp.Expr:
    to = node.args.get("to")
    if isinstance(to, exp.DataType) and to.is_type(exp.DType.ARRAY) and "pg_catalog." in to.sql("postgres"):
        to = exp.DataType.build(to.sql("postgres").replace("pg_catalog.", ""), dialect="postgres")
        node = exp.cast(node.this, to)
    kind = to.args.get("kind") if isinstance(to, exp.DataType) else None
    name = (to.name if isinstance(to, exp.ObjectIdentifier) else kind.name if isinstance(kind, exp.Identifier)
            else kind.expression.name if isinstance(kind, exp.Dot) else None)  # pg_catalog.regtype
    if name is None:
        return node
    upper = name.upper()
    if isinstance(kind, exp.Dot):  # pg_catalog.text and the like: the type itself
        node = exp.cast(node.this, exp.DataType.build("VARCHAR" if upper in ("TEXT", "NAME", "CHAR") else "BIGINT")
                        if upper not in ("INT2", "INT4", "INT8", "BOOL", "FLOAT8") else exp.DataType.build(upper))
    inner = _cast(node.this) if isinstance(node.this, exp.Cast) else node.this  # inner casts first
    if upper in _OID_TYPES:
        if upper == "REGCLASS" and isinstance(inner, exp.Literal) and inner.is_string and not inner.name.isdigit():
            relname = inner.name.split(".")[-1].strip('"')
            return exp.paren(exp.select("oid").from_("wire_pg.pg_class").where(
                exp.column("relname").eq(exp.Literal.string(relname))).subquery().this, copy=False)
        if upper == "REGTYPE" and not (isinstance(inner, exp.Literal) and inner.is_string):
            return exp.Anonymous(this="wire_format_type", expressions=[inner, exp.null()])
        return exp.cast(inner, exp.DataType.build("BIGINT"))
    if upper in ("CHAR", "NAME"):
        return exp.cast(inner, exp.DataType.build("VARCHAR"))
    if inner is not node.this:
        node = node.copy()
        node.set("this", inner)
    return node
