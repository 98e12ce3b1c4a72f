"""The policy's engine choice: `engine = "spark"` with its master and a source per declared table, every
mistake reported with its location; the default install (no pyspark) reads such a policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.engines.spark_config import SparkTable
from proxy.policy.load import load_policy, policy_problems

ANALYST = "0123456789abcdef" * 4


def _policy(tmp_path: Path, dataset: str, spark: str, *, extra: str = "") -> Path:
    (tmp_path / "visits").mkdir(exist_ok=True)
    text = f"""
ledger = "ledger.sqlite"

[datasets.big]
{dataset}
[datasets.big.spark]
{spark}
[datasets.big.tables.visits]
privacy_unit = "user_id"
max_groups = 2
max_rows = 5

[datasets.big.tables.visits.columns]
user_id = {{ type = "BIGINT" }}
amount = {{ type = "DOUBLE", bounds = [0.0, 10.0] }}
{extra}
[analysts.a]
role = "analyst"
key_sha256 = "{ANALYST}"
budgets = {{ big = {{ epsilon = 1.0, delta = 1e-6 }} }}
"""
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return path


GOOD_SPARK = 'master = "local[2]"\ntables = { visits = { parquet = "visits" } }\n'


def test_a_spark_dataset_reads_its_master_and_sources(tmp_path: Path) -> None:
    policy = load_policy(_policy(tmp_path, 'engine = "spark"', GOOD_SPARK))
    dataset = policy.dataset("big")
    assert dataset is not None and dataset.engine == "spark" and dataset.spark is not None
    assert dataset.spark.master == "local[2]"
    assert dataset.spark.tables == (SparkTable("visits", "parquet", str((tmp_path / "visits").resolve())),)
    assert dataset.catalog.databases == ("big",)


@pytest.mark.parametrize("master", ["local[1]", "local[*]", "spark://m1:7077", "spark://m1:7077,m2:7077",
                                    "sc://connect.example:15002", "sc://h"])
def test_every_kind_of_master_is_accepted(tmp_path: Path, master: str) -> None:
    spark = f'master = "{master}"\ntables = {{ visits = {{ table = "warehouse.visits" }} }}\n'
    assert policy_problems(_policy(tmp_path, 'engine = "spark"', spark)) == ()


@pytest.mark.parametrize(("dataset", "spark", "extra", "expected"), [
    ('engine = "spark"', 'master = "yarn"\ntables = { visits = { parquet = "visits" } }',
     "", "datasets.big.spark.master: must be local[N], spark://host:port or sc://host:port, got 'yarn'"),
    ('engine = "spark"', 'master = "local[2]"\ntables = { visits = { parquet = "missing" } }', "",
     "datasets.big.spark.tables.visits.parquet: "),
    ('engine = "spark"', 'master = "local[2]"\ntables = { visits = { table = "x; DROP TABLE y" } }', "",
     "datasets.big.spark.tables.visits.table: must be [catalog.][db.]table of plain names"),
    ('engine = "spark"', 'master = "local[2]"\ntables = { visits = { csv = "visits" } }', "",
     'datasets.big.spark.tables.visits: must be { parquet = "path" } or { table = "[catalog.][db.]table" }'),
    ('engine = "spark"', 'master = "local[2]"\ntables = { visits = { parquet = "visits" }, users = '
     '{ parquet = "visits" } }', "", "datasets.big.spark.tables.users: is not a declared table"),
    ('engine = "spark"\nbounding = "store"', 'master = "local[2]"\ntables = { visits = { table = "db.visits" } }',
     "", "datasets.big.spark.tables.visits: the bounding store on Spark needs a local Parquet source"),
    ('engine = "spark"\nbounding = "store"', 'master = "local[2]"\ntables = { visits = { parquet = "s3a://b/v" } }',
     "", "datasets.big.spark.tables.visits: the bounding store on Spark needs a local Parquet source"),
    ('engine = "spark"\npath = "x.duckdb"', GOOD_SPARK, "", "datasets.big.path: a Spark dataset has no DuckDB"),
    ('engine = "hive"', GOOD_SPARK, "", "datasets.big.engine: must be one of duckdb, spark, got 'hive'"),
    ('path = "x.duckdb"', GOOD_SPARK, "", 'datasets.big.spark: is read only with engine = "spark"'),
    ('engine = "spark"', 'master = "local[2]"\ntables = { visits = { parquet = "visits" } }\nconf = 1', "",
     "datasets.big.spark.conf: unknown key; expected master or tables"),
])
def test_spark_mistakes_are_reported_where_they_are(
    tmp_path: Path, dataset: str, spark: str, extra: str, expected: str
) -> None:
    problems = policy_problems(_policy(tmp_path, dataset, spark, extra=extra))
    assert any(p.startswith(expected) for p in problems), problems


def test_a_spark_dataset_on_local_parquet_may_use_the_bounding_store(tmp_path: Path) -> None:
    dataset = load_policy(_policy(tmp_path, 'engine = "spark"\nbounding = "store"', GOOD_SPARK)).dataset("big")
    assert dataset is not None and dataset.bounding == "store"


def test_a_spark_dataset_is_bounded_by_its_store_by_default_only_on_local_parquet_in_process(tmp_path: Path) -> None:
    def bounding(spark: str) -> str:
        dataset = load_policy(_policy(tmp_path, 'engine = "spark"', spark)).dataset("big")
        assert dataset is not None
        return dataset.bounding

    assert bounding(GOOD_SPARK) == "store"
    assert bounding(GOOD_SPARK.replace('"local[2]"', '"spark://m:7077"')) == "per_query"
    assert bounding('master = "local[2]"\ntables = { visits = { table = "db.visits" } }') == "per_query"


def test_a_declared_table_without_a_source_is_reported(tmp_path: Path) -> None:
    extra = ('[datasets.big.tables.users]\nprivacy_unit = "user_id"\n[datasets.big.tables.users.columns]\n'
             'user_id = { type = "BIGINT" }\n')
    problems = policy_problems(_policy(tmp_path, 'engine = "spark"', GOOD_SPARK, extra=extra))
    assert "datasets.big.spark.tables: declared table users has no source" in problems


def test_spark_datasets_share_one_master(tmp_path: Path) -> None:
    path = _policy(tmp_path, 'engine = "spark"', GOOD_SPARK)
    text = path.read_text().replace("[analysts.a]", """
[datasets.other]
engine = "spark"
[datasets.other.spark]
master = "local[1]"
tables = { visits = { parquet = "visits" } }
[datasets.other.tables.visits]
privacy_unit = "user_id"
[datasets.other.tables.visits.columns]
user_id = { type = "BIGINT" }

[analysts.a]""")
    path.write_text(text)
    problems = policy_problems(path)
    assert "datasets: all Spark datasets of one policy must use one master, got local[1], local[2]" in problems
