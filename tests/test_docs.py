"""The docs cover every error code and every setting, so they cannot fall behind the code."""

from __future__ import annotations

import re
from pathlib import Path

from proxy.http.errors import STATUS
from proxy.settings import Settings

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_every_error_code_is_documented_with_its_status() -> None:
    text = (DOCS / "errors.md").read_text()
    for code, status in STATUS.items():
        assert re.search(rf"\| `{code}` \| {status} \|", text), code


def test_every_process_setting_is_documented() -> None:
    text = (DOCS / "policy.md").read_text()
    for name in Settings.model_fields:
        assert f"`DPPROXY_{name.upper()}`" in text, name


def test_every_policy_key_is_documented() -> None:
    from proxy.policy import dataset, load
    from proxy.policy import tables as policy_tables

    text = (DOCS / "policy.md").read_text()
    source = "".join(Path(m.__file__).read_text() for m in (load, dataset, policy_tables))
    keys = re.findall(r'"([a-z_0-9]+)"', source)
    documented = {k for k in keys if f"`{k}`" in text}
    for key in ("ledger", "path", "mechanism", "epsilon", "delta", "max_epsilon", "privacy_unit", "max_groups",
                "max_rows", "type", "bounds", "unit_level", "groupable", "public_domain", "role", "key_sha256",
                "budgets"):
        assert key in documented, key


# --- what README.md and docs/errors.md say about SQL is what the planner does (issue #26, item 10) ----------
# The README's "Supported SQL" table, its "Everything else … is rejected" list and its "Not yet" items, and
# errors.md's example body and `unsupported` list, are parsed here: each row or item needs examples below,
# every name a row lists needs an example using it, and every example must be answered (planned, and its SQL
# run on the demo data) or refused as documented. A README that lies about the SQL fails this test.

README = DOCS.parent / "README.md"

