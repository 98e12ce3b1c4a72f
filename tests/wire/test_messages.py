"""The protocol codec (proxy/wire/messages.py) byte for byte, against frames as PostgreSQL 3.0 defines them."""

from __future__ import annotations

import struct

import pytest

from proxy.wire import messages as m
from proxy.wire import pgtypes


def frame(tag: bytes, body: bytes) -> tuple[bytes, bytes]:
    """(tag, body) as the server reads them from a frame it receives whole."""
    data = tag + struct.pack("!i", len(body) + 4) + body
    return data[:1], data[5:5 + m.frame_length(data[1:5])]


def test_startup_packet() -> None:
    body = struct.pack("!i", 196608) + b"user\x00analyst\x00database\x00demo\x00application_name\x00psql\x00\x00"
    assert m.decode_startup(body) == m.Startup(196608, {"user": "analyst", "database": "demo",
                                                        "application_name": "psql"})


@pytest.mark.parametrize(("code", "expected"), [
    (80877103, m.SSLRequest()), (80877104, m.GSSENCRequest()),
])
def test_encryption_requests(code: int, expected: m.Message) -> None:
    assert m.decode_startup(struct.pack("!i", code)) == expected


def test_cancel_request() -> None:
    assert m.decode_startup(struct.pack("!iii", 80877102, 7, 9)) == m.CancelRequest(7, 9)


def test_frontend_messages() -> None:
    assert m.decode(*frame(b"Q", b"SELECT 1\x00")) == m.Query("SELECT 1")
    assert m.decode(*frame(b"p", b"secret\x00")) == m.Password("secret")
    parse = b"s1\x00SELECT $1\x00" + struct.pack("!hi", 1, 20)
    assert m.decode(*frame(b"P", parse)) == m.Parse("s1", "SELECT $1", (20,))
    bind = (b"p1\x00s1\x00" + struct.pack("!hh", 1, 0) + struct.pack("!h", 2) + struct.pack("!i", 2) + b"42"
            + struct.pack("!i", -1) + struct.pack("!hh", 1, 1))
    assert m.decode(*frame(b"B", bind)) == m.Bind("p1", "s1", (0,), (b"42", None), (1,))
    assert m.decode(*frame(b"D", b"Ss1\x00")) == m.Describe("S", "s1")
    assert m.decode(*frame(b"C", b"P\x00")) == m.Close("P", "")
    assert m.decode(*frame(b"E", b"\x00" + struct.pack("!i", 0))) == m.Execute("", 0)
    assert m.decode(b"S", b"") == m.Sync()
    assert m.decode(b"H", b"") == m.Flush()
    assert m.decode(b"X", b"") == m.Terminate()
    assert m.decode(b"F", b"whatever") == m.Unsupported("F")


@pytest.mark.parametrize(("tag", "body"), [
    (b"Q", b"SELECT 1"),  # no terminating zero
    (b"D", b"Xname\x00"),  # neither S nor P
    (b"B", b"p\x00s\x00" + struct.pack("!h", 5)),  # five formats announced, none sent
    (b"Q", b"\xff\xfe\x00"),  # not UTF-8
])
def test_malformed_messages_are_protocol_violations(tag: bytes, body: bytes) -> None:
    with pytest.raises(m.ProtocolViolation):
        m.decode(tag, body)


@pytest.mark.parametrize("length", [0, 3, m.MAX_MESSAGE_BYTES + 5])
def test_frame_lengths_out_of_range_are_refused(length: int) -> None:
    with pytest.raises(m.ProtocolViolation):
        m.frame_length(struct.pack("!i", length))


def test_backend_messages_exact_bytes() -> None:
    assert m.authentication_ok() == b"R\x00\x00\x00\x08\x00\x00\x00\x00"
    assert m.authentication_cleartext() == b"R\x00\x00\x00\x08\x00\x00\x00\x03"
    assert m.parameter_status("a", "b") == b"S\x00\x00\x00\x08a\x00b\x00"
    assert m.backend_key_data(1, 2) == b"K\x00\x00\x00\x0c\x00\x00\x00\x01\x00\x00\x00\x02"
    assert m.ready_for_query("T") == b"Z\x00\x00\x00\x05T"
    assert m.command_complete("SELECT 2") == b"C\x00\x00\x00\x0dSELECT 2\x00"
    assert m.empty_query_response() == b"I\x00\x00\x00\x04"
    assert (m.parse_complete(), m.bind_complete(), m.close_complete()) == (
        b"1\x00\x00\x00\x04", b"2\x00\x00\x00\x04", b"3\x00\x00\x00\x04")
    assert m.no_data() == b"n\x00\x00\x00\x04"
    assert m.portal_suspended() == b"s\x00\x00\x00\x04"
    assert m.parameter_description([20, 25]) == b"t\x00\x00\x00\x0e\x00\x02\x00\x00\x00\x14\x00\x00\x00\x19"
    assert m.ssl_refused() == b"N" and m.ssl_accepted() == b"S"


def test_row_description_and_data_row() -> None:
    columns = [m.Column("region", pgtypes.TEXT), m.Column("n", pgtypes.INT8, 8)]
    expected = (b"T" + struct.pack("!i", 4 + 2 + (7 + 18) + (2 + 18)) + struct.pack("!h", 2)
                + b"region\x00" + struct.pack("!ihihih", 0, 0, 25, -1, -1, 0)
                + b"n\x00" + struct.pack("!ihihih", 0, 0, 20, 8, -1, 1))
    assert m.row_description(columns, (0, 1)) == expected
    assert m.data_row([b"north", None]) == (b"D" + struct.pack("!ih", 4 + 2 + 4 + 5 + 4, 2)
                                            + struct.pack("!i", 5) + b"north" + struct.pack("!i", -1))


def test_error_and_notice_fields() -> None:
    error = m.error_response("53400", "budget_exceeded: no", "code=budget_exceeded", "SHOW dp.budget")
    fields = (b"SERROR\x00VERROR\x00C53400\x00Mbudget_exceeded: no\x00Dcode=budget_exceeded\x00HSHOW dp.budget\x00"
              b"\x00")
    assert len(fields) == 81
    assert error == b"E" + struct.pack("!i", 85) + fields
    assert m.notice_response("dp: x") == b"N\x00\x00\x00\x23SNOTICE\x00VNOTICE\x00C00000\x00Mdp: x\x00\x00"


@pytest.mark.parametrize(("formats", "index", "expected"), [((), 3, 0), ((1,), 3, 1), ((0, 1), 1, 1), ((0, 1), 5, 0)])
def test_result_formats(formats: tuple[int, ...], index: int, expected: int) -> None:
    assert m.result_format(formats, index) == expected


@pytest.mark.parametrize(("value", "oid", "text", "binary"), [
    (7, pgtypes.INT8, b"7", struct.pack("!q", 7)),
    (7, pgtypes.INT4, b"7", struct.pack("!i", 7)),
    (2.5, pgtypes.FLOAT8, b"2.5", struct.pack("!d", 2.5)),
    (True, pgtypes.BOOL, b"t", b"\x01"),
    ("north", pgtypes.TEXT, b"north", b"north"),
    ("2024-01-02", pgtypes.DATE, b"2024-01-02", struct.pack("!i", 8767)),
])
def test_values_in_text_and_binary(value: object, oid: int, text: bytes, binary: bytes) -> None:
    assert pgtypes.encode(value, oid, 0) == text
    assert pgtypes.encode(value, oid, 1) == binary
    if oid != pgtypes.DATE:
        assert pgtypes.decode(binary, oid, 1) == value
