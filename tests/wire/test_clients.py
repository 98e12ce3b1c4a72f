"""Real PostgreSQL clients against a real `dpproxy serve --pg-port` (a subprocess on the demo policy):
psql, psycopg (simple and extended protocol, server-side prepared statements), asyncpg (which always
prepares), SQLAlchemy with pandas. Connecting, listing and describing charge nothing; an answer arrives with
its NOTICE and is the HTTP answer of the same request; refusals carry a SQLSTATE and the stable code."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from accountant.ledger.admit import NEXT_STEP
from proxy.cli.demo import DemoFiles
from tests.support.live import Server, StartFresh, free_port, policy_copy, spend

REGIONS = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"
TIMEOUT_S = 60


@dataclass
class Wire:
    server: Server
    port: int
    key: str
    admin_key: str

    def dsn(self, key: str | None = None, database: str = "demo", user: str = "analyst") -> str:
        return (f"postgresql://{user}:{key or self.key}@127.0.0.1:{self.port}/{database}?sslmode=disable"
                f"&connect_timeout=20")

    def http(self) -> httpx.Client:
        return self.server.client(self.key)

    def charges(self) -> int:
        """How many charges the ledger holds for the analyst (GET /v1/ledger, as an admin)."""
        with self.server.client(self.admin_key) as admin:
            response = admin.get("/v1/ledger", params={"analyst": "analyst", "limit": 1})
        assert response.status_code == 200, response.text
        total: int = response.json()["total"]
        return total


def start_wire(server: Server, policy: Path, demo: DemoFiles, settings: dict[str, str] | None = None) -> Wire:
    port = free_port()
    server.settings.update({"DPPROXY_PG_PORT": str(port), "DPPROXY_PG_ALLOW_PLAINTEXT_LOOPBACK": "true",
                            **(settings or {})})
    server.start(policy)
    return Wire(server, port, demo.analyst_key, demo.admin_key)


@pytest.fixture(scope="module")
def wire(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wire]:
    directory = tmp_path_factory.mktemp("wire")
    server = Server(directory / "server.log")
    live = start_wire(server, policy_copy(demo, directory, epsilon=50.0, delta=1e-4), demo)
    try:
        yield live
    finally:
        server.stop()


def connect(wire: Wire, notices: list[str] | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
    conn = psycopg.connect(wire.dsn(), autocommit=True, **kwargs)
    if notices is not None:
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
    return conn


def psql(wire: Wire, *commands: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["psql", "-X", "-h", "127.0.0.1", "-p", str(wire.port), "-U", "analyst", "-d", "demo",
            "--no-password", "-v", "ON_ERROR_STOP=0"]
    for command in commands:
        argv += ["-c", command]
    env = {**os.environ, "PGPASSWORD": key or wire.key, "PGSSLMODE": "disable", "PGCONNECT_TIMEOUT": "20"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT_S, check=False)


# connecting, listing and describing are free -----------------------------------------------------------------


def test_connecting_listing_and_describing_charge_nothing(wire: Wire) -> None:
    before = wire.charges()
    with wire.http() as http:
        spent = spend(http)["epsilon_spent"]
    listed = psql(wire, r"\dt", r"\d visits")
    assert listed.returncode == 0, listed.stderr
    assert "public | visits | table" in listed.stdout and "public | users  | table" in listed.stdout
    assert " amount     | double precision |" in listed.stdout
    with connect(wire) as conn:
        tables = conn.execute("SELECT table_name FROM information_schema.tables ORDER BY 1").fetchall()
        assert tables == [("users",), ("visits",)]
        conn.pgconn.prepare(b"described", REGIONS.encode())
        described = conn.pgconn.describe_prepared(b"described")  # Describe: the plan's columns, no data
        assert [described.fname(i) for i in range(described.nfields)] == [b"region", b"n"]
        assert [described.ftype(i) for i in range(described.nfields)] == [25, 20]  # text, bigint

    async def asyncpg_describe() -> list[tuple[str, str]]:
        import asyncpg

        conn = await asyncpg.connect(wire.dsn(), ssl=False)
        try:
            statement = await conn.prepare("SELECT region, COUNT(*) AS n FROM visits WHERE age > $1 GROUP BY region")
            return [(a.name, a.type.name) for a in statement.get_attributes()]
        finally:
            await conn.close()

    assert asyncio.run(asyncpg_describe()) == [("region", "text"), ("n", "int8")]
    import sqlalchemy as sa

    engine = sa.create_engine(wire.dsn().replace("postgresql://", "postgresql+psycopg://"))
    try:
        inspector = sa.inspect(engine)
        assert sorted(inspector.get_table_names()) == ["users", "visits"]
        assert [c["name"] for c in inspector.get_columns("users")] == ["user_id", "region", "age", "plan"]
        assert inspector.has_table("visits") and not inspector.has_table("nope")
        reflected = sa.MetaData()
        reflected.reflect(engine)  # as Superset does: columns, keys, indexes, comments
        assert sorted(reflected.tables) == ["users", "visits"]
        assert [c.name for c in reflected.tables["visits"].columns][:2] == ["user_id", "region"]
    finally:
        engine.dispose()
    assert wire.charges() == before
    with wire.http() as http:
        assert spend(http)["epsilon_spent"] == spent


# answers --------------------------------------------------------------------------------------------------


def test_psql_gets_an_answer_with_its_notice(wire: Wire) -> None:
    before = wire.charges()
    done = psql(wire, "SELECT region, COUNT(*) AS n FROM visits WHERE age > 40 GROUP BY region",
                "SHOW dp.last_answer")
    assert done.returncode == 0, done.stderr
    assert "NOTICE:  dp: charged epsilon=0.1 delta=0 (charge " in done.stderr
    assert "(5 rows)" in done.stdout and "laplace" in done.stdout  # the answer, then SHOW dp.last_answer
    assert wire.charges() == before + 1


def test_a_wire_answer_is_the_http_answer_of_the_same_request(wire: Wire) -> None:
    first = "SELECT region, COUNT(*) AS n FROM visits WHERE age < 30 GROUP BY region"
    notices: list[str] = []
    with connect(wire, notices) as conn:
        rows = conn.execute(first).fetchall()
    with wire.http() as http:
        response = http.post("/v1/query", json={"sql": first})
    assert response.status_code == 200 and response.headers["X-DP-Repeat"] == "true"  # the wire's release
    assert [tuple(r) for r in response.json()["rows"]] == rows
    assert notices[0].startswith("dp: charged ")
    second = "SELECT category, COUNT(*) AS n FROM visits GROUP BY category"
    with wire.http() as http:
        over_http = http.post("/v1/query", json={"sql": second})
    assert over_http.status_code == 200 and over_http.headers["X-DP-Repeat"] == "false"
    with connect(wire, notices) as conn:
        again = conn.execute(second).fetchall()
    assert again == [tuple(r) for r in over_http.json()["rows"]]
    assert notices[-1].startswith(f"dp: a repeat of charge {over_http.headers['X-DP-Charge-Id']}: nothing charged")


def test_psycopg_binds_parameters_and_prepares_on_the_server(wire: Wire) -> None:
    before = wire.charges()
    notices: list[str] = []
    sql = "SELECT region, COUNT(*) AS n FROM visits WHERE age > %s AND category = %s GROUP BY region"
    with connect(wire, notices) as conn:
        first = conn.execute(sql, (25, "books")).fetchall()
        prepared = [conn.execute(sql, (25, "books"), prepare=True).fetchall() for _ in range(3)]
        literal = conn.execute(sql.replace("%s", "25", 1).replace("%s", "'books'")).fetchall()
    assert len(first) == 5 and prepared == [first] * 3 and literal == first  # one release, whatever the binding
    assert wire.charges() == before + 1
    assert notices[0].startswith("dp: charged") and all("nothing charged" in n for n in notices[1:])


def test_asyncpg_always_prepares(wire: Wire) -> None:
    async def run() -> tuple[list[tuple[Any, ...]], list[str]]:
        import asyncpg

        logged: list[str] = []
        conn = await asyncpg.connect(wire.dsn(), ssl=False)
        conn.add_log_listener(lambda _, message: logged.append(message.message))
        try:
            records = await conn.fetch("SELECT region, COUNT(*) AS n FROM visits WHERE age > $1 GROUP BY region", 55)
            await asyncio.sleep(0.05)  # log listeners are called soon after
            return [tuple(r) for r in records], logged
        finally:
            await conn.close()

    rows, logged = asyncio.run(run())
    assert len(rows) == 5 and all(isinstance(n, int) for _, n in rows)
    assert any(m.startswith("dp: charged") for m in logged)
    with connect(wire) as conn:  # the same request from psycopg: the same release
        same = conn.execute("SELECT region, COUNT(*) AS n FROM visits WHERE age > 55 GROUP BY region").fetchall()
    assert same == rows


def test_pandas_read_sql_through_sqlalchemy(wire: Wire) -> None:
    import pandas as pd
    import sqlalchemy as sa

    engine = sa.create_engine(wire.dsn().replace("postgresql://", "postgresql+psycopg://"))
    try:
        frame = pd.read_sql("SELECT plan, COUNT(*) AS n FROM users GROUP BY plan", engine)
    finally:
        engine.dispose()
    assert list(frame.columns) == ["plan", "n"] and len(frame) == 4
    with connect(wire) as conn:
        assert conn.execute("SELECT plan, COUNT(*) AS n FROM users GROUP BY plan").fetchall() == [
            tuple(r) for r in frame.itertuples(index=False)]


def test_session_and_statement_privacy_parameters(wire: Wire) -> None:
    notices: list[str] = []
    with connect(wire, notices) as conn:
        conn.execute("SET dp.epsilon = 0.25")
        assert conn.execute("SHOW dp.epsilon").fetchall() == [("0.25",)]
        conn.execute("SELECT COUNT(*) AS n FROM users")
        conn.execute("/* dp: epsilon=0.35 */ SELECT COUNT(*) AS n FROM users WHERE age > 20")
        conn.execute("RESET dp.epsilon")
        budget = conn.execute("SHOW dp.budget").fetchall()
    assert notices[0].startswith("dp: charged epsilon=0.25 ") and notices[1].startswith("dp: charged epsilon=0.35 ")
    ((dataset, accounting, epsilon, *_),) = budget
    assert (dataset, accounting, epsilon) == ("demo", "basic", 50.0)


# refusals ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("sql", "sqlstate", "code"), [
    ("SELECT * FROM visits", "0A000", "unsupported"),  # raw rows are never released
    ("SELECT user_id FROM visits GROUP BY user_id", "42501", "policy"),
    ("SELECT 1; SELECT 2", "0A000", "unsupported"),
    ("COPY visits TO STDOUT", "0A000", "unsupported"),
    ("INSERT INTO visits (user_id) VALUES (1)", "25006", "unsupported"),
    ("DELETE FROM visits", "25006", "unsupported"),
    ("SET dp.epsilom = 0.2", "42704", "invalid_parameter"),
    ("SET dp.epsilon = -1", "22023", "invalid_parameter"),
    ("/* dp: epsilon=50 */ SELECT COUNT(*) AS n FROM visits", "22023", "invalid_parameter"),
    ("SELECT COUNT(* FROM visits", "42601", "sql_syntax"),
])
def test_refusals_carry_sqlstate_and_code_and_charge_nothing(wire: Wire, sql: str, sqlstate: str, code: str) -> None:
    before = wire.charges()
    field = psycopg.pq.DiagnosticField
    with connect(wire) as conn:
        simple = conn.pgconn.exec_(sql.encode())  # one Query message: the simple protocol
        assert simple.status == psycopg.pq.ExecStatus.FATAL_ERROR
        assert simple.error_field(field.SQLSTATE) == sqlstate.encode()
        assert (simple.error_field(field.MESSAGE_PRIMARY) or b"").startswith(f"{code}: ".encode())
        assert b"charged=false" in (simple.error_field(field.MESSAGE_DETAIL) or b"")
        with pytest.raises(psycopg.Error) as refused:  # Parse/Bind/Describe/Execute/Sync: the extended protocol
            conn.execute(sql)
        assert refused.value.sqlstate == sqlstate
        assert str(refused.value.diag.message_primary).startswith(f"{code}: ")
        assert conn.execute("SELECT 1").fetchall() == [(1,)]  # the connection is kept
    assert wire.charges() == before


def test_a_wrong_password_or_dataset_is_refused_and_the_connection_closed(wire: Wire) -> None:
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wire.dsn(key="not-a-key"))
    with pytest.raises(psycopg.OperationalError, match='database "nope" is not a dataset'):
        psycopg.connect(wire.dsn(database="nope"))
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wire.dsn(user="admin"))  # the analyst's key under another analyst's name
    refused = psql(wire, "SELECT 1", key="wrong")
    assert refused.returncode == 2 and "password authentication failed" in refused.stderr


def test_exceeding_the_budget_is_an_error_with_the_stable_code(fresh_server: StartFresh, demo: DemoFiles) -> None:
    port = free_port()
    server = fresh_server(epsilon=0.15, settings={"DPPROXY_PG_PORT": str(port),
                                                  "DPPROXY_PG_ALLOW_PLAINTEXT_LOOPBACK": "true"})
    live = Wire(server, port, demo.analyst_key, demo.admin_key)
    with connect(live) as conn:
        conn.execute(REGIONS)
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("SELECT plan, COUNT(*) AS n FROM users GROUP BY plan")
        assert refused.value.sqlstate == "53400"
        assert str(refused.value.diag.message_primary).startswith("budget_exceeded: ")
        assert "charged=false" in str(refused.value.diag.message_detail)
        assert refused.value.diag.message_hint == NEXT_STEP  # the HTTP refusal's own hint: what to do next
        ((_, _, total, _, spent, _, remaining, _),) = conn.execute("SHOW dp.budget").fetchall()
    assert (total, round(spent, 9), round(remaining, 9)) == (0.15, 0.1, 0.05)
    assert live.charges() == 1


# JDBC (Metabase, DBeaver, Tableau) ----------------------------------------------------------------------------

JDBC_JAR = Path("/usr/share/java/postgresql.jar")  # Debian's libpostgresql-jdbc-java


@pytest.mark.skipif(not JDBC_JAR.exists() or shutil.which("javac") is None,
                    reason="pgjdbc or a JDK (java runs the probe from its source) is not installed")
def test_jdbc_lists_tables_and_columns_and_gets_answers(wire: Wire) -> None:
    before = wire.charges()
    probe = Path(__file__).parent / "fixtures" / "WireProbe.java"
    url = f"jdbc:postgresql://127.0.0.1:{wire.port}/demo?sslmode=disable"
    done = subprocess.run(["java", "-cp", str(JDBC_JAR), str(probe), url, "analyst", wire.key],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "product PostgreSQL 15.0" in lines
    assert [line for line in lines if line.startswith("table ")] == ["table users", "table visits"]
    assert "column amount float8" in lines and "column day date" in lines
    assert len([line for line in lines if line.startswith("row ")]) == 5
    assert len([line for line in lines if line.startswith("prepared ")]) == 5
    assert any(line.startswith("notice dp: ") for line in lines)
    assert any(line.startswith("refused 0A000 ERROR: unsupported: ") for line in lines)
    assert wire.charges() <= before + 2  # the two queries, at most (another test may have asked one first)


# TLS --------------------------------------------------------------------------------------------------------


def test_tls_is_required_unless_allowed_for_loopback(fresh_server: StartFresh, demo: DemoFiles,
                                                     tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost"], check=True, capture_output=True, timeout=60)
    port = free_port()
    server = fresh_server(settings={"DPPROXY_PG_PORT": str(port), "DPPROXY_PG_TLS_CERT": str(cert),
                                    "DPPROXY_PG_TLS_KEY": str(key)})
    live = Wire(server, port, demo.analyst_key, demo.admin_key)
    with pytest.raises(psycopg.OperationalError, match="requires TLS"):
        psycopg.connect(live.dsn())  # sslmode=disable
    with psycopg.connect(live.dsn().replace("sslmode=disable", "sslmode=require"), autocommit=True) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("SELECT current_database()").fetchall() == [("demo",)]
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(live.dsn(key="wrong").replace("sslmode=disable", "sslmode=require"))

    async def over_tls() -> list[tuple[Any, ...]]:
        import asyncpg

        conn = await asyncpg.connect(live.dsn().split("?")[0], ssl="require")
        try:
            return [tuple(r) for r in await conn.fetch("SELECT current_schema()")]
        finally:
            await conn.close()

    assert asyncio.run(over_tls()) == [("public",)]


def test_tables_qualified_with_the_listed_schema_are_the_policys(wire: Wire) -> None:
    notices: list[str] = []
    with connect(wire, notices) as conn:  # as BI tools write them: under the schema the catalog lists
        qualified = conn.execute('SELECT "region", COUNT(*) AS n FROM "public"."visits" WHERE age > 70 '
                                 'GROUP BY "region"').fetchall()
        plain = conn.execute("SELECT region, COUNT(*) AS n FROM visits WHERE age > 70 GROUP BY region").fetchall()
    assert qualified == plain and len(plain) == 5
    assert "nothing charged" in notices[1]  # one request, however it is qualified


# audit and metrics ------------------------------------------------------------------------------------------


def test_wire_queries_are_audited_and_counted(wire: Wire) -> None:
    sql = "SELECT region, COUNT(*) AS n FROM visits WHERE duration_s > 60 GROUP BY region"
    with connect(wire) as conn:
        conn.execute(sql)
        conn.execute(sql)  # a repeat
        with pytest.raises(psycopg.Error):
            conn.execute("SELECT * FROM users")
    with wire.server.client(wire.admin_key) as admin:
        entries = admin.get("/v1/audit", params={"analyst": "analyst", "limit": 3}).json()["entries"]
        verified = admin.get("/v1/audit/verify").json()
        metrics = admin.get("/metrics").text
    assert [e["decision"] for e in entries] == ["rejected", "repeat", "answered"]  # newest first
    assert entries[0]["error_code"] == "unsupported" and entries[0]["epsilon"] == 0
    assert entries[1]["charge_id"] == entries[2]["charge_id"] and entries[1]["epsilon"] == 0
    assert "duration_s > 60" in entries[2]["sql"]
    assert verified["ok"] and verified["unaudited_charges"] == []
    assert 'dpproxy_requests_total{code="ok",method="QUERY",route="pg"}' in metrics
    assert 'dpproxy_requests_total{code="unsupported",method="QUERY",route="pg"}' in metrics


# the protocol itself, message by message ----------------------------------------------------------------------


class Raw:
    """A bare protocol-3.0 client on a socket: frames out, (tag, body) frames in."""

    def __init__(self, wire: Wire) -> None:
        import socket
        import struct

        self.struct = struct
        self.sock = socket.create_connection(("127.0.0.1", wire.port), timeout=20)
        params = b"user\x00analyst\x00database\x00demo\x00\x00"
        self.sock.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
        assert self.read()[0] == b"R"  # cleartext password, please
        self.send(b"p", wire.key.encode() + b"\x00")
        self.until(b"Z")

    def send(self, tag: bytes, body: bytes = b"") -> None:
        self.sock.sendall(tag + self.struct.pack("!i", len(body) + 4) + body)

    def read(self) -> tuple[bytes, bytes]:
        header = self._exactly(5)
        return header[:1], self._exactly(self.struct.unpack("!i", header[1:])[0] - 4)

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def until(self, tag: bytes) -> list[tuple[bytes, bytes]]:
        """Frames up to and including the first with `tag`."""
        frames = []
        while True:
            frames.append(self.read())
            if frames[-1][0] == tag:
                return frames

    def close(self) -> None:
        self.sock.close()


def _sqlstate(body: bytes) -> str:
    fields = dict((f[:1], f[1:]) for f in body.split(b"\x00") if f)
    return fields[b"C"].decode()


def test_extended_protocol_message_by_message(wire: Wire) -> None:
    raw = Raw(wire)
    try:
        sql = b"SELECT region, COUNT(*) AS n FROM visits WHERE age > $1 GROUP BY region"
        raw.send(b"P", b"s\x00" + sql + b"\x00" + raw.struct.pack("!h", 0))
        raw.send(b"D", b"Ss\x00")
        raw.send(b"H")  # Flush: what is pending now, before any Sync
        assert [raw.read()[0] for _ in range(3)] == [b"1", b"t", b"T"]  # ParseComplete, ParameterDescription, Row…
        raw.send(b"B", b"p\x00s\x00" + raw.struct.pack("!hh", 0, 1) + raw.struct.pack("!i", 2) + b"44"
                 + raw.struct.pack("!h", 0))
        raw.send(b"E", b"p\x00" + raw.struct.pack("!i", 2))  # at most 2 rows
        raw.send(b"E", b"p\x00" + raw.struct.pack("!i", 0))  # the rest
        raw.send(b"C", b"Pp\x00")
        raw.send(b"S")
        tags = [t for t, _ in raw.until(b"Z")]
        assert tags == [b"2", b"N", b"D", b"D", b"s", b"D", b"D", b"D", b"C", b"3", b"Z"]
        raw.send(b"Q", b"\x00")  # an empty query
        assert [t for t, _ in raw.until(b"Z")] == [b"I", b"Z"]
        for statement, refused_at in ((b"DELETE FROM visits", 0), (b"SELECT * FROM visits", 2)):
            raw.send(b"P", b"\x00" + statement + b"\x00\x00\x00")  # a write is refused at Parse, raw rows
            raw.send(b"B", b"\x00\x00\x00\x00\x00\x00\x00\x00")  # when planned (Execute); then skip to Sync
            raw.send(b"E", b"\x00\x00\x00\x00\x00")
            raw.send(b"S")
            frames = raw.until(b"Z")
            assert [t for t, _ in frames] == [*[b"1", b"2"][:refused_at], b"E", b"Z"]
            assert _sqlstate(frames[refused_at][1]) == ("25006" if refused_at == 0 else "0A000")
        raw.send(b"F", b"\x00\x00\x00\x01")  # FunctionCall: refused, the connection kept
        frames = raw.until(b"Z")
        assert _sqlstate(frames[0][1]) == "0A000"
        raw.send(b"Q", b"SELECT 1\x00")
        assert [t for t, _ in raw.until(b"Z")] == [b"T", b"D", b"C", b"Z"]
        raw.send(b"y", b"")  # no such message: FATAL 08P01 and the connection closed, as PostgreSQL does
        tag, body = raw.read()
        assert tag == b"E" and _sqlstate(body) == "08P01" and b"SFATAL" in body
        with pytest.raises(ConnectionError):
            raw.read()
    finally:
        raw.close()


# the probe sequences of BI tools, replayed ---------------------------------------------------------------------


def _bi_probes() -> dict[str, list[str]]:
    tools: dict[str, list[str]] = {}
    current = None
    for chunk in (Path(__file__).parent / "fixtures" / "bi_probes.sql").read_text().split("\n;;\n"):
        lines = []
        for line in chunk.splitlines():
            if line.startswith("-- tool: "):
                current = line.removeprefix("-- tool: ").strip()
            elif not line.startswith("--"):
                lines.append(line)
        if current is not None and "\n".join(lines).strip():
            tools.setdefault(current, []).append("\n".join(lines).strip())
    return tools


BI_PROBES = _bi_probes()


@pytest.mark.parametrize("tool", sorted(BI_PROBES))
def test_bi_tool_probe_sequences_are_answered_free(wire: Wire, tool: str) -> None:
    before = wire.charges()
    field = psycopg.pq.DiagnosticField
    answers = []
    with connect(wire) as conn:
        for sql in BI_PROBES[tool]:
            result = conn.pgconn.exec_(sql.encode())
            assert result.status in (psycopg.pq.ExecStatus.TUPLES_OK, psycopg.pq.ExecStatus.COMMAND_OK), (
                sql, result.error_field(field.MESSAGE_PRIMARY))
            answers.append([tuple(result.get_value(r, c) for c in range(result.nfields))
                            for r in range(result.ntuples)])
    assert wire.charges() == before
    listed = {row for rows in answers for row in rows}
    if tool == "grafana":  # the table picker, then the column picker of visits
        assert [(b"users",), (b"visits",)] in answers
        assert (b"amount", b"double precision") in listed
    if tool == "metabase":  # the sync's table list
        assert (b"public", b"visits", b"TABLE", None, None) in listed


def test_an_oversized_startup_packet_is_refused(wire: Wire) -> None:
    import socket
    import struct

    with socket.create_connection(("127.0.0.1", wire.port), timeout=20) as sock:
        sock.sendall(struct.pack("!ii", 50_000, 196608))
        data = sock.recv(4096)
    assert data[:1] == b"E" and b"C08P01\x00" in data and b"SFATAL" in data


def test_binary_results_follow_the_description(wire: Wire) -> None:
    sql = "SELECT plan, COUNT(*) AS n, AVG(age) AS a, COUNT(*) / 2 AS half, 7 AS k FROM users GROUP BY plan"
    with connect(wire) as conn:
        text = conn.execute(sql).fetchall()
        binary = conn.cursor(binary=True).execute(sql).fetchall()
        described = conn.cursor().execute(sql).description
    assert binary == text and len(text) == 4
    assert [(d.name, d.type_code) for d in described or ()] == [("plan", 25), ("n", 20), ("a", 701), ("half", 701),
                                                                 ("k", 701)]
    assert all(isinstance(n, int) and isinstance(a, float | None) and isinstance(h, float) and k == 7
               for _, n, a, h, k in text), text  # AVG of a public group with no row released: NULL
    with connect(wire) as conn:  # the simple protocol (no Describe) types the columns alike
        simple = conn.pgconn.exec_(sql.encode())
        assert [simple.ftype(i) for i in range(simple.nfields)] == [25, 20, 701, 701, 701]


def test_a_refused_wire_query_is_on_the_dashboard_and_in_the_access_log(wire: Wire) -> None:
    with connect(wire) as conn, pytest.raises(psycopg.Error):
        conn.execute("SELECT user_id FROM users GROUP BY user_id")
    with wire.server.client(wire.admin_key) as admin:
        rejections = admin.get("/dashboard/data").json()["recent_rejections"]
    assert any(r["route"] == "pg" and r["code"] == "policy" and r["analyst"] == "analyst" for r in rejections)
    lines = [line for line in wire.server.log.read_text().splitlines() if '"route": "pg"' in line]
    assert any('"code": "policy"' in line and '"method": "QUERY"' in line for line in lines)


def test_explain_shows_the_charge_and_the_rewritten_sql_free(wire: Wire) -> None:
    before = wire.charges()
    with connect(wire) as conn:
        plan = [line for (line,) in conn.execute(
            "EXPLAIN SELECT region, COUNT(*) AS n FROM visits WHERE age > %s GROUP BY region", (61,)).fetchall()]
        simple = conn.pgconn.exec_(b"/* dp: epsilon=0.3 */ EXPLAIN SELECT COUNT(*) AS n FROM users")
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("EXPLAIN ANALYZE SELECT COUNT(*) AS n FROM users")
    assert plan[0].startswith("dp charge: epsilon=0.1 ") and plan[1] == "rewritten SQL:"
    assert any("61" in line for line in plan[2:])
    assert (simple.get_value(0, 0) or b"").startswith(b"dp charge: epsilon=0.3 ")
    assert refused.value.sqlstate == "0A000"
    assert wire.charges() == before


def test_connections_beyond_the_maximum_are_refused(fresh_server: StartFresh, demo: DemoFiles) -> None:
    port = free_port()
    server = fresh_server(settings={"DPPROXY_PG_PORT": str(port), "DPPROXY_PG_ALLOW_PLAINTEXT_LOOPBACK": "true",
                                    "DPPROXY_PG_MAX_CONNECTIONS": "1"})
    live = Wire(server, port, demo.analyst_key, demo.admin_key)
    with connect(live) as first:
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            psycopg.connect(live.dsn())
        assert first.execute("SELECT 1").fetchall() == [(1,)]
    for _ in range(100):  # the first one closed: room again, once the server has seen it go
        try:
            with connect(live) as again:
                assert again.execute("SELECT 1").fetchall() == [(1,)]
            break
        except psycopg.OperationalError:
            time.sleep(0.05)
    else:
        raise AssertionError("no room for a connection after the first closed")