SUPPORTED: dict[str, tuple[str, ...]] = {  # README row -> queries it promises are answered
    "aggregates": (
        "SELECT region, COUNT(*) AS n, COUNT(amount) AS c, COUNT(DISTINCT user_id) AS u, SUM(amount) AS s, "
        "AVG(amount) AS a FROM visits GROUP BY region",
    ),
    "spread": (
        "SELECT VAR_POP(amount) AS a, VAR_SAMP(amount) AS b, VARIANCE(amount) AS c FROM visits",
        "SELECT STDDEV_POP(amount) AS a, STDDEV_SAMP(amount) AS b, STDDEV(amount) AS c FROM visits",
    ),
    "conditional, computed": (
        "SELECT COUNT(*) FILTER (WHERE amount > 10) AS f, COUNT_IF(age > 30) AS c, COUNT(DISTINCT user_id) AS u "
        "FROM visits",  # FILTER on any aggregate but COUNT(DISTINCT), which is answered without one
        "SELECT SUM(amount * duration_s) AS p, AVG(amount / 2 - amount) AS q, SUM(-amount) AS r FROM visits",
        "SELECT SUM(CASE WHEN age > 30 THEN amount ELSE 0 END) AS s FROM visits",
    ),
    "quantiles": (
        "SELECT region, MEDIAN(amount) AS m, QUANTILE(amount, 0.25) AS q, QUANTILE_CONT(amount, 0.5) AS c, "
        "QUANTILE_DISC(amount, 0.9) AS d FROM visits GROUP BY region",
        "SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY amount) AS p, APPROX_QUANTILE(amount, 0.5) AS a, "
        "MIN(amount) AS lo, MAX(amount) AS hi FROM visits",
        "SELECT MEDIAN(day) AS d, MIN(day) AS first FROM visits",  # a DATE column with date bounds: a day
    ),
    "select list": (
        "SELECT region AS r, COUNT(*) + 1 AS a, COUNT(*) - 1 AS b, COUNT(*) * 2 AS c, SUM(amount) / 2 AS d "
        "FROM visits GROUP BY region",
    ),
    "post-processing": (
        "SELECT region, COUNT(*)::int AS n, CAST(COUNT(*) AS BIGINT) AS b, TRY_CAST(AVG(amount) AS INTEGER) AS i, "
        "CAST(SUM(amount) AS DOUBLE) AS s, CAST(AVG(amount) AS REAL) AS r, CAST(region AS VARCHAR) AS v, "
        "ROUND(AVG(amount), 2) AS a, FLOOR(AVG(amount)) AS f, CEIL(AVG(amount)) AS c, COALESCE(SUM(amount), 0) AS z, "
        "NULLIF(COUNT(*), 0) AS nz, CASE WHEN COUNT(*) > 10 THEN 'many' ELSE 'few' END AS size, "
        "CASE region WHEN 'north' THEN 1 END AS north, IF(COUNT(*) > 5, 'a', 'b') AS ab, "
        "CONCAT(region, ': ', COUNT(*)) AS label, region || '!' AS shout FROM visits GROUP BY region "
        "HAVING ROUND(COUNT(*)::DOUBLE, 0) > 0 ORDER BY FLOOR(COUNT(*) / 10) DESC",
        "SELECT day, CAST(day AS DATE) AS d, COUNT(*) AS n FROM visits GROUP BY day",
    ),
    "WHERE": (
        "SELECT COUNT(*) AS n FROM visits WHERE age = 30 OR age <> 31 AND NOT age < 20 AND age <= 80 "
        "AND age > 18 AND age >= 19 AND region IN ('north', 'south') AND amount BETWEEN 1 AND 2 "
        "AND amount IS NOT NULL AND category IS NULL OR category LIKE 'g%' OR category ILIKE 'G%'",
        "SELECT COUNT(*) AS n FROM visits WHERE ABS(age) < ABS(duration_s) OR FLOOR(age / 10) = 3",
        "SELECT COUNT(*) AS n FROM visits WHERE day >= TIMESTAMP '2026-03-01 00:00:00' AND day < DATE '2026-03-01' "
        "+ INTERVAL 1 MONTH OR day >= CURRENT_DATE - INTERVAL 7 DAY OR day >= '2026-03-01T00:00:00' "
        "OR day < CURRENT_DATE - 7",
        "SELECT COUNT(*) AS n FROM visits WHERE age < duration_s AND day <= day AND region <> category",
        "SELECT COUNT(*) AS n FROM visits v JOIN departments d ON v.category = d.category WHERE d.department = 'food'",
        "SELECT COUNT(*) AS n FROM visits v WHERE EXISTS (SELECT * FROM users u WHERE u.user_id = v.user_id "
        "AND plan = 'pro') AND NOT EXISTS (SELECT * FROM visits w WHERE w.user_id = v.user_id AND w.amount > v.amount) "
        "AND category IN (SELECT category FROM departments WHERE department = 'food')",
        "SELECT COUNT(*) AS n FROM visits WHERE category = (SELECT MIN(category) FROM departments)",
    ),
    "GROUP BY": (
        "SELECT region, COUNT(*) AS n FROM visits GROUP BY 1",
        "SELECT region AS r, COUNT(*) AS n FROM visits GROUP BY r",
    ),
    "computed keys and filters": (
        "SELECT CAST(FLOOR(age / 10) * 10 AS INTEGER) AS a, COUNT(*) AS n FROM visits "
        "GROUP BY CAST(FLOOR(age / 10) * 10 AS INTEGER)",
        "SELECT CEIL(age / 10) AS a, COUNT(*) AS n FROM visits GROUP BY CEIL(age / 10)",
        "SELECT ROUND(age, -1) AS a, ABS(age - 50) // 10 AS b, age % 3 AS c, COUNT(*) AS n FROM visits "
        "GROUP BY ROUND(age, -1), ABS(age - 50) // 10, age % 3",
        "SELECT TRY_CAST(age AS BIGINT) AS a, CAST(age AS DOUBLE) AS b, CAST(age AS DECIMAL(5,1)) AS c, "
        "CAST(age AS VARCHAR) AS d, COUNT(*) AS n FROM visits GROUP BY 1, 2, 3, 4",
        "SELECT CASE WHEN age < 30 THEN 'young' ELSE 'old' END AS a, IF(age > 60, 'x', 'y') AS b, "
        "COALESCE(region, 'none') AS c, COUNT(*) AS n FROM visits GROUP BY 1, 2, 3",
        "SELECT LOWER(region) AS a, UPPER(region) AS b, SUBSTR(region, 1, 2) AS c, LEFT(region, 1) AS d, "
        "COUNT(*) AS n FROM visits GROUP BY 1, 2, 3, 4",
        "SELECT date_trunc('month', day) AS m, EXTRACT(year FROM day) AS y, date_part('dow', day) AS w, "
        "YEAR(day) AS yy, MONTH(day) AS mm, strftime(day, '%Y-%m') AS s, CAST(day AS DATE) AS d, COUNT(*) AS n "
        "FROM visits GROUP BY 1, 2, 3, 4, 5, 6, 7",
        "SELECT date_trunc('week', day + INTERVAL 1 DAY) - INTERVAL 1 DAY AS w, day - INTERVAL 2 WEEK AS v, "
        "COUNT(*) AS n FROM visits GROUP BY 1, 2",
    ),
    "JOIN": (
        "SELECT d.department, COUNT(*) AS n FROM visits v INNER JOIN departments d ON v.category = d.category "
        "GROUP BY d.department",
        "SELECT department, COUNT(*) AS n FROM visits LEFT JOIN departments USING (category) GROUP BY department",
        "SELECT u.plan, COUNT(*) AS n FROM visits v JOIN users u USING (user_id) GROUP BY u.plan",
        "SELECT COUNT(*) AS n FROM visits v, users u WHERE v.user_id = u.user_id",
        "SELECT u.plan, d.department, COUNT(*) AS n FROM visits v JOIN users u USING (user_id) JOIN departments d "
        "ON v.category = d.category GROUP BY u.plan, d.department",
        "SELECT d.department, e.department AS e_dep, COUNT(*) AS n FROM visits v JOIN departments d "
        "ON v.category = d.category JOIN departments e ON v.category = e.category GROUP BY d.department, e.department",
    ),
    "public tables alone": (
        "SELECT DISTINCT department FROM departments ORDER BY department",
        "SELECT department, COUNT(*) AS n, COUNT(DISTINCT category) AS c, MIN(category) AS lo, MAX(category) AS hi "
        "FROM departments WHERE category <> 'books' GROUP BY department ORDER BY n DESC LIMIT 2",
        "SELECT * FROM departments",
        "SELECT d.department, COUNT(*) AS n FROM departments d JOIN departments e ON d.department = e.department "
        "WHERE d.category NOT IN (SELECT category FROM departments WHERE department = 'food') GROUP BY 1 "
        "HAVING COUNT(*) > 1",
        "SELECT DISTINCT d.department FROM departments d INNER JOIN departments e ON d.department = e.department "
        "LEFT JOIN departments f ON f.category = e.category CROSS JOIN departments g WHERE g.category LIKE 'b%' "
        "AND EXISTS (SELECT 1 FROM departments h WHERE h.department = d.department AND h.category BETWEEN 'a' AND 'm')",
        "SELECT CASE WHEN d.department = 'food' THEN 'eat' ELSE d.department END AS kind, COUNT(*) AS n "
        "FROM departments d, departments e WHERE d.category = e.category GROUP BY 1 ORDER BY n DESC",
    ),
    "dialect": tuple(f"{d}: SELECT region, COUNT(*) AS n FROM visits GROUP BY region"
                     for d in ("duckdb", "postgres", "mysql", "bigquery", "snowflake", "tsql")),
    "FROM": (
        "SELECT COUNT(*) AS n FROM main.visits",
        "SELECT COUNT(*) AS n FROM (SELECT * FROM visits WHERE age > 30) AS q",
        "SELECT region, COUNT(*) AS n FROM (SELECT region, age FROM visits WHERE age > 30) AS q GROUP BY region",
        "WITH q AS (SELECT region FROM visits WHERE age > 30) SELECT region, COUNT(*) AS n FROM q GROUP BY region",
        "SELECT dep, SUM(x) AS s FROM (SELECT d.department AS dep, v.amount * 2 AS x FROM visits v, departments d "
        "WHERE v.category = d.category) AS q GROUP BY dep",
        "WITH v AS (SELECT user_id, amount FROM visits WHERE age > 30) SELECT COUNT(*) AS n FROM v JOIN users u "
        "ON v.user_id = u.user_id WHERE v.user_id IN (SELECT user_id FROM v WHERE amount > 10)",
    ),
    "per unit, then over units": (
        "SELECT n, COUNT(*) AS users FROM (SELECT user_id, COUNT(*) AS n FROM visits WHERE amount > 10 GROUP BY "
        "user_id) AS q GROUP BY n",
        "SELECT n, COUNT(*) AS users FROM (SELECT u.user_id, COUNT(v.amount) AS n FROM users u LEFT JOIN visits v "
        "ON u.user_id = v.user_id AND v.amount > 10 GROUP BY u.user_id) AS q GROUP BY n",
        "WITH q AS (SELECT user_id, SUM(amount) AS total FROM visits GROUP BY user_id) SELECT COUNT(*) AS users, "
        "AVG(total) AS mean FROM q WHERE total > 100",
    ),
    "HAVING, ORDER BY, LIMIT": (
        "SELECT region, COUNT(*) AS n FROM visits GROUP BY region HAVING COUNT(*) > 5 ORDER BY n DESC LIMIT 2",
        "SELECT region, COUNT(*) AS n FROM visits GROUP BY region ORDER BY 2 LIMIT 3",
    ),
}
# words of a row's backticked examples that are placeholders, policy keys or punctuation, not SQL to cover
_PLACEHOLDERS = {"agg", "col", "groupable", "q", "n", "a", "b", "x", "p", "s", "expr", "condition", "literal",
                 "literals", "key", "its", "the", "privacy", "unit", "public_tables", "table", "columns", "dialect",
                 "price", "qty"}

