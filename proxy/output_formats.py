"""Answers as CSV or Arrow, for BI tools and notebooks: `Accept: text/csv` or
`Accept: application/vnd.apache.arrow.stream` on POST /v1/query.

Both are derived from the JSON answer's bytes, the one body the ledger stores for repeats, so every format
carries the same numbers, a repeat answers in any format, and nothing here sees more than the JSON holds. The
charge, noise, partitions and budget travel as JSON in headers (CSV: `X-DP-Charge`, `X-DP-Noise`,
`X-DP-Partitions`, `X-DP-Budget`) or in the Arrow schema's metadata (`dp.charge`, …).

Example:
    >>> body = b'{"columns": ["region", "n"], "rows": [["north", 12], ["south", null]], "charge": {"epsilon": 0.1}}'
    >>> text, headers = to_csv(body)
    >>> print(text.decode(), end="")
    region,n
    north,12
    south,
    >>> headers["X-DP-Charge"]
    '{"epsilon":0.1}'
    >>> to_arrow(body).startswith(b"\\xff\\xff\\xff\\xff")  # an Arrow IPC stream
    True
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

CSV = "text/csv"
ARROW = "application/vnd.apache.arrow.stream"
_METADATA = ("charge", "noise", "partitions", "budget", "dataset")


def negotiated(accept: str | None) -> str | None:
    """The format an `Accept` header asks for (CSV or ARROW), or None for JSON.

    Example:
        >>> negotiated("text/csv; charset=utf-8"), negotiated("application/json"), negotiated(None)
        ('text/csv', None, None)
    """
    kinds = [part.split(";")[0].strip().lower() for part in (accept or "").split(",")]
    return next((k for k in kinds if k in (CSV, ARROW)), None)


def to_csv(body: bytes) -> tuple[bytes, dict[str, str]]:
    """The answer's rows as CSV (a header row of column names; NULL as an empty field) and its metadata as
    headers (compact ASCII JSON)."""
    answer = json.loads(body)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(answer["columns"])
    writer.writerows([_cell(v) for v in row] for row in answer["rows"])
    headers = {f"X-DP-{key.capitalize()}": _compact(answer[key]) for key in _METADATA if key in answer}
    return out.getvalue().encode(), headers


def to_arrow(body: bytes) -> bytes:
    """The answer as one Arrow IPC stream: a column per output, types inferred from the values (numbers,
    text, booleans; NULL kept), the metadata in the schema."""
    import pyarrow as pa  # imported on use: only answers asked for as Arrow need it

    answer = json.loads(body)
    columns = list(zip(*answer["rows"], strict=True)) if answer["rows"] else [() for _ in answer["columns"]]
    arrays = [pa.array(list(values)) for values in columns]
    metadata = {f"dp.{key}": _compact(answer[key]) for key in _METADATA if key in answer}
    table = pa.Table.from_arrays(arrays, names=list(answer["columns"]), metadata=metadata)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return value


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True)
