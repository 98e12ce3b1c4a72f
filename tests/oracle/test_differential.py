"""The differential tester of the fidelity contract (docs/privacy.md §12, issue #28).

Hypothesis generates queries from the grammar the analyser accepts (README.md, Supported SQL): declared and
computed group keys (arithmetic with random nesting and parentheses, date_trunc, EXTRACT, CASE, CAST, LOWER,
UPPER, SUBSTRING, FLOOR, ROUND, ABS, COALESCE), a WHERE of AND/OR/NOT over comparisons, IN, BETWEEN, LIKE,
ILIKE, IS NULL, boolean columns and computed filters, every aggregate but the quantiles and the spreads
(COUNT(*), COUNT(col), COUNT(DISTINCT unit), SUM, AVG, FILTER, expressions inside SUM/AVG), HAVING, ORDER BY
and LIMIT over released values, joins to a public table and to a protected table on the unit (INNER, LEFT), a
BI tool's wrapping subquery or CTE, in the DuckDB and PostgreSQL dialects; and small random databases of the
declared types. Each query is written twice from one generated tree: in its dialect, and as the DuckDB text
that means the same (a hand-written equivalent: sqlglot reads PostgreSQL's `age / 10` without types and
writes DuckDB's float division, so it cannot transpile integer division).

`test_answers_the_query_as_written`: bounds that cannot bind (`max_rows`, `max_groups` above anything the data
holds, clamp bounds covering every value). The generated SQL (`QueryPlan.sql`, what a preview shows) runs per
query on the source and on the bounding store built from it, and its exact release (publish.release with zero
noise, every candidate group kept) must equal DuckDB's answer to the query as written: per group (HAVING,
ORDER BY and LIMIT removed on both sides), then the whole answer in order. A public key releases every domain
value: a released group that DuckDB does not return must be empty (counts and sums 0, AVG NULL).

`test_bounds_that_bind_follow_the_definition`: `max_rows` = 2 or `max_groups` = 2 bind; the product keeps rows
and groups by a keyed hash, so the brute-force reference checks what the bounding definition fixes whatever
the hash picks, from the rows that pass the WHERE (read by a debug query derived from the generated one):
with `max_rows` = k binding alone, COUNT(*) per group is Σ_units min(k, n) exactly and SUM lies between the
unit's k smallest and k largest values; with `max_groups` = g binding alone, the distinct units over all groups
are Σ_units min(g, groups the unit has after the WHERE) exactly, and each group's COUNT(*) is at most its
true count.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
from proxy.query.errors import EmptyScope
from tests.support import differential as diff

Pair = tuple[str, str]  # (DuckDB text, PostgreSQL text) of one fragment
Draw = Callable[..., object]
BIG = 1000  # bounds that cannot bind: no example has 1000 rows


def _tables(max_rows: int, max_groups: int) -> tuple[TableSchema, TableSchema]:
    t = TableSchema("t", "uid", (
        ColumnSpec("uid", "BIGINT"),
        ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True, public_domain=("N", "S", "E")),
        ColumnSpec("age", "INTEGER", unit_level=True, groupable=True, bounds=(18, 90)),
        ColumnSpec("g", "VARCHAR", groupable=True),
        ColumnSpec("c", "VARCHAR", groupable=True, public_domain=("a", "b", "c")),
        ColumnSpec("d", "DATE", groupable=True),
        ColumnSpec("n", "INTEGER", groupable=True, bounds=(0, 20)),
        ColumnSpec("x", "DOUBLE", groupable=True, bounds=(-8.0, 8.0)),
        ColumnSpec("f", "BOOLEAN", groupable=True),
    ), max_rows=max_rows, max_groups=max_groups)
    w = TableSchema("w", "uid", (
        ColumnSpec("uid", "BIGINT"),
        ColumnSpec("plan", "VARCHAR", unit_level=True, groupable=True, public_domain=("free", "pro")),
        ColumnSpec("y", "INTEGER", bounds=(0, 7)),
    ), max_rows=max_rows, max_groups=max_groups, one_row_per_unit=True)
    return t, w


Z = PublicTable("z", (ColumnSpec("cat", "VARCHAR", groupable=True),
                      ColumnSpec("dept", "VARCHAR", groupable=True, public_domain=("food", "goods"))), ("cat",), True)
CATALOG = Catalog(_tables(BIG, BIG), public=(Z,))
T_COLUMNS = "uid BIGINT, r VARCHAR, age INTEGER, g VARCHAR, c VARCHAR, d DATE, n INTEGER, x DOUBLE, f BOOLEAN"
W_COLUMNS = "uid BIGINT, plan VARCHAR, y INTEGER"
Z_ROWS = [("a", "food"), ("b", "goods"), ("c", "food")]


def _same(text: str) -> Pair:
    return text, text


# ---- databases ------------------------------------------------------------------------------------------------

DAY0 = datetime.date(2026, 1, 1)
units = st.lists(st.tuples(st.sampled_from("NSE"), st.integers(18, 90)), min_size=1, max_size=5)
t_row = st.tuples(
    st.sampled_from(["p", "q", "s", "P", None]),  # g
    st.sampled_from("abc"),  # c: inside its public domain
    st.one_of(st.none(), st.integers(0, 75).map(lambda i: DAY0 + datetime.timedelta(days=i))),  # d
    st.one_of(st.none(), st.integers(0, 20)),  # n
    st.one_of(st.none(), st.integers(-32, 32).map(lambda i: i / 4)),  # x: quarters, exact on the grid
    st.one_of(st.none(), st.booleans()),  # f
)


@st.composite
def databases(draw: Draw, max_rows: int = 25) -> dict[str, tuple[str, list[tuple[object, ...]]]]:
    people = draw(units)
    rows = draw(st.lists(st.tuples(st.integers(0, len(people) - 1), t_row), max_size=max_rows))
    t = [(u, people[u][0], people[u][1], *rest) for u, rest in rows]  # unit-level columns constant per unit
    plans = draw(st.lists(st.tuples(st.sampled_from(["free", "pro"]), st.one_of(st.none(), st.integers(0, 7))),
                          min_size=len(people), max_size=len(people)))
    keep = draw(st.lists(st.booleans(), min_size=len(people), max_size=len(people)))
    w = [(u, plan, y) for u, ((plan, y), kept) in enumerate(zip(plans, keep, strict=True)) if kept]
    return {"t": (T_COLUMNS, t), "w": (W_COLUMNS, w), "z": ("cat VARCHAR, dept VARCHAR", Z_ROWS)}


# ---- expressions -------------------------------------------------------------------------------------------------

@st.composite
def int_expr(draw: Draw, depth: int = 0) -> Pair:
    """Integer arithmetic over age and n with random nesting and parentheses (PostgreSQL's `/` on integers is
    DuckDB's `//`)."""
    if depth >= 3 or draw(st.integers(0, 2)) == 0:
        return _same(draw(st.sampled_from(["age", "n", "age", "n", "1", "2", "3", "7", "10", "18"])))
    if draw(st.integers(0, 5)) == 0:
        inner = draw(int_expr(depth + 1))
        return f"ABS({inner[0]})", f"ABS({inner[1]})"
    a, b = draw(int_expr(depth + 1)), draw(int_expr(depth + 1))
    op = draw(st.sampled_from(["+", "-", "*", "//", "%"]))
    pg_op = "/" if op == "//" else op
    duck, pg = f"{a[0]} {op} {b[0]}", f"{a[1]} {pg_op} {b[1]}"
    if depth and draw(st.booleans()):
        duck, pg = f"({duck})", f"({pg})"
    return duck, pg


COMPUTED_KEYS: list[Pair] = [
    ("date_trunc('month', d)", "date_trunc('month', d)"),
    ("EXTRACT(month FROM d)", "EXTRACT(month FROM d)"),
    ("EXTRACT(dow FROM d)", "EXTRACT(dow FROM d)"),
    ("YEAR(d)", "EXTRACT(year FROM d)"),
    _same("CASE WHEN x > 0 THEN 'pos' WHEN x < 0 THEN 'neg' ELSE 'zero' END"),
    _same("CASE WHEN n IS NULL THEN 'none' WHEN n >= 10 THEN 'many' ELSE 'few' END"),
    _same("CAST(n AS VARCHAR)"),
    _same("LOWER(g)"), _same("UPPER(c)"), _same("SUBSTRING(g, 1, 1)"),
    _same("FLOOR(x)"), _same("ROUND(x)"), _same("ABS(n - 10)"), _same("COALESCE(n, -1)"),
    ("CAST(FLOOR(age / 10) * 10 AS INTEGER)", "CAST(FLOOR(age / 10.0) * 10 AS INTEGER)"),
    _same("n > 5"),
]
DECLARED_KEYS = ["r", "age", "g", "c", "d", "n", "f"]


@st.composite
def group_key(draw: Draw) -> tuple[Pair, bool]:
    """A key and whether it is computed (then it needs an alias)."""
    choice = draw(st.integers(0, 4))
    if choice <= 1:
        return _same(draw(st.sampled_from(DECLARED_KEYS))), False
    if choice == 2:
        duck, pg = draw(int_expr(1))
        if "age" not in duck and "n" not in duck:  # a constant key is refused: read a column
            duck, pg = f"{duck} + age", f"{pg} + age"
        return (duck, pg), True
    return draw(st.sampled_from(COMPUTED_KEYS)), True


ATOMS: list[Pair] = [
    _same("n > 5"), _same("n <= 12"), _same("n = 3"), _same("n <> 4"), _same("x > 0.5"), _same("x <= -1.25"),
    _same("g = 'p'"), _same("g <> 'q'"), _same("c IN ('a', 'b')"), _same("c NOT IN ('c')"), _same("n IN (1, 2, 3, 11)"),
    _same("d BETWEEN DATE '2026-01-10' AND DATE '2026-02-20'"), _same("d >= DATE '2026-02-01'"),
    _same("g LIKE 'p%'"), _same("g ILIKE 'P%'"), _same("n IS NULL"), _same("x IS NOT NULL"), _same("f"),
    _same("NOT f"), _same("age BETWEEN 20 AND 40"), _same("r = 'N'"), _same("r IN ('S', 'E')"), _same("uid > 2"),
    _same("n % 3 = 1"), _same("(n - 2) * 2 > 7"), _same("ABS(x) < 2"), _same("LOWER(g) = 'p'"),
    ("age // 10 = 3", "age / 10 = 3"), _same("date_trunc('month', d) = DATE '2026-02-01'"), _same("x * 2 > n + 1"),
    _same("n BETWEEN 3 AND 9"), _same("x NOT BETWEEN -1 AND 1"),
]


@st.composite
def condition(draw: Draw, atoms: list[Pair] = ATOMS, depth: int = 0) -> Pair:
    if depth >= 2 or draw(st.integers(0, 2)) == 0:
        atom = draw(st.sampled_from(atoms))
        if atom[0] == "int":  # a comparison of generated arithmetic
            e = draw(int_expr(1))
            if "age" not in e[0] and "n" not in e[0]:
                e = (f"{e[0]} - n", f"{e[1]} - n")
            v = draw(st.integers(-5, 40))
            return f"{e[0]} > {v}", f"{e[1]} > {v}"
        return atom
    kind = draw(st.sampled_from(["AND", "OR", "NOT"]))
    if kind == "NOT":
        inner = draw(condition(atoms, depth + 1))
        return f"NOT ({inner[0]})", f"NOT ({inner[1]})"
    a, b = draw(condition(atoms, depth + 1)), draw(condition(atoms, depth + 1))
    return f"({a[0]}) {kind} ({b[0]})", f"({a[1]}) {kind} ({b[1]})"


WHERE_ATOMS = [*ATOMS, ("int", "int")]
FILTERS = [_same("n > 3"), _same("g = 'p'"), _same("x < 0"), _same("f")]
# (aggregate, ordered: HAVING and ORDER BY may compare it). Counts only: an AVG is a float (no exact ties), and
# a SUM of no values is NULL in SQL but a number once released (noise around 0: docs/privacy.md §12), so HAVING
# and ORDER BY on it differ from SQL's in exactly those groups; the per-group values are compared for all.
AGGREGATES: list[tuple[Pair, bool]] = [
    (_same("COUNT(*)"), True), (_same("COUNT(n)"), True), (_same("COUNT(x)"), True),
    (_same("COUNT(DISTINCT uid)"), True), (_same("SUM(n)"), False), (_same("SUM(x)"), False),
    (_same("AVG(x)"), False), (_same("AVG(n)"), False), (_same("SUM(n * 2)"), False), (_same("SUM(x + n)"), False),
    (_same("SUM(CASE WHEN n > 5 THEN x ELSE 0 END)"), False),
]
JOIN_AGGREGATES: dict[str, list[tuple[Pair, bool]]] = {
    "w": [(_same("SUM(y)"), False), (_same("AVG(y)"), False), (_same("COUNT(y)"), True)], "z": []}
JOIN_KEYS = {"w": ["plan"], "z": ["dept"]}
JOIN_ATOMS = {"w": [_same("plan = 'pro'"), _same("y > 3"), _same("y IS NULL")], "z": [_same("dept = 'food'")]}


@st.composite
def aggregate(draw: Draw, extra: list[tuple[Pair, bool]]) -> tuple[Pair, bool]:
    (text, exact) = draw(st.sampled_from(AGGREGATES + extra))
    if draw(st.integers(0, 4)) == 0 and "DISTINCT" not in text[0]:
        cond = draw(st.sampled_from(FILTERS))
        return (f"{text[0]} FILTER (WHERE {cond[0]})", f"{text[1]} FILTER (WHERE {cond[1]})"), exact
    return text, exact


@st.composite
def queries(draw: Draw) -> tuple[str, str, str]:
    """(text, its dialect, the DuckDB text of the same query)."""
    dialect = draw(st.sampled_from(["duckdb", "postgres"]))
    join = draw(st.sampled_from([None, None, "w", "z"]))
    wrapper = None if join else draw(st.sampled_from([None, None, "subquery", "cte"]))
    keys: list[tuple[str, str, str]] = []  # (duck, pg, output name)
    for i in range(draw(st.integers(0, 2))):
        if join and draw(st.integers(0, 2)) == 0:
            (duck, pg), computed = _same(draw(st.sampled_from(JOIN_KEYS[join]))), False
        else:
            (duck, pg), computed = draw(group_key())
        name = f"k{i}" if computed or draw(st.booleans()) else duck
        if any(k[2] == name or k[0] == duck for k in keys):
            continue
        keys.append((duck, pg, name))
    aggregates: list[tuple[str, str, str, bool]] = []
    for j in range(draw(st.integers(1, 3))):
        (duck, pg), exact = draw(aggregate(JOIN_AGGREGATES[join] if join else []))
        aggregates.append((duck, pg, f"a{j}", exact))
    atoms = WHERE_ATOMS + (JOIN_ATOMS[join] if join else [])
    where = draw(condition(atoms)) if draw(st.integers(0, 3)) else None
    inner_where = draw(condition()) if wrapper and draw(st.booleans()) else None

    def text(pg: bool) -> str:
        side = 1 if pg else 0
        select = [f"{k[side]} AS {k[2]}" if k[2] != k[0] else k[side] for k in keys]
        select += [f"{a[side]} AS {a[2]}" for a in aggregates]
        source = "t"
        inner = "SELECT * FROM t" + (f" WHERE {inner_where[side]}" if inner_where else "")
        if join == "w":
            source = f"t {draw_join} w USING (uid)"
        elif join == "z":
            source = f"t {draw_join} z ON t.c = z.cat"
        elif wrapper == "subquery":
            source = f"({inner}) AS q"
        elif wrapper == "cte":
            source = "q"
        sql = f"SELECT {', '.join(select)} FROM {source}"
        if wrapper == "cte":
            sql = f"WITH q AS ({inner}) {sql}"
        if where:
            sql += f" WHERE {where[side]}"
        if keys:
            sql += " GROUP BY " + ", ".join(group_by)
        return sql + post

    draw_join = draw(st.sampled_from(["JOIN", "LEFT JOIN"]))
    group_by = [str(i + 1) if draw(st.booleans()) else k[2] for i, k in enumerate(keys)]
    post = ""
    exact_ones = [a for a in aggregates if a[3]]
    if exact_ones and draw(st.integers(0, 2)) == 0:
        post += f" HAVING {draw(st.sampled_from(exact_ones))[2]} {draw(st.sampled_from(['>', '<=', '<>']))} " \
                f"{draw(st.integers(0, 6))}"
    if exact_ones and draw(st.integers(0, 2)) == 0:  # every key breaks ties: one order on both sides
        first = draw(st.sampled_from(exact_ones))[2]
        post += f" ORDER BY {first}{draw(st.sampled_from(['', ' DESC']))}" + "".join(f", {k[2]}" for k in keys)
        if draw(st.booleans()):
            post += f" LIMIT {draw(st.integers(1, 4))}"
    duck = text(pg=False)
    return (text(pg=True) if dialect == "postgres" else duck), dialect, duck


# ---- the contract where no bound binds ------------------------------------------------------------------------------

def _nullable_keys(planned: diff.QueryPlan) -> list[bool]:
    """Per released key: may it be NULL (a private key, or a public domain holding NULL)?"""
    analysis = planned.analysis
    if analysis.partitions != "public":
        return [True] * len(analysis.keys)
    return [None in domain for domain in analysis.domains]


def _check(db: diff.Database, sql: str, dialect: str, duck: str, bounding: diff.Bounding) -> None:
    try:
        planned = diff.planned(sql, dialect, bounding, CATALOG)
    except EmptyScope:  # refused, free: its unit-level conditions contradict each other, so no row can pass
        assert all(diff.empty(row, []) for row in diff.reference_rows(db, duck, "duckdb", post=False)), (sql, duck)
        return
    keys = diff.key_positions(planned)
    assert len(keys) == len(planned.analysis.keys)
    engine = db.run(planned.sql, "store" if bounding == "store" else "src")
    public = planned.analysis.partitions == "public"
    # per group: HAVING, ORDER BY and LIMIT left out on both sides
    ours = diff.exact_release(engine, planned, post=False)
    theirs = diff.without_null_keys(diff.reference_rows(db, duck, "duckdb", post=False), keys,
                                    _nullable_keys(planned))
    reached = {diff.normal_key(row, keys) for row in theirs}
    extra = [row for row in ours if diff.normal_key(row, keys) not in reached]
    assert not extra or public, (bounding, sql, duck, "groups DuckDB does not return", extra)
    assert all(diff.empty(row, keys) for row in extra), (bounding, sql, duck, "non-empty extra groups", extra)
    kept = [row for row in ours if diff.normal_key(row, keys) in reached]
    assert diff.rows_match(diff.sort_rows(kept), diff.sort_rows(theirs), diff.sums(planned)), (
        bounding, sql, duck, kept, theirs)
    # the whole answer: in order when ordered; a public key's empty groups are the product's to release
    post = planned.analysis.having is not None or planned.analysis.order or planned.analysis.limit is not None
    if not post or (public and planned.analysis.limit is not None):
        return
    full = [row for row in diff.exact_release(engine, planned) if diff.normal_key(row, keys) in reached]
    expected = diff.without_null_keys(diff.reference_rows(db, duck, "duckdb"), keys, _nullable_keys(planned))
    if not planned.analysis.order:
        full, expected = diff.sort_rows(full), diff.sort_rows(expected)
    assert diff.rows_match(full, expected, diff.sums(planned)), (bounding, sql, duck, full, expected)


QUERIES_PER_DATABASE = 10
DATABASES = 160  # x 10 queries = 1 600 queries, each planned and run per query and on the store


@settings(max_examples=DATABASES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(tables=databases(), generated=st.lists(queries(), min_size=QUERIES_PER_DATABASE,
                                              max_size=QUERIES_PER_DATABASE))
def test_answers_the_query_as_written(tables: dict[str, tuple[str, list[tuple[object, ...]]]],
                                      generated: list[tuple[str, str, str]]) -> None:
    db = diff.Database(tables, CATALOG)
    try:
        for sql, dialect, duck in generated:
            for bounding in ("per_query", "store"):
                _check(db, sql, dialect, duck, bounding)  # type: ignore[arg-type]
    finally:
        db.close()


# ---- bounds that bind: the bounding definition, by brute force -------------------------------------------------------

BINDING = 2
BOUND_DATABASES = 48  # x 10 queries = 480 queries, each on both paths: with the 1 600 above, 2 080 per run
BOUND_CATALOGS = {"rows": Catalog(_tables(BINDING, BIG), public=(Z,)), "groups": Catalog(_tables(BIG, BINDING),
                                                                                         public=(Z,))}
BOUND_KEYS: list[list[Pair]] = [
    [_same("g")], [_same("c")], [_same("d")], [_same("r")], [_same("date_trunc('month', d)")], [_same("LOWER(g)")],
    [("n % 3", "n % 3")], [_same("g"), _same("c")], [_same("c"), _same("r")],
]


@st.composite
def bound_queries(draw: Draw) -> tuple[str, str, list[str], str | None]:
    """(text, dialect, its keys' DuckDB text, its WHERE's DuckDB text)."""
    dialect = draw(st.sampled_from(["duckdb", "postgres"]))
    keys = draw(st.sampled_from(BOUND_KEYS))
    where = draw(condition()) if draw(st.integers(0, 3)) else None
    side = 1 if dialect == "postgres" else 0
    select = ", ".join(f"{k[side]} AS k{i}" for i, k in enumerate(keys))
    sql = f"SELECT {select}, COUNT(*) AS a0, COUNT(DISTINCT uid) AS a1, SUM(n) AS a2 FROM t"
    if where:
        sql += f" WHERE {where[side]}"
    sql += " GROUP BY " + ", ".join(str(i + 1) for i in range(len(keys)))
    return sql, dialect, [k[0] for k in keys], where[0] if where else None


def _kept_rows(db: diff.Database, keys: list[str], where: str | None, planned: diff.QueryPlan
               ) -> dict[object, dict[tuple[object, ...], list[int]]]:
    """The rows that pass the WHERE and whose keys lie in their public domains (the others are dropped before
    bounding, docs/privacy.md §3), per unit and group: each row's n (NULL as 0: it adds nothing to SUM)."""
    debug = f"SELECT uid, {', '.join(keys)}, n FROM t" + (f" WHERE {where}" if where else "")
    public = planned.analysis.partitions == "public"
    domains = [{diff.normal(v) for v in domain} for domain in planned.analysis.domains] if public else []
    cells: dict[object, dict[tuple[object, ...], list[int]]] = defaultdict(lambda: defaultdict(list))
    for uid, *key, n in db.run(debug, "src"):
        normal = tuple(diff.normal(v) for v in key)
        if all(v in domain for v, domain in zip(normal, domains, strict=False)):
            cells[uid][normal].append(int(n or 0))
    return cells


@settings(max_examples=BOUND_DATABASES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(tables=databases(max_rows=40), generated=st.lists(bound_queries(), min_size=QUERIES_PER_DATABASE,
                                                         max_size=QUERIES_PER_DATABASE))
def test_bounds_that_bind_follow_the_definition(tables: dict[str, tuple[str, list[tuple[object, ...]]]],
                                                generated: list[tuple[str, str, list[str], str | None]]) -> None:
    db = diff.Database(tables, CATALOG)
    try:
        for index, (sql, dialect, keys, where) in enumerate(generated):
            bound = "rows" if index % 2 else "groups"
            for bounding in ("per_query", "store"):
                try:
                    planned = diff.planned(sql, dialect, bounding, BOUND_CATALOGS[bound])  # type: ignore[arg-type]
                except EmptyScope:
                    assert not db.run(f"SELECT 1 FROM t WHERE {where}", "src"), sql
                    continue
                cells = _kept_rows(db, keys, where, planned)
                engine = db.run(planned.sql, "store" if bounding == "store" else "src")
                answer = {tuple(diff.normal(v) for v in row[:len(keys)]): row[len(keys):]
                          for row in diff.exact_release(engine, planned, post=False)}
                label = (bound, bounding, sql)
                if bound == "rows":
                    _rows_bind(answer, cells, planned.analysis.table.max_rows, label)
                else:
                    _groups_bind(answer, cells, planned.analysis.max_groups, label)
    finally:
        db.close()


def _rows_bind(answer: dict[tuple[object, ...], tuple[object, ...]],
               cells: dict[object, dict[tuple[object, ...], list[int]]], k: int, label: object) -> None:
    """k rows per (unit, group), groups unbounded: COUNT(*) and the units are exact; SUM lies between the
    units' k smallest and k largest values (which k rows are kept is the hash's choice)."""
    groups = {key for unit in cells.values() for key in unit}
    for key in groups:
        count, units, total = answer.get(key, (0, 0, 0))
        per_unit = [sorted(unit[key]) for unit in cells.values() if key in unit]
        assert count == sum(min(k, len(v)) for v in per_unit), (label, key)
        assert units == len(per_unit), (label, key)
        low, high = sum(sum(v[:k]) for v in per_unit), sum(sum(v[-k:]) for v in per_unit)
        assert low <= (total or 0) <= high, (label, key, total, low, high)
    assert all(diff.empty(row, []) for key, row in answer.items() if key not in groups), label


def _groups_bind(answer: dict[tuple[object, ...], tuple[object, ...]],
                 cells: dict[object, dict[tuple[object, ...], list[int]]], g: int, label: object) -> None:
    """g groups per unit among the groups its rows have after the WHERE, rows unbounded: the units over all
    groups are exactly Σ min(g, groups), each group's count is at most its true count, and the total count lies
    between the units' g smallest and g largest groups."""
    units = sum(int(row[1] or 0) for row in answer.values())  # type: ignore[call-overload]
    assert units == sum(min(g, len(unit)) for unit in cells.values()), (label, units)
    for key, row in answer.items():
        true = sum(len(unit.get(key, ())) for unit in cells.values())
        assert int(row[0] or 0) <= true, (label, key)  # type: ignore[call-overload]
    sizes = [sorted(len(rows) for rows in unit.values()) for unit in cells.values()]
    low = sum(sum(s[:g]) for s in sizes)
    high = sum(sum(s[-g:]) for s in sizes)
    assert low <= sum(int(row[0] or 0) for row in answer.values()) <= high, label  # type: ignore[call-overload]