REJECTED: dict[str, tuple[str, ...]] = {  # README "Everything else — … — is rejected" item -> refused queries
    "joins of other shapes": (
        "SELECT COUNT(*) FROM visits v JOIN visits w USING (user_id)",  # a protected table twice
        "SELECT COUNT(*) FROM visits v RIGHT JOIN users u USING (user_id)",
        "SELECT COUNT(*) FROM visits v FULL JOIN users u USING (user_id)",
        "SELECT COUNT(*) FROM visits v CROSS JOIN users u",
        "SELECT COUNT(*) FROM visits, users",
        "SELECT COUNT(*) FROM visits v JOIN users u ON v.age = u.age",
    ),
    "other subqueries and CTEs": (
        "SELECT COUNT(*) FROM (SELECT region FROM (SELECT * FROM visits) a) b",
        "SELECT COUNT(*) FROM visits WHERE category IN (SELECT category FROM departments GROUP BY category)",
        "WITH RECURSIVE q AS (SELECT * FROM visits) SELECT COUNT(*) FROM q",
    ),
    "set operations": ("SELECT COUNT(*) FROM visits UNION SELECT COUNT(*) FROM users",
                       "SELECT COUNT(*) FROM visits EXCEPT SELECT COUNT(*) FROM users"),
    "window functions": ("SELECT region, COUNT(*) OVER () FROM visits GROUP BY region",),
    "table functions": ("SELECT COUNT(*) FROM range(10)", "SELECT COUNT(*) FROM read_csv('x.csv')"),
    "`*`": ("SELECT * FROM visits",),
    "`DISTINCT`": ("SELECT DISTINCT region FROM visits",),
    "`GROUP BY ALL`/`ROLLUP`": ("SELECT region, COUNT(*) FROM visits GROUP BY ALL",
                                "SELECT region, COUNT(*) FROM visits GROUP BY ROLLUP(region)"),
    "other functions": ("SELECT COUNT(*) FROM visits WHERE RANDOM() > 0.5",
                        "SELECT NOW() AS t, COUNT(*) FROM visits GROUP BY 1"),
    "other expressions inside aggregates": ("SELECT SUM(SQRT(amount)) FROM visits",),
    "`OFFSET`": ("SELECT COUNT(*) FROM visits LIMIT 1 OFFSET 2",),
    "statements other than SELECT": ("DELETE FROM visits", "DROP TABLE visits"),
}

