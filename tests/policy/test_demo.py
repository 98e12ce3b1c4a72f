from __future__ import annotations

import hashlib
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.cli.demo import CATEGORIES, MAX_GROUPS_LIMIT, REGIONS, DemoFiles, build_demo
from proxy.engines.duckdb_engine import Engine
from proxy.policy.load import load_policy

USERS, ROWS = 500, 20_000


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoFiles:
    return build_demo(tmp_path_factory.mktemp("demo"), users=USERS, rows=ROWS)


@pytest.fixture(scope="module")
def engine(demo: DemoFiles) -> Iterator[Engine]:
    with Engine(demo.database) as engine:
        yield engine


def one(engine: Engine, sql: str) -> object:
    return engine.run(sql).rows[0][0]


def read_keys(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_files_are_written(demo: DemoFiles) -> None:
    directory = demo.database.parent
    assert (demo.database, demo.policy, demo.keys_env) == (
        directory / "demo.duckdb",
        directory / "policy.toml",
        directory / "keys.env",
    )
    assert stat.S_IMODE(demo.keys_env.stat().st_mode) == 0o600
    assert demo.analyst_key not in repr(demo) and demo.admin_key not in repr(demo)


def test_policy_loads_and_matches_the_database(demo: DemoFiles, engine: Engine) -> None:
    policy = load_policy(demo.policy)
    dataset = policy.dataset("demo")
    assert dataset is not None and dataset.path == demo.database.resolve()
    visits, users = dataset.catalog.table("visits"), dataset.catalog.table("users")
    assert visits is not None and users is not None
    # visits chooses its bounds per query, within these limits (docs/privacy.md §10)
    assert (visits.privacy_unit, visits.max_groups, visits.max_rows) == ("user_id", MAX_GROUPS_LIMIT, 1000)
    assert (visits.auto_max_groups, visits.auto_max_rows) == (True, True)
    assert [(c.name, c.bounds) for c in visits.columns if c.auto_bounds] == [("amount", (0.0, 100000.0)),
                                                                             ("duration_s", (0.0, 86400.0))]
    assert (users.max_groups, users.max_rows) == (1, 1)
    region = visits.column("region")
    assert region is not None and region.unit_level and region.public_domain == REGIONS
    assert engine.check_catalog(dataset.catalog) == ()
    roles = {a.name: a.role for a in policy.analysts}
    assert roles == {"analyst": "analyst", "admin": "admin"}
    for analyst in policy.analysts:
        budget = analyst.budget("demo")
        assert budget is not None and (budget.epsilon, budget.delta) == (5.0, 1e-6)


def test_keys_hash_to_the_policy_hashes(demo: DemoFiles) -> None:
    keys = read_keys(demo.keys_env)
    assert keys == {"DPPROXY_ANALYST_KEY": demo.analyst_key, "DPPROXY_ADMIN_KEY": demo.admin_key}
    policy = load_policy(demo.policy)
    for env, name in (("DPPROXY_ANALYST_KEY", "analyst"), ("DPPROXY_ADMIN_KEY", "admin")):
        analyst = policy.analyst_by_key_hash(hashlib.sha256(keys[env].encode()).hexdigest())
        assert analyst is not None and analyst.name == name
    assert demo.analyst_key not in demo.policy.read_text()


def test_table_sizes(engine: Engine) -> None:
    assert one(engine, "SELECT count(*) FROM users") == USERS
    assert one(engine, "SELECT count(DISTINCT user_id) FROM users") == USERS
    assert one(engine, "SELECT count(*) FROM visits") == ROWS
    assert one(engine, "SELECT count(DISTINCT user_id) FROM visits") == USERS


def test_region_and_age_are_constant_per_user(engine: Engine) -> None:
    assert (
        one(
            engine,
            """SELECT count(*) FROM visits v JOIN users u USING (user_id)
                          WHERE v.region <> u.region OR v.age <> u.age""",
        )
        == 0
    )


def test_data_has_the_intended_shape(engine: Engine) -> None:
    heaviest, typical = engine.run(
        "SELECT max(n), median(n) FROM (SELECT count(*) AS n FROM visits GROUP BY user_id)"
    ).rows[0]
    assert isinstance(heaviest, int) and heaviest > 2 * float(str(typical)) > 20  # skewed contributions
    assert one(engine, "SELECT count(*) FROM visits WHERE year(day) <> 2026") == 0
    categories = {row[0] for row in engine.run("SELECT DISTINCT category FROM visits").rows}
    assert categories == set(CATEGORIES)
    assert one(engine, "SELECT count(*) FROM visits WHERE amount IS NULL") > 0  # type: ignore[operator]
    assert one(engine, "SELECT max(amount) FROM visits") > 10_000  # type: ignore[operator]
    assert one(engine, "SELECT count(*) FROM visits WHERE duration_s > 3600") > 0  # type: ignore[operator]
    assert one(engine, "SELECT min(age) >= 18 AND max(age) <= 90 FROM users") is True


def test_rebuild_replaces_files_with_the_same_data(tmp_path: Path) -> None:
    first = build_demo(tmp_path, users=50, rows=300)
    checksum = "SELECT sum(hash(v::VARCHAR)) FROM visits v"
    with Engine(first.database) as engine:
        before = one(engine, checksum)
    second = build_demo(tmp_path, users=50, rows=300)
    assert second.analyst_key != first.analyst_key
    assert read_keys(second.keys_env)["DPPROXY_ANALYST_KEY"] == second.analyst_key
    assert first.analyst_key not in second.policy.read_text()
    load_policy(second.policy)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.duckdb", "keys.env", "policy.toml"]
    with Engine(second.database) as engine:
        assert one(engine, checksum) == before  # seeded: the same synthetic data every build


@pytest.mark.parametrize(("users", "rows"), [(0, 10), (11, 10)], ids=["no_users", "fewer_rows_than_users"])
def test_sizes_are_checked(tmp_path: Path, users: int, rows: int) -> None:
    with pytest.raises(ValueError, match="users"):
        build_demo(tmp_path, users=users, rows=rows)
