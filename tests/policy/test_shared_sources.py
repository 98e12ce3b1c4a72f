"""Two datasets over one file are refused at load (issue #26, item 9): each had its own budgets and dataset
total, so ε = 2 was spent on the same people under two totals of 1, and `check-policy` said ok. However the
file is spelled (relative, absolute, `./x`, a symlink, a hard link), and for Spark the same Parquet file or
directory (or one inside another) or the same catalog table. It also ends issue #31's start-up crash: a
`per_query` dataset and another over the same DuckDB file made `serve` exit while `check-policy` said ok."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.policy.load import PolicyFileError, load_policy, policy_problems
from tests.support.live import free_port

REPO = Path(__file__).resolve().parents[2]
ANALYST = "0123456789abcdef" * 4


def _dataset(name: str, source: str) -> str:
    return f"""
[datasets.{name}]
epsilon = 0.5
budget = {{ epsilon = 1.0, delta = 1e-6 }}
{source}

[datasets.{name}.tables.visits]
privacy_unit = "user_id"
columns.user_id = {{ type = "BIGINT" }}
"""


def _policy(directory: Path, *sources: tuple[str, str]) -> Path:
    text = 'ledger = "ledger.sqlite"\n' + "".join(_dataset(name, source) for name, source in sources)
    budgets = ", ".join(f"{name} = {{ epsilon = 1.0, delta = 1e-6 }}" for name, _ in sources)
    text += f'\n[analysts.ana]\nrole = "analyst"\nkey_sha256 = "{ANALYST}"\nbudgets = {{ {budgets} }}\n'
    path = directory / "policy.toml"
    path.write_text(text)
    return path


@pytest.fixture
def data(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "people.duckdb").touch()
    (tmp_path / "other.duckdb").touch()
    return tmp_path


def _spellings(directory: Path) -> list[str]:
    os.symlink(directory / "data" / "people.duckdb", directory / "alias.duckdb")
    os.link(directory / "data" / "people.duckdb", directory / "hard.duckdb")
    return ["data/people.duckdb", "./data/people.duckdb", "data/../data/people.duckdb",
            str(directory / "data" / "people.duckdb"), "alias.duckdb", "hard.duckdb"]


def test_two_spellings_of_one_duckdb_file_are_refused_naming_both_datasets(data: Path) -> None:
    for spelling in _spellings(data):
        policy = _policy(data, ("first", 'path = "data/people.duckdb"'), ("second", f'path = "{spelling}"'))
        problems = policy_problems(policy)
        assert len(problems) == 1, (spelling, problems)
        assert problems[0].startswith("datasets.second.path: reads ")
        assert "datasets.first" in problems[0] and "datasets.second" in problems[0]
        assert "two totals" in problems[0]
        with pytest.raises(PolicyFileError):
            load_policy(policy)


def test_datasets_over_different_files_load(data: Path) -> None:
    policy = _policy(data, ("first", 'path = "data/people.duckdb"'), ("second", 'path = "other.duckdb"'))
    assert [d.name for d in load_policy(policy).datasets] == ["first", "second"]


def test_a_per_query_dataset_sharing_a_file_is_refused_before_serve_opens_it(data: Path) -> None:
    """Issue #31: `bounding = "per_query"` before a store dataset on the same file made `serve` exit."""
    policy = _policy(data, ("first", 'path = "data/people.duckdb"\nbounding = "per_query"'),
                     ("second", 'path = "data/people.duckdb"'))
    assert [p.split(":")[0] for p in policy_problems(policy)] == ["datasets.second.path"]


def test_check_policy_refuses_it_and_names_both_datasets(data: Path) -> None:
    policy = _policy(data, ("north", 'path = "data/people.duckdb"'), ("south", 'path = "./data/people.duckdb"'))
    done = subprocess.run([sys.executable, "-m", "proxy", "check-policy", str(policy)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "datasets.south.path: reads " in done.stdout and "datasets.north" in done.stdout
    assert ": ok" not in done.stdout


SPARK = 'engine = "spark"\n[datasets.{name}.spark]\nmaster = "local[2]"\ntables = {{ visits = {{ {source} }} }}'


def _spark(name: str, source: str) -> tuple[str, str]:
    return name, SPARK.format(name=name, source=source)


@pytest.mark.parametrize(("first", "second"), [
    ('parquet = "lake/visits"', 'parquet = "./lake/visits"'),  # one directory
    ('parquet = "lake/visits"', 'parquet = "lake/visits/part-0.parquet"'),  # a file inside it
    ('parquet = "lake/visits/part-0.parquet"', 'parquet = "link.parquet"'),  # a symlink to the file
    ('table = "warehouse.visits"', 'table = "Warehouse.Visits"'),  # one catalog table (names fold case)
    ('parquet = "s3a://bucket/visits/"', 'parquet = "s3a://bucket/visits"'),  # one URI
])
def test_two_spark_datasets_over_one_source_are_refused(tmp_path: Path, first: str, second: str) -> None:
    (tmp_path / "lake" / "visits").mkdir(parents=True)
    (tmp_path / "lake" / "visits" / "part-0.parquet").touch()
    os.symlink(tmp_path / "lake" / "visits" / "part-0.parquet", tmp_path / "link.parquet")
    problems = policy_problems(_policy(tmp_path, _spark("big", first), _spark("copy", second)))
    assert len(problems) == 1, problems
    assert problems[0].startswith("datasets.copy.spark.tables.visits: reads ") and "datasets.big" in problems[0]


def test_spark_datasets_over_different_sources_load(tmp_path: Path) -> None:
    (tmp_path / "lake" / "visits").mkdir(parents=True)
    (tmp_path / "lake" / "visits2").mkdir(parents=True)  # a sibling whose name extends the other's
    policy = _policy(tmp_path, _spark("big", 'parquet = "lake/visits"'), _spark("copy", 'parquet = "lake/visits2"'),
                     _spark("cat", 'table = "warehouse.visits"'))
    assert policy_problems(policy) == ()


def test_serve_refuses_it_at_start_up_naming_both_datasets_not_with_duckdbs_error(data: Path) -> None:
    """Issue #31, as reported: a `per_query` dataset declared before another on the same DuckDB file made `serve`
    exit with DuckDB's "Can't open a connection to same database file with a different configuration". It now
    exits at the policy's load, before any engine opens the file, with the message `check-policy` prints."""
    policy = _policy(data, ("first", 'path = "data/people.duckdb"\nbounding = "per_query"'),
                     ("second", 'path = "data/people.duckdb"'))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPPROXY_")}
    env["PYTHONPATH"] = str(REPO)
    port = str(free_port())  # never bound: the policy is refused first
    done = subprocess.run([sys.executable, "-m", "proxy", "serve", "--policy", str(policy), "--port", port],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "datasets.second.path: reads " in out and "datasets.first" in out, out
    assert "same database file" not in out