NOT_YET_SQL: dict[str, tuple[str, ...]] = {  # README "Not yet:" item -> refused queries (or a policy check)
    "joins of protected tables on a key outside their declared `unit_via` paths": (
        "SELECT COUNT(*) FROM visits v JOIN users u ON v.age = u.age",),
    "a protected table joined to itself": (
        "SELECT COUNT(*) FROM visits v JOIN visits w ON v.user_id = w.user_id",
        "WITH t AS (SELECT user_id, amount FROM visits) SELECT COUNT(*) FROM t JOIN t AS t2 ON t.user_id = t2.user_id"),
    "a correlated scalar subquery over public tables inside a query over protected ones": (
        "SELECT COUNT(*) FROM visits v WHERE category = (SELECT MIN(d.category) FROM departments d "
        "WHERE d.department = v.category)",),
    "replace-one adjacency": (),  # not SQL: checked by the policy loader below
}

ERRORS_UNSUPPORTED: dict[str, tuple[str, ...]] = {  # errors.md `unsupported` row item -> refused queries
    "not exactly one SELECT": ("SELECT COUNT(*) FROM visits; SELECT COUNT(*) FROM users", "DELETE FROM visits"),
    "a JOIN other than INNER/LEFT joins on an equality or USING": REJECTED["joins of other shapes"][:5],
    "a comma join that no WHERE equality connects": ("SELECT COUNT(*) FROM visits v, users u WHERE v.age > 3",),
    "a subquery or CTE beyond one level of filter-and-project": REJECTED["other subqueries and CTEs"],
    "window": REJECTED["window functions"],
    "set operation": REJECTED["set operations"],
    "table function": REJECTED["table functions"],
    "a function outside the computed-value allow-list": REJECTED["other functions"],
    "`*`": REJECTED["`*`"],
    "DISTINCT": REJECTED["`DISTINCT`"],
    "GROUP BY ALL/ROLLUP/a constant/an out-of-range position": (
        *REJECTED["`GROUP BY ALL`/`ROLLUP`"], "SELECT COUNT(*) FROM visits GROUP BY 'x'",
        "SELECT region, COUNT(*) FROM visits GROUP BY 3"),
    "an expression inside an aggregate beyond those allowed": REJECTED["other expressions inside aggregates"],
    "OFFSET": REJECTED["`OFFSET`"],
    "too long or too deeply nested": ("SELECT COUNT(*) FROM visits WHERE " + "(" * 300 + "age > 1" + ")" * 300,),
    "a quantile whose q is not one number literal": ("SELECT QUANTILE(amount, [0.1, 0.5]) FROM visits",
                                                     "SELECT QUANTILE(amount, age) FROM visits"),
    "`… WITHIN GROUP (ORDER BY col DESC)`": (
        "SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY amount DESC) FROM visits",),
    "a function other than + − × ÷-by-a-number and CASE inside SUM/AVG": (
        "SELECT SUM(SQRT(amount)) FROM visits", "SELECT AVG(amount / duration_s) FROM visits"),
    "`COUNT(DISTINCT …) FILTER`": ("SELECT COUNT(DISTINCT user_id) FILTER (WHERE age > 3) FROM visits",),
    "a FILTER or COUNT_IF condition outside the WHERE allow-list": (
        "SELECT COUNT(*) FILTER (WHERE RANDOM() > 0.5) FROM visits",),
    "a correlated scalar subquery over public tables in a query over protected ones": (
        "SELECT COUNT(*) FROM visits v WHERE category = (SELECT MIN(d.category) FROM departments d "
        "WHERE d.department = v.category)",),
    "a CTE with a WHERE read on the right of a LEFT JOIN or a renamed CTE column read unqualified beside another "
    "table": (
        "WITH u AS (SELECT user_id, plan FROM users WHERE plan = 'pro') SELECT COUNT(*) FROM visits v LEFT JOIN u "
        "ON v.user_id = u.user_id",
        "WITH v AS (SELECT user_id, age AS a FROM visits) SELECT COUNT(*) FROM v JOIN users u ON v.user_id = u.user_id "
        "WHERE a > 30"),
}


