"""PostgreSQL types on the wire: the OID a declared (DuckDB) type is sent as, and values in text or binary.

Only built-in types with a fixed OID are sent, so no client needs to look a type up (asyncpg introspects an
OID it does not know). A declared type without an equivalent here is sent as `text`.

Example:
    >>> oid_of("BIGINT"), oid_of("VARCHAR"), oid_of("DECIMAL(10,2)"), oid_of(None)
    (20, 25, 701, 25)
    >>> encode(3, 20, 0), encode(3, 20, 1), encode(True, 16, 0), encode(None, 25, 0)
    (b'3', b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x03', b't', None)
"""

from __future__ import annotations

import datetime
import math
import struct
from decimal import Decimal

BOOL, BYTEA, NAME, INT8, INT2, INT4, TEXT, OID, FLOAT4, FLOAT8 = 16, 17, 19, 20, 21, 23, 25, 26, 700, 701
VARCHAR, DATE, TIMESTAMP, TIMESTAMPTZ, NUMERIC, UNKNOWN = 1043, 1082, 1114, 1184, 1700, 705

SIZES = {BOOL: 1, INT2: 2, INT4: 4, INT8: 8, OID: 4, FLOAT4: 4, FLOAT8: 8, DATE: 4, TIMESTAMP: 8, TIMESTAMPTZ: 8}
NAMES = {BOOL: "boolean", INT2: "smallint", INT4: "integer", INT8: "bigint", TEXT: "text", OID: "oid",
         FLOAT4: "real", FLOAT8: "double precision", VARCHAR: "character varying", DATE: "date",
         TIMESTAMP: "timestamp without time zone", TIMESTAMPTZ: "timestamp with time zone", NUMERIC: "numeric",
         NAME: "name", BYTEA: "bytea"}
TYPNAMES = {BOOL: "bool", INT2: "int2", INT4: "int4", INT8: "int8", TEXT: "text", OID: "oid", FLOAT4: "float4",
            FLOAT8: "float8", VARCHAR: "varchar", DATE: "date", TIMESTAMP: "timestamp", TIMESTAMPTZ: "timestamptz",
            NUMERIC: "numeric", NAME: "name", BYTEA: "bytea"}

_DECLARED = {
    "BOOLEAN": BOOL, "BOOL": BOOL, "TINYINT": INT2, "SMALLINT": INT2, "UTINYINT": INT2, "INTEGER": INT4,
    "INT": INT4, "USMALLINT": INT4, "BIGINT": INT8, "UINTEGER": INT8,
    "DOUBLE": FLOAT8, "FLOAT": FLOAT8, "REAL": FLOAT4, "DECIMAL": FLOAT8, "NUMERIC": FLOAT8, "VARCHAR": TEXT,
    "TEXT": TEXT, "STRING": TEXT, "DATE": DATE, "TIMESTAMP": TIMESTAMP, "TIMESTAMP WITH TIME ZONE": TIMESTAMPTZ,
    "TIMESTAMPTZ": TIMESTAMPTZ,
}
_EPOCH = datetime.date(2000, 1, 1)
_EPOCH_TS = datetime.datetime(2000, 1, 1)


def oid_of(declared: str | None) -> int:
    """The OID a column of DuckDB type `declared` is sent as (text when unknown or not declared)."""
    if declared is None:
        return TEXT
    base = declared.upper().split("(")[0].strip()
    return _DECLARED.get(base, TEXT)


def oid_of_value(value: object) -> int:
    """The OID for a column whose type only its values say (arithmetic, constants).

    Example:
        >>> oid_of_value(2), oid_of_value(2.5), oid_of_value("x"), oid_of_value(None)
        (20, 701, 25, 25)
    """
    match value:
        case bool():
            return BOOL
        case int():
            return INT8
        case float() | Decimal():
            return FLOAT8
        case datetime.datetime():
            return TIMESTAMP
        case datetime.date():
            return DATE
    return TEXT


def size_of(oid: int) -> int:
    return SIZES.get(oid, -1)


def text(value: object, oid: int) -> str:
    """A value in PostgreSQL's text output format for `oid`.

    Example:
        >>> text(0.1, 701), text(float("inf"), 701), text(False, 16), text(12.0, 20)
        ('0.1', 'Infinity', 'f', '12')
    """
    if isinstance(value, bool):
        return "t" if value else "f"
    if oid in (INT2, INT4, INT8, OID) and isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else "Infinity" if value == math.inf else "-Infinity" if value == -math.inf \
            else repr(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return "{" + ",".join(text(v, TEXT) for v in value) + "}"
    return str(value)


def encode(value: object, oid: int, fmt: int) -> bytes | None:
    """`value` as sent in a DataRow: text (`fmt` 0) or binary (1) of `oid`; None is SQL NULL."""
    if value is None:
        return None
    if fmt == 0:
        return text(value, oid).encode("utf-8")
    match oid:
        case 16:
            return b"\x01" if value else b"\x00"
        case 21:
            return struct.pack("!h", int(value))  # type: ignore[call-overload]
        case 23 | 26:
            return struct.pack("!i", int(value))  # type: ignore[call-overload]
        case 20:
            return struct.pack("!q", int(value))  # type: ignore[call-overload]
        case 700:
            return struct.pack("!f", float(value))  # type: ignore[arg-type]
        case 701:
            return struct.pack("!d", float(value))  # type: ignore[arg-type]
        case 1082:
            day = value if isinstance(value, datetime.date) else datetime.date.fromisoformat(str(value))
            return struct.pack("!i", (day - _EPOCH).days)
        case 1114:
            moment = value if isinstance(value, datetime.datetime) else datetime.datetime.fromisoformat(str(value))
            delta = moment.replace(tzinfo=None) - _EPOCH_TS
            return struct.pack("!q", (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds)
    return text(value, oid).encode("utf-8")  # text, varchar, name: the binary form is the text


def decode(data: bytes, oid: int, fmt: int) -> str | int | float | bool | Decimal | datetime.date:
    """A bound parameter's value: binary (`fmt` 1) by its declared `oid`, text as the type reads it.

    Example:
        >>> decode(b"42", 20, 0), decode(b"\\x00\\x00\\x00\\x07", 23, 1), decode(b"north", 0, 0)
        (42, 7, 'north')
    """
    if fmt == 1:
        match oid:
            case 16:
                return data != b"\x00"
            case 21:
                return int(struct.unpack("!h", data)[0])
            case 23 | 26:
                return int(struct.unpack("!i", data)[0])
            case 20:
                return int(struct.unpack("!q", data)[0])
            case 700:
                return float(struct.unpack("!f", data)[0])
            case 701:
                return float(struct.unpack("!d", data)[0])
            case 1082:
                return _EPOCH + datetime.timedelta(days=int(struct.unpack("!i", data)[0]))
        return data.decode("utf-8")
    value = data.decode("utf-8")
    match oid:
        case 21 | 23 | 20 | 26:
            return int(value)
        case 700 | 701:
            return float(value)
        case 1700:
            return Decimal(value)
        case 16:
            return value.lower() in ("t", "true", "1", "on", "yes", "y")
        case 1082:
            return datetime.date.fromisoformat(value)
    return value
