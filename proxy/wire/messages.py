"""The PostgreSQL protocol's messages (version 3.0), as bytes and back: a pure codec, no I/O.

A frontend message is a tag byte and a 4-byte big-endian length that counts itself; the startup packet has
no tag. `decode(tag, body)` and `decode_startup(body)` turn one such frame into a record; the `encode_*`
functions build the backend's. The server reads frames (proxy/wire/server.py) and keeps the state.

Example:
    >>> ready_for_query("I")
    b'Z\\x00\\x00\\x00\\x05I'
    >>> decode(b"Q", b"SELECT 1\\x00")
    Query(sql='SELECT 1')
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

PROTOCOL_3 = 196608  # 3.0
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
MAX_MESSAGE_BYTES = 1 << 20  # a frontend message larger than this is refused (a query's text is far smaller)


class ProtocolViolation(Exception):
    """A frame that is not a well-formed message of the protocol (SQLSTATE 08P01)."""


# Frontend messages -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Startup:
    version: int
    parameters: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SSLRequest:
    pass


@dataclass(frozen=True, slots=True)
class GSSENCRequest:
    pass


@dataclass(frozen=True, slots=True)
class CancelRequest:
    process_id: int
    secret: int


@dataclass(frozen=True, slots=True)
class Password:
    password: str


@dataclass(frozen=True, slots=True)
class Query:
    sql: str


@dataclass(frozen=True, slots=True)
class Parse:
    statement: str
    sql: str
    parameter_types: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Bind:
    portal: str
    statement: str
    parameter_formats: tuple[int, ...]
    parameters: tuple[bytes | None, ...]
    result_formats: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Describe:
    kind: str  # "S" a prepared statement, "P" a portal
    name: str


@dataclass(frozen=True, slots=True)
class Execute:
    portal: str
    max_rows: int


@dataclass(frozen=True, slots=True)
class Close:
    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class Sync:
    pass


@dataclass(frozen=True, slots=True)
class Flush:
    pass


@dataclass(frozen=True, slots=True)
class Terminate:
    pass


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A message this server does not take (CopyData, FunctionCall, ...), by its tag."""

    tag: str


Message = (Startup | SSLRequest | GSSENCRequest | CancelRequest | Password | Query | Parse | Bind | Describe
           | Execute | Close | Sync | Flush | Terminate | Unsupported)


class _Reader:
    def __init__(self, body: bytes) -> None:
        self.body, self.at = body, 0

    def int16(self) -> int:
        return int(self._unpack("!h", 2))

    def int32(self) -> int:
        return int(self._unpack("!i", 4))

    def _unpack(self, fmt: str, size: int) -> object:
        if self.at + size > len(self.body):
            raise ProtocolViolation("message too short")
        (value,) = struct.unpack_from(fmt, self.body, self.at)
        self.at += size
        return value

    def cstring(self) -> str:
        end = self.body.find(b"\x00", self.at)
        if end < 0:
            raise ProtocolViolation("a string without its terminating zero byte")
        text = self.body[self.at:end]
        self.at = end + 1
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ProtocolViolation("text that is not UTF-8") from err

    def take(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.body):
            raise ProtocolViolation("message too short")
        chunk = self.body[self.at:self.at + size]
        self.at += size
        return chunk

    def int16s(self) -> tuple[int, ...]:
        return tuple(self.int16() for _ in range(self._count()))

    def _count(self) -> int:
        count = self.int16()
        if count < 0:
            raise ProtocolViolation("a negative count")
        return count


def frame_length(header: bytes) -> int:
    """The body length of a frame from its 4 length bytes (which count themselves), checked.

    Example:
        >>> frame_length(b"\\x00\\x00\\x00\\x08")
        4
    """
    (length,) = struct.unpack("!i", header)
    if length < 4 or length - 4 > MAX_MESSAGE_BYTES:
        raise ProtocolViolation(f"invalid message length {length}")
    return length - 4


def decode_startup(body: bytes) -> Startup | SSLRequest | GSSENCRequest | CancelRequest:
    """The first packet of a connection (no tag byte), its length already taken off.

    Example:
        >>> decode_startup(b"\\x00\\x03\\x00\\x00user\\x00ana\\x00database\\x00demo\\x00\\x00")
        Startup(version=196608, parameters={'user': 'ana', 'database': 'demo'})
        >>> decode_startup(struct.pack("!i", SSL_REQUEST))
        SSLRequest()
    """
    reader = _Reader(body)
    code = reader.int32()
    if code == SSL_REQUEST:
        return SSLRequest()
    if code == GSSENC_REQUEST:
        return GSSENCRequest()
    if code == CANCEL_REQUEST:
        return CancelRequest(reader.int32(), reader.int32())
    parameters: dict[str, str] = {}
    while reader.at < len(body) and body[reader.at] != 0:
        name = reader.cstring()
        parameters[name] = reader.cstring()
    return Startup(code, parameters)