def _catalog() -> object:
    """The demo catalog with `day` bounded to 2026 (its quantiles a day)."""
    import dataclasses

    from proxy.query.catalog import ColumnSpec
    from tests.support.demo_catalog import DEMO, VISITS

    columns = tuple(dataclasses.replace(c, date_bounds=("2026-01-01", "2026-12-31")) if c.name == "day" else c
                    for c in VISITS.columns)
    visits = dataclasses.replace(VISITS, columns=columns)
    assert all(isinstance(c, ColumnSpec) for c in columns)
    return dataclasses.replace(DEMO, tables=(visits, *DEMO.tables[1:]))


def _split_top(text: str, separators: tuple[str, ...] = (", ",)) -> list[str]:
    """`text` split at `separators` outside parentheses and backticks (", e.g." and ", or" do not split)."""
    items, depth, tick, start, i = [], 0, False, 0, 0
    while i < len(text):
        char = text[i]
        if char == "`":
            tick = not tick
        elif not tick and char == "(":
            depth += 1
        elif not tick and char == ")":
            depth -= 1
        elif not tick and depth == 0:
            sep = next((s for s in separators if text.startswith(s, i)), None)
            if sep is not None and not text.startswith(sep + "e.g.", i):
                items.append(text[start:i].strip())
                start = i = i + len(sep)
                continue
        i += 1
    items.append(text[start:].strip())
    return [item for item in items if item]


