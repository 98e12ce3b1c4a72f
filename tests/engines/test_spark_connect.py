"""Spark Connect (`sc://`): a generated query answered through a Connect server, the same rows as DuckDB.

pyspark 4 starts a local Connect server itself (`SparkSession.builder.remote("local[2]")`, the connect jar is
in the pyspark package), offline. The client needs pyspark[connect]'s Python packages (grpcio, grpcio-status,
googleapis-common-protos, pandas), which the `spark` extra does not install: without them this test is
skipped. The server runs in a child process, one Spark per process as everywhere in the Spark tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("grpc")  # pyspark[connect]'s client
pytest.importorskip("google.rpc")

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

ROOT = Path(__file__).resolve().parents[2]
# The child: a local Connect server on port 15002 (pyspark starts it for remote("local[2]")), then the
# engine on `sc://localhost:15002` exactly as a policy names it: views, settings checked, a tagged query.
CHILD = """
import json, sys
from pyspark.sql import SparkSession
SparkSession.builder.remote("local[2]").getOrCreate()
from proxy.engines.spark_config import SparkSource, SparkTable
from proxy.engines.spark_engine import SparkEngine
source = SparkSource("sc://localhost:15002", (SparkTable("t", "parquet", sys.argv[1]),))
engine = SparkEngine("c", source, timeout_s=600)
rows = engine.run(sys.argv[2]).rows
engine.ready(600)
print(json.dumps([list(r) for r in rows]))
"""


def test_a_generated_query_runs_over_spark_connect(tmp_path: Path) -> None:
    from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    from proxy.query.planner import plan
    from proxy.query.rewrite.render import Target, render

    table = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("s", "VARCHAR", groupable=True),
                                     ColumnSpec("x", "INTEGER", bounds=(0, 10))), max_groups=2, max_rows=2)
    path = tmp_path / "t.parquet"
    with duckdb.connect() as con:
        con.execute("CREATE TABLE t AS SELECT range % 7 AS uid, ['a', 'b', 'c'][range % 3 + 1] AS s, "
                    "(range % 13)::INTEGER AS x FROM range(200)")
        con.execute(f"COPY t TO '{path}' (FORMAT parquet)")
        planned = plan("SELECT s, COUNT(*), SUM(x) FROM t GROUP BY s", Catalog((table,)), epsilon=1.0, delta=1e-6,
                       mechanism="laplace", salt=11)
        assert planned.tree is not None
        on_duckdb = sorted(list(r) for r in con.execute(planned.sql).fetchall())
    sql = render(planned.tree, Target("spark", (("t", "__dp_c__t"),)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), sql], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    on_connect = sorted(json.loads(done.stdout.strip().splitlines()[-1]))
    assert on_connect == on_duckdb and on_duckdb
