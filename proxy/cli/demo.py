"""The demo dataset and policy: synthetic visits by synthetic users, two API keys, one TOML policy.

The data is generated inside DuckDB from a fixed seed on one thread, so every build of the same size is
identical (this is demo data, not privacy noise). It is shaped to exercise the proxy: a skewed number of
visits per user (contribution bounds matter), region and age constant per user (disjoint grouping), rare
huge amounts and NULLs (clamping matters). The generated policy loads with `proxy.policy.load.load_policy`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from proxy.engines.duckdb_engine import write_database

REGIONS = ("north", "south", "east", "west", "central")
CATEGORIES = ("groceries", "dining", "electronics", "clothing", "travel", "health", "books", "entertainment")
PLANS = ("free", "basic", "pro", "enterprise")
# groups per user a query on visits may choose: a user visits about 20 days, so a daily or weekly series bounded
# at 8 was 52-60 % low; 32 is the least error at the default ε = 0.1 (bench/README.md, bench/demo_series.py)
MAX_GROUPS_LIMIT = 32
SEED = 0.42


@dataclass(frozen=True, slots=True)
class DemoFiles:
    """What `build_demo` wrote. The plain keys are kept out of repr so they do not end up in logs."""

    database: Path
    policy: Path
    keys_env: Path
    analyst_key: str = field(repr=False)
    admin_key: str = field(repr=False)


def build_demo(directory: Path, *, users: int = 50_000, rows: int = 1_000_000) -> DemoFiles:
    """Write demo.duckdb, policy.toml and keys.env (mode 600) into `directory`, replacing any old ones.

    `rows` is the exact number of visits; every user has at least one, so `rows >= users >= 1`.
    """
    if not 1 <= users <= rows:
        raise ValueError(f"need 1 <= users <= rows, got users={users}, rows={rows}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    database, policy, keys_env = directory / "demo.duckdb", directory / "policy.toml", directory / "keys.env"
    write_database(database, _generation_sql(users, rows))
    analyst_key, admin_key = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    _replace(policy, _policy_toml(database.name, _sha256(analyst_key), _sha256(admin_key)), mode=0o644)
    _replace(keys_env, f"DPPROXY_ANALYST_KEY={analyst_key}\nDPPROXY_ADMIN_KEY={admin_key}\n", mode=0o600)
    return DemoFiles(database, policy, keys_env, analyst_key, admin_key)


def _sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _sql_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _generation_sql(users: int, rows: int) -> tuple[str, ...]:
    extra = rows - users  # visits beyond the one every user has
    return (
        # One thread: DuckDB's random() is reproducible from setseed only without parallelism.
        "SET threads = 1",
        f"SELECT setseed({SEED})",
        f"""CREATE TABLE users AS
        WITH draws AS (
            SELECT range + 1 AS user_id, random() AS r_region, random() AS r_age1, random() AS r_age2,
                   random() AS r_plan, random() AS r_heavy, random() AS r_weight
            FROM range({users}))
        SELECT user_id::BIGINT AS user_id,
            CASE WHEN r_region < 0.25 THEN 'north' WHEN r_region < 0.45 THEN 'south'
                 WHEN r_region < 0.65 THEN 'east' WHEN r_region < 0.90 THEN 'west'
                 ELSE 'central' END AS region,
            (18 + floor(73 * (r_age1 + r_age2) / 2))::INTEGER AS age,
            CASE WHEN r_plan < 0.60 THEN 'free' WHEN r_plan < 0.85 THEN 'basic'
                 WHEN r_plan < 0.97 THEN 'pro' ELSE 'enterprise' END AS plan,
            -- visit weight: Pareto-ish, capped, plus 0.2% heavy users with ~20x the typical weight
            CASE WHEN r_heavy < 0.002 THEN 15 + 35 * r_weight
                 ELSE least(power(1 - r_weight, -1 / 1.5), 6) END AS weight
        FROM draws ORDER BY user_id""",
        # Visits per user: 1 + the user's share of the rest by cumulative weight; the shares telescope,
        # so the total is exactly `rows`.
        f"""CREATE TEMP TABLE visit_counts AS
        WITH cumulative AS (
            -- the last user's cumulative share is `extra` exactly: the running sum and the total are summed
            -- in different orders, so their ratio can fall a hair below 1 (10M rows came out as 9,999,999)
            SELECT user_id, CASE WHEN user_id = max(user_id) OVER () THEN {extra}
                                 ELSE floor({extra} * sum(weight) OVER (ORDER BY user_id) / sum(weight) OVER ())
                            END AS c
            FROM users)
        SELECT user_id, (1 + c - coalesce(lag(c) OVER (ORDER BY user_id), 0))::BIGINT AS n FROM cumulative""",
        "ALTER TABLE users DROP COLUMN weight",
        f"""CREATE TABLE visits AS
        WITH draws AS (
            SELECT u.user_id, u.region, u.age, random() AS r_day, random() AS r_category,
                   random() AS r_amount1, random() AS r_amount2, random() AS r_rare, random() AS r_duration
            FROM visit_counts k JOIN users u USING (user_id), range(k.n)
            ORDER BY u.user_id)
        SELECT user_id, region, age,
            DATE '2026-01-01' + floor(365 * r_day)::INTEGER AS day,
            {_sql_list(CATEGORIES)}[1 + floor(8 * power(r_category, 1.6))::INTEGER] AS category,
            -- log-normal (Box-Muller), with 0.1% NULLs and 0.05% huge outliers
            CASE WHEN r_rare < 0.001 THEN NULL
                 WHEN r_rare < 0.0015 THEN round(10000 + 90000 * r_amount1, 2)
                 ELSE round(exp(3.0 + 0.9 * sqrt(-2 * ln(1 - r_amount1)) * cos(2 * pi() * r_amount2)), 2)
            END::DOUBLE AS amount,
            least(floor(-240 * ln(1 - r_duration) * (1 + 4 * r_duration * r_duration)), 86400)::INTEGER
                AS duration_s
        FROM draws""",
    )


def _replace(path: Path, text: str, *, mode: int) -> None:
    """Write `text` to `path` atomically, the file having `mode` from its first byte."""
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temp_name, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)


def _toml_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def _policy_toml(database: str, analyst_hash: str, admin_hash: str) -> str:
    regions, categories, plans = _toml_list(REGIONS), _toml_list(CATEGORIES), _toml_list(PLANS)
    budget = "budgets = { demo = { epsilon = 5.0, delta = 1e-6 } }"
    return f"""\