def _readme_rows() -> dict[str, str]:
    text = README.read_text()
    section = text.split("## Supported SQL", 1)[1].split("\n\n", 3)
    table = next(part for part in section if part.startswith("| where | allowed |"))
    rows = {}
    for line in table.splitlines()[2:]:
        cells = _split_top(line.strip().strip("|"), (" | ",))
        rows[cells[0].strip()] = cells[1].strip()
    return rows


def _words(row: str) -> set[str]:
    """The SQL words a row names in backticks (function names, keywords), placeholders left out."""
    import re

    found = set()
    for code in re.findall(r"`([^`]+)`", row):
        if code.endswith(".py"):  # a link to the module
            continue
        found |= {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code)}
    return found - _PLACEHOLDERS


def _answered(sql: str, catalog: object, con: object) -> None:
    from proxy.query.planner import plan, plan_public

    dialect, _, text = sql.partition(": ") if sql.split(":")[0] in ("duckdb", "postgres", "mysql", "bigquery",
                                                                   "snowflake", "tsql") else ("duckdb", "", sql)
    public = plan_public(text, catalog, max_rows=100, dialect=dialect)  # type: ignore[arg-type]
    if public is not None:  # over a public table alone: exact, its rebuilt SQL runs on the data
        con.execute(public.tree.sql("duckdb")).fetchall()  # type: ignore[attr-defined]
        return
    from proxy.query.planner import public_scalars
    from proxy.query.public.scalars import folded, value_query

    # a scalar subquery over public tables: its value computed as the pipeline does (pipeline.public_values)
    values = tuple(folded(tuple(con.execute(value_query(q).sql("duckdb")).fetchall()))  # type: ignore[attr-defined]
                   for q in public_scalars(text, catalog, dialect=dialect))  # type: ignore[arg-type]
    planned = plan(text, catalog, epsilon=0.5, delta=1e-6, mechanism="laplace", dialect=dialect,  # type: ignore[arg-type]
                   scalars=values)
    con.execute(planned.sql).fetchall()  # type: ignore[attr-defined]  # and the rewritten SQL runs on the data


def _refused(sql: str, catalog: object, codes: tuple[str, ...] = ("unsupported", "policy")) -> None:
    from proxy.query.errors import QueryError
    from proxy.query.planner import plan

    try:
        plan(sql, catalog, epsilon=0.5, delta=1e-6, mechanism="laplace")  # type: ignore[arg-type]
    except QueryError as err:
        assert err.code in codes, (sql, err.code, err.message)
        return
    raise AssertionError(f"documented as refused, but answered: {sql}")


