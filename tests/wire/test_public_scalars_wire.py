"""A scalar subquery over a public table inside a DP query, through the PostgreSQL protocol (issue #31, item 5;
docs/privacy.md §3.2): psycopg's extended protocol (Parse, Describe, Execute) and the simple one fold the value
alike, answered with one charge; EXPLAIN shows the folded literal, free; a subquery with more than one row is
refused with its SQLSTATE, free, on both protocols."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from proxy.cli.demo import build_demo
from tests.support import departments
from tests.support.live import Server, policy_copy
from tests.wire.test_clients import Wire, connect, start_wire

SQL = ("SELECT region, COUNT(*) AS n FROM visits WHERE category = (SELECT MIN(category) FROM departments) "
       "GROUP BY region")


@pytest.fixture(scope="module")
def wire(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wire]:
    demo = build_demo(tmp_path_factory.mktemp("scalar-demo"), users=60, rows=600)
    departments.create(demo.database)
    directory = tmp_path_factory.mktemp("scalar-wire")
    policy = policy_copy(demo, directory, epsilon=50.0, delta=1e-4)
    policy.write_text(departments.declared(policy.read_text()))
    server = Server(directory / "server.log")
    live = start_wire(server, policy, demo)
    try:
        yield live
    finally:
        server.stop()


def test_both_protocols_fold_the_value_and_charge_once(wire: Wire) -> None:
    before = wire.charges()
    with connect(wire) as conn:
        extended = conn.execute(SQL).fetchall()  # Parse, Bind, Describe, Execute: the Describe plans it too
        simple = conn.pgconn.exec_(SQL.encode())
        assert simple.status == psycopg.pq.ExecStatus.TUPLES_OK
        plan = [line for (line,) in conn.execute(f"EXPLAIN {SQL}").fetchall()]
    assert extended and simple.ntuples == len(extended)
    assert wire.charges() == before + 1  # the second is the first's stored release: the same folded query
    assert plan[0].startswith("dp charge: ") and any("'books'" in line for line in plan[2:])


def test_more_than_one_row_is_refused_free(wire: Wire) -> None:
    before = wire.charges()
    sql = "SELECT COUNT(*) AS n FROM visits WHERE category = (SELECT category FROM departments)"
    with connect(wire) as conn:
        simple = conn.pgconn.exec_(sql.encode())
        assert simple.status == psycopg.pq.ExecStatus.FATAL_ERROR
        assert (simple.error_field(psycopg.pq.DiagnosticField.MESSAGE_PRIMARY) or b"").startswith(b"policy: ")
        with pytest.raises(psycopg.Error, match="more than one row"):
            conn.execute(sql)
    assert wire.charges() == before