# Demo policy written by proxy.cli.demo.build_demo. API keys are stored only as sha256 hex (plain keys: keys.env).
ledger = "ledger.sqlite"

[datasets.demo]
path = "{database}"
mechanism = "laplace"
epsilon = 0.1        # default ε per query
delta = 1e-8         # default δ per query (partition selection)
max_epsilon = 1.0    # largest ε one query may ask for
bounding = "store"   # bound by filtering ranks precomputed once (built by `serve` when missing)
auto_bounds_share = [0.1, 0.5]  # choosing "auto" bounds takes 10-50 % of a query's ε, split by expected error

# One row per visit; a user may have hundreds, so contributions are bounded per query. "auto": each query
# chooses its own bounds within these limits, privately, from a share of its epsilon (auto_bounds_share).
[datasets.demo.tables.visits]
privacy_unit = "user_id"
max_groups = "auto"
max_groups_limit = {MAX_GROUPS_LIMIT}
max_rows = "auto"
max_rows_limit = 1000

[datasets.demo.tables.visits.columns]
user_id = {{ type = "BIGINT" }}
region = {{ type = "VARCHAR", unit_level = true, groupable = true, public_domain = {regions} }}
age = {{ type = "INTEGER", unit_level = true, groupable = true, bounds = [18, 90] }}
day = {{ type = "DATE", groupable = true, bounds = [2026-01-01, 2026-12-31] }}  # the year the data spans: a public
# domain of days, so daily, weekly and monthly series release every period (no threshold, no δ)
category = {{ type = "VARCHAR", groupable = true, public_domain = {categories} }}
amount = {{ type = "DOUBLE", bounds = "auto", bounds_limit = [0.0, 100000.0] }}
duration_s = {{ type = "INTEGER", bounds = "auto", bounds_limit = [0, 86400] }}

# One row per user.
[datasets.demo.tables.users]
privacy_unit = "user_id"
max_groups = 1
max_rows = 1
one_row_per_unit = true  # checked when the bounding store is built: its queries need no bounding

[datasets.demo.tables.users.columns]
user_id = {{ type = "BIGINT" }}
region = {{ type = "VARCHAR", unit_level = true, groupable = true, public_domain = {regions} }}
age = {{ type = "INTEGER", unit_level = true, groupable = true, bounds = [18, 90] }}
plan = {{ type = "VARCHAR", unit_level = true, groupable = true, public_domain = {plans} }}

[analysts.analyst]
role = "analyst"
key_sha256 = "{analyst_hash}"
{budget}

[analysts.admin]
role = "admin"
key_sha256 = "{admin_hash}"
{budget}
"""
