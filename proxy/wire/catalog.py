"""The emulated catalog: `pg_catalog` and `information_schema` as PostgreSQL clients read them, built from the
policy alone (table and column names and declared types; never a row of data).

Each dataset gets an in-memory DuckDB holding tables shaped like PostgreSQL's catalog (schemas `wire_pg` and
`wire_is`), filled from its policy, and `wire_*` macros for the functions clients call (`version()`,
`format_type`, `pg_table_is_visible`, ...). A catalog query (proxy/query/wire_sql.py `catalog_sql`: it reads
only these relations, or no table) runs there. That database has no file, reads no file (external access
off, configuration locked), and holds no data; a catalog query may call only PostgreSQL's table functions
(unnest, generate_series, ...), not DuckDB's own: the worst a query can do there is read the policy's names.

Example:
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("visits", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("region", "VARCHAR")))
    >>> answers = CatalogAnswers(Catalog((t,)), "demo", "ana")
    >>> answers.run("SELECT relname FROM pg_catalog.pg_class WHERE relkind = 'r'")
    (('relname',), (25,), [('visits',)])
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import duckdb

from proxy.query.catalog import Catalog, ColumnSpec
from proxy.query.wire_sql import catalog_sql
from proxy.wire import pgtypes

SERVER_VERSION = "15.0"
VERSION = f"PostgreSQL {SERVER_VERSION} (dpproxy: differentially private answers) on x86_64-pc-linux-gnu"
SCHEMA = "public"  # what clients list the policy's tables under
PUBLIC_OID, CATALOG_OID, INFORMATION_OID, FIRST_TABLE_OID, DATABASE_OID = 2200, 11, 13000, 16384, 16383
OWNER_OID = 10
MAX_ROWS = 10_000  # a catalog answer longer than this is cut (the policy is far smaller)
TIMEOUT_S = 5.0

# Relation -> its columns (DuckDB types). Each table has the columns the clients we know read; empty tables
# answer "none" (no indexes, constraints, comments, triggers, ...).
PG_TABLES: dict[str, str] = {
    "pg_namespace": "oid BIGINT, nspname VARCHAR, nspowner BIGINT, nspacl VARCHAR[]",
    "pg_class": (
        "oid BIGINT, relname VARCHAR, relnamespace BIGINT, reltype BIGINT, reloftype BIGINT, relowner BIGINT, "
        "relam BIGINT, relfilenode BIGINT, reltablespace BIGINT, relpages INTEGER, reltuples DOUBLE, "
        "relallvisible INTEGER, reltoastrelid BIGINT, relhasindex BOOLEAN, relisshared BOOLEAN, "
        "relpersistence VARCHAR, relkind VARCHAR, relnatts SMALLINT, relchecks SMALLINT, relhasrules BOOLEAN, "
        "relhastriggers BOOLEAN, relhassubclass BOOLEAN, relrowsecurity BOOLEAN, relforcerowsecurity BOOLEAN, "
        "relispopulated BOOLEAN, relreplident VARCHAR, relispartition BOOLEAN, relrewrite BIGINT, "
        "relfrozenxid BIGINT, relminmxid BIGINT, relacl VARCHAR[], reloptions VARCHAR[], relpartbound VARCHAR, "
        "relhasoids BOOLEAN"),
    "pg_attribute": (
        "attrelid BIGINT, attname VARCHAR, atttypid BIGINT, attstattarget INTEGER, attlen SMALLINT, "
        "attnum SMALLINT, attndims INTEGER, attcacheoff INTEGER, atttypmod INTEGER, attbyval BOOLEAN, "
        "attalign VARCHAR, attstorage VARCHAR, attcompression VARCHAR, attnotnull BOOLEAN, atthasdef BOOLEAN, "
        "atthasmissing BOOLEAN, attidentity VARCHAR, attgenerated VARCHAR, attisdropped BOOLEAN, "
        "attislocal BOOLEAN, attinhcount INTEGER, attcollation BIGINT, attacl VARCHAR[], attoptions VARCHAR[], "
        "attfdwoptions VARCHAR[]"),
    "pg_type": (
        "oid BIGINT, typname VARCHAR, typnamespace BIGINT, typowner BIGINT, typlen SMALLINT, typbyval BOOLEAN, "
        "typtype VARCHAR, typcategory VARCHAR, typispreferred BOOLEAN, typisdefined BOOLEAN, typdelim VARCHAR, "
        "typrelid BIGINT, typelem BIGINT, typarray BIGINT, typinput VARCHAR, typoutput VARCHAR, "
        "typreceive VARCHAR, typsend VARCHAR, typalign VARCHAR, typstorage VARCHAR, typnotnull BOOLEAN, "
        "typbasetype BIGINT, typtypmod INTEGER, typndims INTEGER, typcollation BIGINT, typdefault VARCHAR, "
        "typacl VARCHAR[]"),
    "pg_database": (
        "oid BIGINT, datname VARCHAR, datdba BIGINT, encoding INTEGER, datcollate VARCHAR, datctype VARCHAR, "
        "datistemplate BOOLEAN, datallowconn BOOLEAN, datconnlimit INTEGER, dattablespace BIGINT, "
        "datacl VARCHAR[], daticulocale VARCHAR, datlocprovider VARCHAR, datcollversion VARCHAR"),
    "pg_roles": "oid BIGINT, rolname VARCHAR, rolsuper BOOLEAN, rolinherit BOOLEAN, rolcreaterole BOOLEAN, "
                "rolcreatedb BOOLEAN, rolcanlogin BOOLEAN",
    "pg_user": "usesysid BIGINT, usename VARCHAR, usesuper BOOLEAN, usecreatedb BOOLEAN",
    "pg_tables": "schemaname VARCHAR, tablename VARCHAR, tableowner VARCHAR, tablespace VARCHAR, "
                 "hasindexes BOOLEAN, hasrules BOOLEAN, hastriggers BOOLEAN, rowsecurity BOOLEAN",
    "pg_views": "schemaname VARCHAR, viewname VARCHAR, viewowner VARCHAR, definition VARCHAR",
    "pg_matviews": "schemaname VARCHAR, matviewname VARCHAR, matviewowner VARCHAR, definition VARCHAR",
    "pg_settings": "name VARCHAR, setting VARCHAR, unit VARCHAR, category VARCHAR, short_desc VARCHAR, "
                   "context VARCHAR, vartype VARCHAR, source VARCHAR",
    "pg_index": "indexrelid BIGINT, indrelid BIGINT, indnatts SMALLINT, indisunique BOOLEAN, indisprimary BOOLEAN, "
                "indisclustered BOOLEAN, indisvalid BOOLEAN, indkey SMALLINT[], indexprs VARCHAR, indpred VARCHAR, "
                "indnkeyatts SMALLINT, indoption SMALLINT[], indnullsnotdistinct BOOLEAN, indisexclusion BOOLEAN, "
                "indimmediate BOOLEAN, indisreplident BOOLEAN, indcollation BIGINT[], indclass BIGINT[]",
    "pg_constraint": "oid BIGINT, conname VARCHAR, connamespace BIGINT, contype VARCHAR, conrelid BIGINT, "
                     "confrelid BIGINT, conkey SMALLINT[], confkey SMALLINT[], conindid BIGINT, "
                     "condeferrable BOOLEAN, condeferred BOOLEAN, convalidated BOOLEAN, conparentid BIGINT",
    "pg_attrdef": "oid BIGINT, adrelid BIGINT, adnum SMALLINT, adbin VARCHAR",
    "pg_description": "objoid BIGINT, classoid BIGINT, objsubid INTEGER, description VARCHAR",
    "pg_inherits": "inhrelid BIGINT, inhparent BIGINT, inhseqno INTEGER, inhdetachpending BOOLEAN",
    "pg_am": "oid BIGINT, amname VARCHAR, amhandler VARCHAR, amtype VARCHAR",
    "pg_opclass": "oid BIGINT, opcmethod BIGINT, opcname VARCHAR, opcnamespace BIGINT, opcdefault BOOLEAN, "
                  "opcintype BIGINT",
    "pg_proc": "oid BIGINT, proname VARCHAR, pronamespace BIGINT, prorettype BIGINT, prokind VARCHAR",
    "pg_enum": "oid BIGINT, enumtypid BIGINT, enumsortorder DOUBLE, enumlabel VARCHAR",
    "pg_range": "rngtypid BIGINT, rngsubtype BIGINT",
    "pg_collation": "oid BIGINT, collname VARCHAR, collnamespace BIGINT, collprovider VARCHAR",
    "pg_tablespace": "oid BIGINT, spcname VARCHAR",
    "pg_policy": "oid BIGINT, polname VARCHAR, polrelid BIGINT, polcmd VARCHAR, polpermissive BOOLEAN, "
                 "polroles BIGINT[], polqual VARCHAR, polwithcheck VARCHAR",
    "pg_trigger": "oid BIGINT, tgrelid BIGINT, tgname VARCHAR, tgisinternal BOOLEAN, tgenabled VARCHAR",
    "pg_rewrite": "oid BIGINT, rulename VARCHAR, ev_class BIGINT",
    "pg_statistic_ext": "oid BIGINT, stxrelid BIGINT, stxname VARCHAR, stxnamespace BIGINT, stxkind VARCHAR[], "
                        "stxstattarget INTEGER",
    "pg_publication": "oid BIGINT, pubname VARCHAR, puballtables BOOLEAN",
    "pg_publication_rel": "oid BIGINT, prpubid BIGINT, prrelid BIGINT, prqual VARCHAR, prattrs SMALLINT[]",
    "pg_publication_namespace": "oid BIGINT, pnpubid BIGINT, pnnspid BIGINT",
    "pg_foreign_table": "ftrelid BIGINT, ftserver BIGINT",
    "pg_partitioned_table": "partrelid BIGINT, partstrat VARCHAR",
    "pg_extension": "oid BIGINT, extname VARCHAR, extversion VARCHAR",
    "pg_depend": "classid BIGINT, objid BIGINT, objsubid INTEGER, refclassid BIGINT, refobjid BIGINT, "
                 "refobjsubid INTEGER, deptype VARCHAR",
    "pg_sequence": "seqrelid BIGINT, seqtypid BIGINT, seqstart BIGINT, seqincrement BIGINT, seqmax BIGINT, "
                   "seqmin BIGINT, seqcache BIGINT, seqcycle BOOLEAN",
    "pg_stat_user_tables": "relid BIGINT, schemaname VARCHAR, relname VARCHAR, n_live_tup BIGINT, "
                           "n_dead_tup BIGINT, seq_scan BIGINT",
    "pg_stat_activity": "datid BIGINT, datname VARCHAR, pid INTEGER, usename VARCHAR, application_name VARCHAR, "
                        "state VARCHAR, query VARCHAR",
}
IS_TABLES: dict[str, str] = {
    "schemata": "catalog_name VARCHAR, schema_name VARCHAR, schema_owner VARCHAR",
    "tables": "table_catalog VARCHAR, table_schema VARCHAR, table_name VARCHAR, table_type VARCHAR, "
              "self_referencing_column_name VARCHAR, reference_generation VARCHAR, "
              "user_defined_type_catalog VARCHAR, user_defined_type_schema VARCHAR, user_defined_type_name VARCHAR, "
              "is_insertable_into VARCHAR, is_typed VARCHAR, commit_action VARCHAR",
    "columns": "table_catalog VARCHAR, table_schema VARCHAR, table_name VARCHAR, column_name VARCHAR, "
               "ordinal_position INTEGER, column_default VARCHAR, is_nullable VARCHAR, data_type VARCHAR, "
               "character_maximum_length INTEGER, character_octet_length INTEGER, numeric_precision INTEGER, "
               "numeric_precision_radix INTEGER, numeric_scale INTEGER, datetime_precision INTEGER, "
               "udt_catalog VARCHAR, udt_schema VARCHAR, udt_name VARCHAR, is_identity VARCHAR, "
               "is_generated VARCHAR, is_updatable VARCHAR",
    "views": "table_catalog VARCHAR, table_schema VARCHAR, table_name VARCHAR, view_definition VARCHAR",
    "table_constraints": "constraint_catalog VARCHAR, constraint_schema VARCHAR, constraint_name VARCHAR, "
                         "table_schema VARCHAR, table_name VARCHAR, constraint_type VARCHAR",
    "key_column_usage": "constraint_schema VARCHAR, constraint_name VARCHAR, table_schema VARCHAR, "
                        "table_name VARCHAR, column_name VARCHAR, ordinal_position INTEGER",
    "routines": "routine_schema VARCHAR, routine_name VARCHAR, routine_type VARCHAR",
}
RELATIONS = frozenset(PG_TABLES) | frozenset(IS_TABLES)


def _macros(dataset: str, user: str) -> tuple[str, ...]:
    quoted_dataset, quoted_user = _quote(dataset), _quote(user)
    return (
        f"CREATE MACRO wire_version() AS {_quote(VERSION)}",
        f"CREATE MACRO wire_current_database() AS {quoted_dataset}",
        f"CREATE MACRO wire_current_schema() AS {_quote(SCHEMA)}",
        f"CREATE MACRO wire_current_user() AS {quoted_user}",
        f"CREATE MACRO wire_current_schemas(implicit) AS CASE WHEN implicit THEN ['pg_catalog', {_quote(SCHEMA)}] "
        f"ELSE [{_quote(SCHEMA)}] END",
        # CASE, not a subquery of pg_settings: a table function's arguments cannot hold one (Grafana passes
        # current_setting('search_path') to generate_series)
        "CREATE MACRO wire_current_setting(setting_name, missing_ok := false) AS CASE lower(setting_name) "
        + " ".join(f"WHEN {_quote(n)} THEN {_quote(v)}" for n, v in SETTINGS_SHOWN.items()) + " END",
        "CREATE MACRO wire_pg_backend_pid() AS 0",
        # CASE, not a subquery: an argument naming a column (`oid`) would be bound inside a subquery's scope
        "CREATE MACRO wire_format_type(type_oid, typmod) AS CASE type_oid "
        + " ".join(f"WHEN {o} THEN {_quote(pgtypes.NAMES[o])}" for o in pgtypes.TYPNAMES) + " END",
        "CREATE MACRO wire_to_regtype(type_name) AS CASE lower(type_name) "
        + " ".join(f"WHEN {_quote(n)} THEN {o}" for o, n in pgtypes.TYPNAMES.items()) + " END",
        f"CREATE MACRO wire_pg_get_userbyid(oid) AS {quoted_user}",
        "CREATE MACRO wire_obj_description(oid, catalog := NULL) AS NULL::VARCHAR",
        "CREATE MACRO wire_col_description(oid, n) AS NULL::VARCHAR",
        "CREATE MACRO wire_shobj_description(oid, catalog) AS NULL::VARCHAR",
        "CREATE MACRO wire_pg_encoding_to_char(n) AS 'UTF8'",
        "CREATE MACRO wire_has_table_privilege(a, b := NULL, c := NULL) AS true",
        "CREATE MACRO wire_has_schema_privilege(a, b := NULL, c := NULL) AS true",
        "CREATE MACRO wire_has_database_privilege(a, b := NULL, c := NULL) AS true",
        "CREATE MACRO wire_pg_get_expr(expr, rel, pretty := false) AS NULL::VARCHAR",
        "CREATE MACRO wire_pg_get_indexdef(a, b := 0, c := false) AS NULL::VARCHAR",
        "CREATE MACRO wire_pg_get_constraintdef(a, b := false) AS NULL::VARCHAR",
        "CREATE MACRO wire_pg_get_viewdef(a, b := false) AS NULL::VARCHAR",
        "CREATE MACRO wire_pg_get_function_identity_arguments(a) AS ''",
        "CREATE MACRO wire_pg_table_is_visible(oid) AS true",
        "CREATE MACRO wire_pg_type_is_visible(oid) AS true",
        "CREATE MACRO wire_pg_function_is_visible(oid) AS true",
        "CREATE MACRO wire_pg_postmaster_start_time() AS TIMESTAMP '2000-01-01 00:00:00'",
        "CREATE MACRO wire_pg_relation_size(a, b := NULL) AS 0",
        "CREATE MACRO wire_pg_total_relation_size(a) AS 0",
        "CREATE MACRO wire_pg_is_in_recovery() AS false",
        "CREATE MACRO wire_txid_current() AS 1",
        "CREATE MACRO wire_quote_ident(x) AS CASE WHEN regexp_full_match(x, '[a-z_][a-z0-9_$]*') THEN x "
        "ELSE '\"' || replace(x, '\"', '\"\"') || '\"' END",
        "CREATE MACRO wire_inet_server_addr() AS NULL::VARCHAR",
        "CREATE MACRO wire_inet_server_port() AS NULL::INTEGER",
        "CREATE MACRO wire_pg_get_statisticsobjdef_columns(a) AS NULL::VARCHAR",
        "CREATE MACRO wire_pg_relation_is_publishable(a) AS false",
        "CREATE MACRO wire_pg_collation_is_visible(a) AS true",
        "CREATE MACRO wire_pg_get_partkeydef(a) AS NULL::VARCHAR",
        "CREATE MACRO wire_pg_get_triggerdef(a, b := false) AS NULL::VARCHAR",
        "CREATE MACRO wire_pg_get_ruledef(a, b := false) AS NULL::VARCHAR",
        "CREATE MACRO wire_pg_get_serial_sequence(a, b) AS NULL::VARCHAR",
        "CREATE MACRO wire_array_upper(a, d) AS len(a)",
        "CREATE MACRO wire_array_lower(a, d) AS CASE WHEN len(a) > 0 THEN 1 END",
        "CREATE MACRO wire_parse_ident(name, strict := true) AS string_split(replace(name, '\"', ''), '.')",
        "CREATE MACRO wire_has_any_column_privilege(a, b := NULL, c := NULL) AS true",
        "CREATE MACRO wire_has_column_privilege(a, b := NULL, c := NULL, d := NULL) AS true",
        "CREATE MACRO wire_to_regclass(rel_name) AS (SELECT wire_c.oid FROM wire_pg.pg_class wire_c WHERE "
        "wire_c.relname = split_part(rel_name, '.', -1))",
    )


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


SETTINGS_SHOWN = {  # what SHOW and current_setting() say for PostgreSQL's own settings
    "server_version": SERVER_VERSION, "server_version_num": "150000", "server_encoding": "UTF8",
    "client_encoding": "UTF8", "datestyle": "ISO, MDY", "timezone": "UTC", "integer_datetimes": "on",
    "standard_conforming_strings": "on", "intervalstyle": "postgres", "is_superuser": "off",
    "transaction_isolation": "read committed", "default_transaction_isolation": "read committed",
    "transaction_read_only": "on", "default_transaction_read_only": "on", "search_path": '"$user", public',
    "max_identifier_length": "63", "lc_collate": "C", "lc_ctype": "C", "application_name": "",
    "extra_float_digits": "1", "statement_timeout": "0", "max_index_keys": "32", "bytea_output": "hex",
}


class CatalogAnswers:
    """The catalog of one dataset as one analyst sees it; `run(sql)` answers a catalog query."""

    def __init__(self, catalog: Catalog, dataset: str, user: str) -> None:
        self._lock = threading.Lock()
        self._db = duckdb.connect(":memory:", config={"enable_external_access": False, "threads": 1,
                                                       "memory_limit": "256MB"})
        for schema, tables in (("wire_pg", PG_TABLES), ("wire_is", IS_TABLES)):
            self._db.execute(f"CREATE SCHEMA {schema}")
            for name, columns in tables.items():
                self._db.execute(f"CREATE TABLE {schema}.{name} ({columns})")
        for statement in _macros(dataset, user):
            self._db.execute(statement)
        self._fill(catalog, dataset, user)
        self._db.execute("SET lock_configuration = true")  # no query may turn external access back on

    def _fill(self, catalog: Catalog, dataset: str, user: str) -> None:
        insert = self._insert
        insert("wire_pg.pg_namespace", [(PUBLIC_OID, SCHEMA, OWNER_OID, None), (CATALOG_OID, "pg_catalog", OWNER_OID,
                                        None), (INFORMATION_OID, "information_schema", OWNER_OID, None)])
        insert("wire_pg.pg_database", [(DATABASE_OID, dataset, OWNER_OID, 6, "C", "C", False, True, -1, 1663, None,
                                         None, "c", None)])
        insert("wire_pg.pg_roles", [(OWNER_OID, user, False, True, False, False, True)])
        insert("wire_pg.pg_user", [(OWNER_OID, user, False, False)])
        insert("wire_pg.pg_am", [(2, "heap", "heap_tableam_handler", "t")])
        insert("wire_pg.pg_tablespace", [(1663, "pg_default")])
        insert("wire_pg.pg_settings", [(n, v, None, None, None, "user", "string", "default")
                                       for n, v in SETTINGS_SHOWN.items()])
        insert("wire_pg.pg_type", [
            (oid, name, CATALOG_OID, OWNER_OID, pgtypes.size_of(oid), pgtypes.size_of(oid) in (1, 2, 4, 8), "b",
             "N" if oid in (21, 23, 20, 26, 700, 701, 1700) else "S", False, True, ",", 0, 0, 0,
             f"{name}in", f"{name}out", f"{name}recv", f"{name}send", "i", "p", False, 0, -1, 0, 0, None, None)
            for oid, name in pgtypes.TYPNAMES.items()])
        insert("wire_is.schemata", [(dataset, SCHEMA, user), (dataset, "pg_catalog", user),
                                    (dataset, "information_schema", user)])
        tables: Sequence[tuple[str, tuple[ColumnSpec, ...]]] = (
            [(t.name, t.columns) for t in catalog.tables] + [(t.name, t.columns) for t in catalog.public])
        classes, attributes, is_tables, is_columns, pg_tables = [], [], [], [], []
        for i, (name, columns) in enumerate(tables):
            oid = FIRST_TABLE_OID + i
            classes.append((oid, name, PUBLIC_OID, 0, 0, OWNER_OID, 2, oid, 0, 0, -1.0, 0, 0, False, False, "p", "r",
                            len(columns), 0, False, False, False, False, False, True, "d", False, 0, 0, 0, None, None,
                            None, False))
            pg_tables.append((SCHEMA, name, user, None, False, False, False, False))
            is_tables.append((dataset, SCHEMA, name, "BASE TABLE", None, None, None, None, None, "NO", "NO", None))
            for n, column in enumerate(columns, start=1):
                type_oid = pgtypes.oid_of(column.type)
                attributes.append((oid, column.name, type_oid, -1, pgtypes.size_of(type_oid), n, 0, -1, -1,
                                   pgtypes.size_of(type_oid) in (1, 2, 4, 8), "i", "p", "", False, False, False, "",
                                   "", False, True, 0, 0, None, None, None))
                is_columns.append((dataset, SCHEMA, name, column.name, n, None, "YES", pgtypes.NAMES[type_oid],
                                   None, None, None, None, None, None, dataset, "pg_catalog",
                                   pgtypes.TYPNAMES[type_oid], "NO", "NEVER", "NO"))
        insert("wire_pg.pg_class", classes)
        insert("wire_pg.pg_attribute", attributes)
        insert("wire_pg.pg_tables", pg_tables)
        insert("wire_is.tables", is_tables)
        insert("wire_is.columns", is_columns)

    def _insert(self, table: str, rows: Sequence[tuple[object, ...]]) -> None:
        if rows:
            marks = ", ".join("?" * len(rows[0]))
            self._db.executemany(f"INSERT INTO {table} VALUES ({marks})", [list(r) for r in rows])

    def sql_of(self, sql: str) -> str | None:
        """The DuckDB SQL of `sql` if it is a catalog query, else None (proxy/query/wire_sql.py)."""
        return catalog_sql(sql, RELATIONS)

    def run(self, sql: str) -> tuple[tuple[str, ...], tuple[int, ...], list[tuple[object, ...]]]:
        """Column names, type OIDs and rows of a catalog query (`sql` in PostgreSQL's dialect); raises
        ValueError if it is not one, duckdb.Error if the emulation cannot answer it."""
        duck = self.sql_of(sql)
        if duck is None:
            raise ValueError("not a catalog query")
        return self.run_duckdb(duck)

    def run_duckdb(self, duck: str) -> tuple[tuple[str, ...], tuple[int, ...], list[tuple[object, ...]]]:
        with self._lock:
            cursor = self._db.cursor()
            timer = threading.Timer(TIMEOUT_S, cursor.interrupt)
            timer.start()
            try:
                cursor.execute(duck)
                description = cursor.description or []
                rows = cursor.fetchmany(MAX_ROWS)
            finally:
                timer.cancel()
                cursor.close()
        names = tuple(str(d[0]) for d in description)
        oids = tuple(_oid_of_duckdb(str(d[1])) for d in description)
        return names, oids, rows

    def close(self) -> None:
        self._db.close()


def _oid_of_duckdb(type_name: str) -> int:
    upper = type_name.upper()
    if upper.endswith("[]") or upper.startswith("LIST") or "[" in upper:
        return pgtypes.TEXT
    return pgtypes.oid_of(upper)


class CatalogError(Exception):
    """A catalog query the emulation cannot answer."""


def describe_error(err: Exception) -> str:
    """A short message for a catalog query DuckDB could not answer (its first line)."""
    return str(err).splitlines()[0][:300] if str(err) else type(err).__name__


def is_duckdb_error(err: BaseException) -> bool:
    return isinstance(err, duckdb.Error)