def test_every_supported_sql_row_of_the_readme_is_answered(tmp_path: Path) -> None:
    import duckdb

    from proxy.cli.demo import build_demo
    from tests.support import departments

    rows = _readme_rows()
    assert set(rows) == set(SUPPORTED), "a README row without examples here, or examples of a row it lost"
    files = build_demo(tmp_path, users=40, rows=400)
    departments.create(files.database)
    catalog = _catalog()
    with duckdb.connect(str(files.database), read_only=True) as con:
        for name, row in rows.items():
            examples = " ".join(SUPPORTED[name]).lower()
            missing = {w for w in _words(row) if not re.search(rf"\b{re.escape(w)}\b", examples)}
            assert not missing, f"README row {name!r} names {sorted(missing)}: add an example using each"
            for sql in SUPPORTED[name]:
                _answered(sql, catalog, con)


def test_everything_the_readme_says_is_rejected_is_refused_before_any_charge() -> None:
    text = README.read_text()
    listed = text.split("Everything else — ", 1)[1].split(" — is rejected", 1)[0].replace("\n", " ")
    items = _split_top(listed)
    assert set(items) == set(REJECTED), items
    catalog = _catalog()
    for item in items:
        for sql in REJECTED[item]:
            _refused(sql, catalog)


def test_what_the_readme_says_is_not_yet_supported_is_refused(tmp_path: Path) -> None:
    from proxy.policy.load import policy_problems

    text = README.read_text()
    assert text.lower().count("not yet") == 1, "a new 'not yet' claim: parse and check it here"
    bullet = text.split("- Not yet: ", 1)[1].split("\n- ", 1)[0].replace("\n  ", " ").rstrip(".\n")
    items = [item.split(" (")[0] for item in _split_top(bullet)]
    assert set(items) == set(NOT_YET_SQL), items
    catalog = _catalog()
    for item in items:
        for sql in NOT_YET_SQL[item]:
            _refused(sql, catalog)
    # replace-one adjacency: no policy setting offers it (an unknown key is refused, never ignored)
    (tmp_path / "d.duckdb").touch()
    (tmp_path / "p.toml").write_text('[datasets.d]\npath = "d.duckdb"\nadjacency = "replace_one"\n'
                                     '[datasets.d.tables.t]\nprivacy_unit = "u"\ncolumns.u = { type = "BIGINT" }\n')
    assert any(p.startswith("datasets.d.adjacency: ") for p in policy_problems(tmp_path / "p.toml"))


def test_the_errors_md_example_is_the_products_own_answer() -> None:
    import json

    from proxy.http.errors import error_body
    from proxy.query.errors import QueryError
    from proxy.query.planner import plan

    text = (DOCS / "errors.md").read_text()
    example = json.loads(text.split("```json\n", 1)[1].split("```", 1)[0])
    sql = re.search(r"\(the answer to `([^`]+)` on the demo dataset\)", text)
    assert sql is not None, "errors.md must say which query its example body answers"
    try:
        plan(sql[1], _catalog(), epsilon=0.5, delta=1e-6, mechanism="laplace")  # type: ignore[arg-type]
    except QueryError as err:
        assert error_body(STATUS[err.code], err.code, str(err), dict(err.detail), False) == example
        return
    raise AssertionError(f"errors.md's example query is answered: {sql[1]}")


def test_every_unsupported_construct_errors_md_lists_is_refused_as_unsupported() -> None:
    text = (DOCS / "errors.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `unsupported` |"))
    when = _split_top(row.strip().strip("|"), (" | ",))[2]
    head, listed = when.split(" (", 1)
    items = _split_top(head, (", or ",)) + _split_top(listed[: listed.rindex(")")], (", ", "; "))
    items = [item.split(" (")[0] if not item.startswith("`") else item for item in items]
    items = [item.split(", e.g.")[0] for item in items if item != "a construct outside the allow-list"]
    assert set(items) == set(ERRORS_UNSUPPORTED), sorted(set(items) ^ set(ERRORS_UNSUPPORTED))
    catalog = _catalog()
    for item in items:
        for sql in ERRORS_UNSUPPORTED[item]:
            _refused(sql, catalog, ("unsupported", "sql_syntax") if item == "too long or too deeply nested"
                     else ("unsupported",))
