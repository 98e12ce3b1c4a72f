"""Answers as CSV or Arrow, for BI tools and notebooks: `Accept: text/csv` or
`Accept: application/vnd.apache.arrow.stream` on POST /v1/query.

Both are derived from the JSON answer's bytes, the one body the ledger stores for repeats, so every format
carries the same numbers, a repeat answers in any format, and nothing here sees more than the JSON holds. The
charge, noise, partitions and budget travel as JSON in headers (CSV: `X-DP-Charge`, `X-DP-Noise` without the
per-row `ci_rows` and null fields, `X-DP-Partitions`, `X-DP-Budget`; the route passes the summary answer, so
each stays under 1 KB) or in the Arrow schema's metadata (`dp.charge`, …).

Both conversions are total: they run after the charge, so no value a release can hold may make them fail.
- CSV (RFC 4180: CRLF line ends; a field holding a comma, quote, CR or LF is quoted): a text cell (a JSON
  string) that a spreadsheet would read as a formula (first character one of `= + - @`, tab, carriage
  return, NUL, or their full-width forms) is prefixed with `'` (OWASP's rule for CSV injection); numbers are
  written as numbers, so a noisy count of -3 stays -3. JSON and Arrow stay exact.
- Arrow: each column's type comes from the query's declared types (`column_types`: UBIGINT as uint64,
  DECIMAL(p,s) as decimal128(p,s), DATE as date32, …); a column holding a value its type cannot hold exactly
  (a float in an integer column, a stale stored body) takes the narrowest type that holds every value, down
  to text, which holds anything.

Example:
    >>> body = (b'{"columns": ["region", "n"], "rows": [["north", 12], ["=1+1", -3], ["south", null]], '
    ...         b'"charge": {"epsilon": 0.1}}')
    >>> text, headers = to_csv(body)
    >>> text.decode().split("\\r\\n")
    ['region,n', 'north,12', "'=1+1,-3", 'south,', '']
    >>> headers["X-DP-Charge"]
    '{"epsilon":0.1}'
    >>> to_arrow(body).startswith(b"\\xff\\xff\\xff\\xff")  # an Arrow IPC stream
    True
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import math
import struct
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from proxy.query import types
from proxy.query.analyse.measures import measures_of
from proxy.query.expr import Agg, Key

if TYPE_CHECKING:
    import pyarrow as pa

    from proxy.query.analyse.analysis import Analysis

CSV = "text/csv"
ARROW = "application/vnd.apache.arrow.stream"
_METADATA = ("charge", "noise", "partitions", "budget", "dataset", "public")  # public: only on exact answers
_PER_ROW = ("ci_rows", "interval_rows", "parts_rows")  # per-row error bars: JSON and Arrow only, never a header
# OWASP (CSV Injection): a cell starting with one of these is a formula to Excel, LibreOffice or Sheets; NUL
# from ASVS 1.2.10, the full-width forms because some spreadsheets fold them to the ASCII ones
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\0", "\uff1d", "\uff0b", "\uff0d", "\uff20")
_COUNTS = ("count", "count_column", "count_units")
_MEANS = ("avg", "var_pop", "var_samp", "stddev_pop", "stddev_samp")


def negotiated(accept: str | None) -> str | None:
    """The format an `Accept` header asks for (CSV or ARROW), or None for JSON.

    Example:
        >>> negotiated("text/csv; charset=utf-8"), negotiated("application/json"), negotiated(None)
        ('text/csv', None, None)
    """
    kinds = [part.split(";")[0].strip().lower() for part in (accept or "").split(",")]
    return next((k for k in kinds if k in (CSV, ARROW)), None)


def to_csv(body: bytes) -> tuple[bytes, dict[str, str]]:
    """The answer's rows as CSV (RFC 4180; a header row of column names; NULL as an empty field; formula-shaped
    text neutralised) and its metadata as headers (compact ASCII JSON)."""
    answer = json.loads(body)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180; and a field holding CR or LF is then quoted
    writer.writerow([_cell(name) for name in answer["columns"]])  # an alias is text the analyst chose
    writer.writerows([_cell(v) for v in row] for row in answer["rows"])
    # a header carries no per-row list (the AVG/VAR bars `_PER_ROW`: in the JSON answer and the Arrow metadata),
    # so that its size does not grow with the rows, and no null field: headers stay under 1 KB for reverse
    # proxies (X-DP-Noise: about 100 bytes per noised column)
    noise = [{k: v for k, v in n.items() if v is not None and k not in _PER_ROW} if isinstance(n, dict) else n
             for n in answer.get("noise") or []]
    metadata = {**answer, "noise": noise} if "noise" in answer else answer
    headers = {f"X-DP-{key.capitalize()}": _compact(metadata[key]) for key in _METADATA if key in metadata}
    return out.getvalue().encode(errors="backslashreplace"), headers  # a lone surrogate cannot fail it


def neutralised(text: str) -> str:
    """`text` as a CSV cell a spreadsheet shows as text, never evaluates (OWASP: prefix a formula with `'`).

    Example:
        >>> neutralised('=HYPERLINK("http://x","y")'), neutralised("-3"), neutralised("north"), neutralised("")
        ('\\'=HYPERLINK("http://x","y")', "'-3", 'north', '')
    """
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def column_types(analysis: Analysis) -> tuple[str | None, ...]:
    """The declared type (DuckDB's name) of each released column, None where only its values say: a key's
    declared or computed type; BIGINT for counts and for sums and quantiles on a grid of whole numbers, DOUBLE
    for other sums and quantiles and for AVG, VAR and STDDEV, DATE for a DATE column's quantiles; None for
    arithmetic and constants.

    Example:
        >>> from proxy.query.planner import plan
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("k", "UBIGINT", groupable=True),
        ...     ColumnSpec("x", "DECIMAL(10,2)", bounds=(0, 10))))
        >>> p = plan("SELECT k, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a, COUNT(*) / 2 AS h FROM t GROUP BY k",
        ...          Catalog((t,)), epsilon=1.0, delta=1e-6, mechanism="laplace")
        >>> column_types(p.analysis)
        ('UBIGINT', 'BIGINT', 'DOUBLE', 'DOUBLE', None)
    """
    return tuple(_output_type(analysis, output.expr) for output in analysis.outputs)


def to_arrow(body: bytes, declared: Sequence[str | None] = ()) -> bytes:
    """The answer as one Arrow IPC stream: a column per output, typed by `declared` (`column_types` of its
    query; without it, or where a value does not fit, by the values), NULL kept, the metadata in the schema."""
    import pyarrow as pa  # imported on use: only answers asked for as Arrow need it

    answer = json.loads(body)
    names = list(answer["columns"])
    columns = list(zip(*answer["rows"], strict=True)) if answer["rows"] else [() for _ in names]
    wanted = list(declared) if len(declared) == len(names) else [None] * len(names)  # a stale plan: values decide
    arrays = [_array(list(values), type_name) for values, type_name in zip(columns, wanted, strict=True)]
    metadata = {f"dp.{key}": _compact(answer[key]) for key in _METADATA if key in answer}
    table = pa.Table.from_arrays(arrays, names=names, metadata=metadata)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def arrow_type(type_name: str) -> pa.DataType:
    """The Arrow type of a declared column type, as DuckDB exports it (HUGEINT as decimal128(38, 0)).

    Example:
        >>> [str(arrow_type(t)) for t in ("UBIGINT", "TINYINT", "REAL", "DECIMAL(10,2)", "DATE", "TEXT", "BOOL")]
        ['uint64', 'int8', 'float', 'decimal128(10, 2)', 'date32[day]', 'string', 'bool']
    """
    import pyarrow as pa

    name = types.normalize(type_name)
    if name.startswith("DECIMAL"):
        precision, scale = (int(x) for x in name[8:-1].split(","))
        return pa.decimal128(precision, scale)
    return {
        "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INTEGER": pa.int32(), "BIGINT": pa.int64(),
        "HUGEINT": pa.decimal128(38, 0), "UTINYINT": pa.uint8(), "USMALLINT": pa.uint16(), "UINTEGER": pa.uint32(),
        "UBIGINT": pa.uint64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
        "DATE": pa.date32(), "BOOLEAN": pa.bool_(),
    }[name]


# --- the declared type of an output ---------------------------------------------------------------------

def _output_type(analysis: Analysis, expr: object) -> str | None:
    try:
        if isinstance(expr, Key):
            spec = analysis.table.column(analysis.keys[expr.index])
            return None if spec is None else spec.type
        if isinstance(expr, Agg):
            return _aggregate_type(analysis, expr.index)
    except Exception:  # the values still decide: a type is a nicety, the answer is not
        return None
    return None


def _aggregate_type(analysis: Analysis, index: int) -> str | None:
    aggregate = analysis.aggregates[index]
    if aggregate.kind in _COUNTS:
        return "BIGINT"
    if aggregate.kind in _MEANS:
        return "DOUBLE"
    first = measures_of(aggregate, analysis.table)[0]
    if aggregate.kind == "sum":  # release._estimates: the noisy integer, divided by its grid unless 1
        return "BIGINT" if first.grid == 1 else "DOUBLE"
    if aggregate.kind == "quantile":  # quantiles.point_value
        if first.epoch:
            return "DATE"
        whole = first.grid == 1 and first.hi - first.lo == max(first.points - 1, 1)
        return "BIGINT" if whole else "DOUBLE"
    return None


# --- values into Arrow, totally ----------------------------------------------------------------------

_EXACT = decimal.Context(prec=200, traps=[decimal.InvalidOperation])


def _array(values: list[Any], type_name: str | None) -> pa.Array:
    """`values` (JSON values) as an Arrow array of the declared type if every value is exactly one of it, else
    of the narrowest type that holds them all (`_inferred`)."""
    import pyarrow as pa

    if type_name is not None:
        try:
            target = arrow_type(type_name)
        except (ValueError, KeyError):
            target = None
        if target is not None:
            read = _reader(type_name)
            converted = [None if v is None else read(v) for v in values]
            if all(c is not _MISFIT for c in converted):
                return pa.array(converted, type=target)
    return _inferred(values)


_MISFIT = object()


def _reader(type_name: str) -> Callable[[Any], Any]:
    """The Arrow value of one JSON value of a declared type, or _MISFIT when it is not exactly one."""
    name, family = types.normalize(type_name), types.kind(type_name)
    if family == "integer":
        box = types.grid(name)
        assert box is not None
        low, high = max(int(box[1]), -(10**38) + 1), min(int(box[2]), 10**38 - 1)  # HUGEINT: decimal128(38, 0)
        return lambda v: v if _is_int(v) and low <= v <= high else _MISFIT
    if family == "decimal":
        precision, scale = (int(x) for x in name[8:-1].split(","))
        top = Decimal(10**precision - 1).scaleb(-scale, context=_EXACT)  # exact: types.grid rounds past 28 digits
        return lambda v: _decimal(v, scale, top)
    if family == "float":
        if name == "FLOAT":
            return lambda v: float(v) if _is_number(v) and _is_float32(v) else _MISFIT
        return lambda v: _double(v)
    if family == "date":
        return _date
    if family == "boolean":
        return lambda v: v if isinstance(v, bool) else _MISFIT
    return lambda v: v if isinstance(v, str) and _is_utf8(v) else _MISFIT


def _inferred(values: list[Any]) -> pa.Array:
    """The narrowest of bool, int64, uint64, decimal128(38, 0), decimal256(76, 0), float64 and text that
    holds every value exactly (text: a string as it is, anything else as its JSON text)."""
    import pyarrow as pa

    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pa.array(values, type=pa.bool_())
    if present and all(_is_int(v) for v in present):
        for target, low, high in ((pa.int64(), -(2**63), 2**63 - 1), (pa.uint64(), 0, 2**64 - 1),
                                  (pa.decimal128(38, 0), -(10**38) + 1, 10**38 - 1),
                                  (pa.decimal256(76, 0), -(10**76) + 1, 10**76 - 1)):
            if all(low <= v <= high for v in present):
                return pa.array(values, type=target)
    if present and all(_is_number(v) for v in present):
        doubles = [None if v is None else _double(v) for v in values]
        if all(d is not _MISFIT for d in doubles):
            return pa.array(doubles, type=pa.float64())
    if not present:
        return pa.array(values, type=pa.null())
    return pa.array([None if v is None else v if isinstance(v, str) and _is_utf8(v) else _compact(v)
                     for v in values], type=pa.string())  # _compact: ASCII JSON, so a lone surrogate is escaped


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON can carry one, UTF-8 cannot
        return False
    return True


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _double(value: object) -> Any:
    """A float, or an int a float holds exactly (NaN and ±inf are floats); else _MISFIT."""
    if isinstance(value, float):
        return value
    if _is_int(value):
        try:
            wide = float(value)  # type: ignore[arg-type]
        except OverflowError:
            return _MISFIT
        return wide if int(wide) == value else _MISFIT
    return _MISFIT


def _is_float32(value: int | float) -> bool:
    wide = float(value)
    if not math.isfinite(wide):
        return True
    try:
        return float(struct.unpack("<f", struct.pack("<f", wide))[0]) == wide and wide == value
    except OverflowError:
        return False


def _decimal(value: object, scale: int, top: Decimal) -> Any:
    """A number on the DECIMAL's grid and in its range as that Decimal (a JSON float by its shortest digits,
    which a released DECIMAL key always is); else _MISFIT."""
    if not _is_number(value):
        return _MISFIT
    exact = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)  # type: ignore[arg-type]
    if not exact.is_finite():
        return _MISFIT
    try:
        on_grid = exact.quantize(Decimal(1).scaleb(-scale), context=_EXACT)
    except decimal.InvalidOperation:
        return _MISFIT
    return on_grid if on_grid == exact and -top <= on_grid <= top else _MISFIT


def _date(value: object) -> Any:
    if not isinstance(value, str):
        return _MISFIT
    try:
        return dt.date.fromisoformat(value) if len(value) == 10 else _MISFIT
    except ValueError:
        return _MISFIT


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, str):  # decided by the JSON type: a number is never text, -3 stays -3
        return neutralised(value)
    if isinstance(value, float):
        return repr(value)
    return value


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True)