def decode(tag: bytes, body: bytes) -> Message:
    """One frontend message after start-up, from its tag and body."""
    reader = _Reader(body)
    match tag:
        case b"Q":
            return Query(reader.cstring())
        case b"p":
            return Password(reader.cstring())
        case b"P":
            statement, sql = reader.cstring(), reader.cstring()
            types = tuple(reader.int32() for _ in range(reader._count()))
            return Parse(statement, sql, types)
        case b"B":
            portal, statement = reader.cstring(), reader.cstring()
            formats = reader.int16s()
            parameters: list[bytes | None] = []
            for _ in range(reader._count()):
                size = reader.int32()
                parameters.append(None if size == -1 else reader.take(size))
            return Bind(portal, statement, formats, tuple(parameters), reader.int16s())
        case b"D" | b"C":
            kind = reader.take(1).decode("ascii", "replace")
            if kind not in ("S", "P"):
                raise ProtocolViolation(f"invalid {'Describe' if tag == b'D' else 'Close'} kind {kind!r}")
            name = reader.cstring()
            return Describe(kind, name) if tag == b"D" else Close(kind, name)
        case b"E":
            return Execute(reader.cstring(), reader.int32())
        case b"S":
            return Sync()
        case b"H":
            return Flush()
        case b"X":
            return Terminate()
    return Unsupported(tag.decode("latin-1"))


# Backend messages --------------------------------------------------------------------------------------------


def _message(tag: bytes, body: bytes = b"") -> bytes:
    return tag + struct.pack("!i", len(body) + 4) + body


def _cstring(text: str) -> bytes:
    return text.replace("\x00", "").encode("utf-8") + b"\x00"


def authentication_ok() -> bytes:
    """
    Example:
        >>> authentication_ok()
        b'R\\x00\\x00\\x00\\x08\\x00\\x00\\x00\\x00'
    """
    return _message(b"R", struct.pack("!i", 0))


def authentication_cleartext() -> bytes:
    return _message(b"R", struct.pack("!i", 3))


def parameter_status(name: str, value: str) -> bytes:
    return _message(b"S", _cstring(name) + _cstring(value))


def backend_key_data(process_id: int, secret: int) -> bytes:
    return _message(b"K", struct.pack("!ii", process_id, secret))


def ready_for_query(status: str = "I") -> bytes:
    return _message(b"Z", status.encode("ascii"))


@dataclass(frozen=True, slots=True)
class Column:
    """A RowDescription field: its name, type OID and type size (-1: variable)."""

    name: str
    type_oid: int
    type_size: int = -1


def row_description(columns: Sequence[Column], formats: Sequence[int] = ()) -> bytes:
    """Fields with no table (0, 0), typmod -1 and the format each column is sent in (0 text, 1 binary).

    Example:
        >>> row_description([Column("n", 20, 8)])
        b'T\\x00\\x00\\x00\\x1a\\x00\\x01n\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x14\\x00\\x08\\xff\\xff\\xff\\xff\\x00\\x00'
    """
    body = struct.pack("!h", len(columns))
    for i, column in enumerate(columns):
        body += _cstring(column.name) + struct.pack("!ihihih", 0, 0, column.type_oid, column.type_size, -1,
                                                    result_format(formats, i))
    return _message(b"T", body)


def result_format(formats: Sequence[int], index: int) -> int:
    """The format of column `index` under Bind's result format codes: none → text, one → all, else each."""
    if not formats:
        return 0
    return formats[0] if len(formats) == 1 else formats[index] if index < len(formats) else 0


def data_row(values: Sequence[bytes | None]) -> bytes:
    """
    Example:
        >>> data_row([b"7", None])
        b'D\\x00\\x00\\x00\\x0f\\x00\\x02\\x00\\x00\\x00\\x017\\xff\\xff\\xff\\xff'
    """
    body = struct.pack("!h", len(values))
    for value in values:
        body += struct.pack("!i", -1) if value is None else struct.pack("!i", len(value)) + value
    return _message(b"D", body)


def command_complete(tag: str) -> bytes:
    return _message(b"C", _cstring(tag))


def empty_query_response() -> bytes:
    return _message(b"I")


def parse_complete() -> bytes:
    return _message(b"1")


def bind_complete() -> bytes:
    return _message(b"2")


def close_complete() -> bytes:
    return _message(b"3")


def no_data() -> bytes:
    return _message(b"n")


def portal_suspended() -> bytes:
    return _message(b"s")


def parameter_description(type_oids: Sequence[int]) -> bytes:
    return _message(b"t", struct.pack("!h", len(type_oids)) + b"".join(struct.pack("!i", t) for t in type_oids))


def _fields(severity: str, sqlstate: str, message: str, detail: str | None, hint: str | None) -> bytes:
    body = b"S" + _cstring(severity) + b"V" + _cstring(severity) + b"C" + _cstring(sqlstate) + b"M" + _cstring(message)
    if detail:
        body += b"D" + _cstring(detail)
    if hint:
        body += b"H" + _cstring(hint)
    return body + b"\x00"


def error_response(sqlstate: str, message: str, detail: str | None = None, hint: str | None = None,
                   severity: str = "ERROR") -> bytes:
    """
    Example:
        >>> error_response("42601", "bad")
        b'E\\x00\\x00\\x00\\x1fSERROR\\x00VERROR\\x00C42601\\x00Mbad\\x00\\x00'
    """
    return _message(b"E", _fields(severity, sqlstate, message, detail, hint))


def notice_response(message: str, detail: str | None = None, sqlstate: str = "00000") -> bytes:
    return _message(b"N", _fields("NOTICE", sqlstate, message, detail, None))


def ssl_refused() -> bytes:
    """The one-byte answer to an SSLRequest (or GSSENCRequest) when not encrypting: 'N'."""
    return b"N"


def ssl_accepted() -> bytes:
    return b"S"
