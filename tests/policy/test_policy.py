from __future__ import annotations

import dataclasses
import math
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from accountant.filter import Accounting, Budget
from mechanisms.rounding import down
from proxy.policy.load import (
    AnalystPolicy,
    DatasetPolicy,
    Policy,
    PolicyFileError,
    check_accountable,
    load_policy,
    policy_problems,
)
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import InvalidParameter

ALICE_HASH = "a" * 64
REGIONS = ("north", "south")
ROOT_HASH = "0123456789abcdef" * 4

VALID = f"""
ledger = "ledger.sqlite"

[datasets.demo]
path = "demo.duckdb"
mechanism = "laplace"
epsilon = 0.1
delta = 1e-8
max_epsilon = 1.0

[datasets.demo.tables.visits]
privacy_unit = "user_id"
max_groups = 4
max_rows = 20

[datasets.demo.tables.visits.columns]
user_id = {{ type = "BIGINT" }}
region = {{ type = "VARCHAR", unit_level = true, groupable = true, public_domain = ["north", "south"] }}
amount = {{ type = "DOUBLE", bounds = [0.0, 500.0] }}
day = {{ type = "DATE", groupable = true, public_domain = [2026-01-01, "2026-01-02"] }}

[analysts.alice]
role = "analyst"
key_sha256 = "{ALICE_HASH}"
budgets = {{ demo = {{ epsilon = 3.0, delta = 1e-6 }} }}

[analysts.root]
role = "admin"
key_sha256 = "{ROOT_HASH}"
"""


def _written(epsilon: int, delta: str) -> Budget:
    """A budget as the policy reads it: the written decimals, and the floats at or below them."""
    exact = (Fraction(epsilon), Fraction(Decimal(delta)))
    return Budget(down(exact[0]), down(exact[1]), exact=exact)


def write(directory: Path, text: str) -> Path:
    (directory / "demo.duckdb").touch()
    path = directory / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_valid_policy_loads_into_frozen_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, VALID)
    monkeypatch.chdir(tmp_path)
    policy = load_policy(Path("policy.toml"))  # relative: paths in it resolve against its directory
    base = tmp_path.resolve()
    visits = TableSchema(
        "visits",
        "user_id",
        (
            ColumnSpec("user_id", "BIGINT"),
            ColumnSpec("region", "VARCHAR", unit_level=True, groupable=True, public_domain=REGIONS),
            ColumnSpec("amount", "DOUBLE", bounds=(0.0, 500.0)),
            ColumnSpec("day", "DATE", groupable=True, public_domain=("2026-01-01", "2026-01-02")),
        ),
        max_groups=4,
        max_rows=20,
    )
    assert policy == Policy(
        datasets=(
            # ε = 0.1 and δ = 1e-8 as written: the largest floats at or below them (a charge never exceeds them)
            DatasetPolicy("demo", base / "demo.duckdb", Catalog((visits,), databases=("demo",)), "laplace",
                          down(Fraction(1, 10)), down(Fraction(1, 10**8)), 1.0),
        ),
        analysts=(
            AnalystPolicy("alice", "analyst", ALICE_HASH, (("demo", _written(3, "1e-6")),)),
            AnalystPolicy("root", "admin", ROOT_HASH, ()),
        ),
        ledger=base / "ledger.sqlite",
    )
    assert policy_problems(Path("policy.toml")) == ()
    demo = policy.dataset("demo")
    assert demo is not None and policy.dataset("other") is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        demo.epsilon = 1.0  # type: ignore[misc]
    alice = policy.analyst_by_key_hash(ALICE_HASH)
    assert alice is not None and alice.name == "alice"
    assert alice.budget("demo") == _written(3, "1e-6") and alice.budget("other") is None
    assert alice.budget("demo") == Budget(3.0, 1e-6, exact=(Fraction(3), Fraction(1, 10**6)))  # as written
    assert policy.analyst_by_key_hash("b" * 64) is None


def test_defaults_apply_when_omitted(tmp_path: Path) -> None:
    text = VALID.replace('ledger = "ledger.sqlite"\n', "")
    for line in ('mechanism = "laplace"\n', "epsilon = 0.1\n", "delta = 1e-8\n", "max_epsilon = 1.0\n"):
        text = text.replace(line, "", 1)
    policy = load_policy(write(tmp_path, text))
    demo = policy.dataset("demo")
    assert demo is not None
    # the defaults 0.1 and 1e-8 as written: the largest floats at or below them
    assert (demo.mechanism, demo.epsilon, demo.delta, demo.max_epsilon) == (
        "laplace", down(Fraction(1, 10)), down(Fraction(1, 10**8)), 1.0)
    assert policy.ledger == tmp_path.resolve() / "ledger.sqlite"


D = "datasets.demo"
T = f"{D}.tables.visits"
C = f"{T}.columns"
A = "analysts.alice"
BROKEN = [
    # (id, old text, new text, location the problem must name)
    ("unknown_top_key", 'ledger = "ledger.sqlite"', 'ledgr = "ledger.sqlite"', "ledgr"),
    ("ledger_dir_missing", 'ledger = "ledger.sqlite"', 'ledger = "nope/ledger.sqlite"', "ledger"),
    ("unknown_dataset_key", "max_epsilon = 1.0", "max_epsilon = 1.0\nmax_epsilom = 2.0", f"{D}.max_epsilom"),
    ("cell_accounting_not_bool", "max_epsilon = 1.0", 'max_epsilon = 1.0\ncell_accounting = "yes"',
     f"{D}.cell_accounting"),
    ("dataset_file_missing", 'path = "demo.duckdb"', 'path = "missing.duckdb"', f"{D}.path"),
    ("dataset_path_not_string", 'path = "demo.duckdb"', "path = 3", f"{D}.path"),
    ("mechanism_unknown", 'mechanism = "laplace"', 'mechanism = "laplase"', f"{D}.mechanism"),
    ("epsilon_nan", "epsilon = 0.1", "epsilon = nan", f"{D}.epsilon"),
    ("epsilon_inf", "epsilon = 0.1", "epsilon = inf", f"{D}.epsilon"),
    ("epsilon_negative", "epsilon = 0.1", "epsilon = -0.1", f"{D}.epsilon"),
    ("epsilon_zero", "epsilon = 0.1", "epsilon = 0.0", f"{D}.epsilon"),
    ("epsilon_subnormal", "epsilon = 0.1", "epsilon = 5e-324", f"{D}.epsilon"),
    ("epsilon_string", "epsilon = 0.1", 'epsilon = "0.1"', f"{D}.epsilon"),
    ("epsilon_bool", "epsilon = 0.1", "epsilon = true", f"{D}.epsilon"),
    ("delta_one", "delta = 1e-8", "delta = 1.0", f"{D}.delta"),
    ("delta_negative", "delta = 1e-8", "delta = -1e-9", f"{D}.delta"),
    ("delta_too_big_per_query", "delta = 1e-8", "delta = 0.01", f"{D}.delta"),
    (
        "gaussian_needs_delta",
        'mechanism = "laplace"\nepsilon = 0.1\ndelta = 1e-8',
        'mechanism = "gaussian"\nepsilon = 0.1\ndelta = 0.0',
        f"{D}.delta",
    ),
    ("max_epsilon_below_epsilon", "max_epsilon = 1.0", "max_epsilon = 0.05", f"{D}.max_epsilon"),
    ("privacy_unit_undeclared", 'privacy_unit = "user_id"', 'privacy_unit = "uid"', f"{T}.privacy_unit"),
    (
        "privacy_unit_groupable",
        'user_id = { type = "BIGINT" }',
        'user_id = { type = "BIGINT", groupable = true }',
        f"{C}.user_id.groupable",
    ),
    ("max_groups_zero", "max_groups = 4", "max_groups = 0", f"{T}.max_groups"),
    ("max_groups_bool", "max_groups = 4", "max_groups = true", f"{T}.max_groups"),
    ("max_rows_string", "max_rows = 20", 'max_rows = "20"', f"{T}.max_rows"),
    ("unknown_table_key", "max_rows = 20", "max_rows = 20\nprivacy_units = 1", f"{T}.privacy_units"),
    (
        "column_type_unknown",
        'user_id = { type = "BIGINT" }',
        'user_id = { type = "BIGINTEGER" }',
        f"{C}.user_id.type",
    ),
    ("column_type_missing", 'user_id = { type = "BIGINT" }', "user_id = {}", f"{C}.user_id.type"),
    ("unknown_column_key", "bounds = [0.0, 500.0]", "bound = [0.0, 500.0]", f"{C}.amount.bound"),
    ("bounds_reversed", "bounds = [0.0, 500.0]", "bounds = [500.0, 0.0]", f"{C}.amount.bounds"),
    ("bounds_one_value", "bounds = [0.0, 500.0]", "bounds = [0.0]", f"{C}.amount.bounds"),
    ("bounds_nan", "bounds = [0.0, 500.0]", "bounds = [nan, 500.0]", f"{C}.amount.bounds"),
    ("bounds_strings", "bounds = [0.0, 500.0]", 'bounds = ["0", "500"]', f"{C}.amount.bounds"),
    ("bounds_on_string_column", "unit_level = true,", "bounds = [0, 1], unit_level = true,", f"{C}.region"),
    ("unit_level_not_bool", "unit_level = true,", 'unit_level = "yes",', f"{C}.region.unit_level"),
    ("public_domain_kind", '["north", "south"]', '["north", 3]', f"{C}.region.public_domain"),
    ("public_domain_bad_date", '"2026-01-02"]', '"2026-13-02"]', f"{C}.day.public_domain"),
    ("public_domain_empty", '["north", "south"]', "[]", f"{C}.region.public_domain"),
    ("public_domain_duplicate", '["north", "south"]', '["north", "north"]', f"{C}.region"),
    (
        "public_domain_not_groupable",
        "groupable = true, public_domain = [2026",
        "public_domain = [2026",
        f"{C}.day.public_domain",
    ),
    (
        "column_case_duplicate",
        'user_id = { type = "BIGINT" }',
        'user_id = { type = "BIGINT" }\nUSER_ID = { type = "BIGINT" }',
        f"{C}.USER_ID",
    ),
    (
        "column_name_not_identifier",
        'amount = { type = "DOUBLE"',
        '"amount x" = { type = "DOUBLE"',
        f"{C}.amount x",
    ),
    ("role_unknown", 'role = "analyst"', 'role = "superuser"', f"{A}.role"),
    ("role_missing", 'role = "analyst"\n', "", f"{A}.role"),
    (
        "key_uppercase",
        f'key_sha256 = "{ALICE_HASH}"',
        f'key_sha256 = "{ALICE_HASH.upper()}"',
        f"{A}.key_sha256",
    ),
    ("key_short", f'key_sha256 = "{ALICE_HASH}"', 'key_sha256 = "abc"', f"{A}.key_sha256"),
    (
        "key_duplicate",
        f'key_sha256 = "{ROOT_HASH}"',
        f'key_sha256 = "{ALICE_HASH}"',
        "analysts.root.key_sha256",
    ),
    ("unknown_analyst_key", 'role = "analyst"', 'role = "analyst"\nbudget = 1', f"{A}.budget"),
    ("budget_unknown_dataset", "budgets = { demo =", "budgets = { demo2 =", f"{A}.budgets.demo2"),
    ("budget_epsilon_zero", "epsilon = 3.0", "epsilon = 0", f"{A}.budgets.demo.epsilon"),
    ("budget_delta_one", "delta = 1e-6", "delta = 1.5", f"{A}.budgets.demo.delta"),
    ("budget_delta_missing", ", delta = 1e-6", "", f"{A}.budgets.demo.delta"),
    ("budget_unknown_key", "delta = 1e-6", "delta = 1e-6, epsilom = 1.0", f"{A}.budgets.demo.epsilom"),
    ("not_toml", "[analysts.root]", "[analysts.root", "policy.toml"),
]


@pytest.mark.parametrize(("old", "new", "location"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_each_broken_file_names_its_location(tmp_path: Path, old: str, new: str, location: str) -> None:
    assert old in VALID
    path = write(tmp_path, VALID.replace(old, new, 1))
    problems = policy_problems(path)
    where = str(path) if location == "policy.toml" else location
    assert [p.partition(": ")[0] for p in problems] == [where], problems  # exactly one, at its location
    with pytest.raises(PolicyFileError) as info:
        load_policy(path)
    assert info.value.problems == problems


def test_a_dataset_needs_tables(tmp_path: Path) -> None:
    start, end = VALID.index("[datasets.demo.tables.visits]"), VALID.index("[analysts.alice]")
    problems = policy_problems(write(tmp_path, VALID[:start] + VALID[end:]))
    assert problems == ("datasets.demo.tables: declare at least one protected table",)


def test_unknown_key_suggests_the_known_one(tmp_path: Path) -> None:
    problems = policy_problems(write(tmp_path, VALID.replace("bounds = [0.0", "bound = [0.0")))
    assert problems == (f"{C}.amount.bound: unknown key; did you mean 'bounds'?",)


def test_reversed_bounds_message(tmp_path: Path) -> None:
    (problem,) = policy_problems(write(tmp_path, VALID.replace("[0.0, 500.0]", "[500.0, 0.0]")))
    assert problem.startswith(f"{C}.amount.bounds: must be [lo, hi] with lo <= hi")


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = (
        VALID.replace("epsilon = 0.1", "epsilon = nan")
        .replace("bounds = [0.0, 500.0]", "bounds = [9.0, 1.0]")
        .replace('role = "analyst"', 'role = "boss"')
        .replace("budgets = { demo =", "budgets = { nodata =")
        .replace('ledger = "ledger.sqlite"', 'ledger = "ledger.sqlite"\nextra = 1')
    )
    locations = {p.split(":")[0] for p in policy_problems(write(tmp_path, text))}
    assert locations == {
        "extra",
        "datasets.demo.epsilon",
        f"{C}.amount.bounds",
        "analysts.alice.role",
        "analysts.alice.budgets.nodata",
    }


def test_missing_file_is_one_problem(tmp_path: Path) -> None:
    (problem,) = policy_problems(tmp_path / "absent.toml")
    assert "absent.toml" in problem


def test_frozen_types_validate_themselves(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        DatasetPolicy("d", tmp_path, Catalog(()), epsilon=math.nan)
    with pytest.raises(ValueError, match="max_epsilon"):
        DatasetPolicy("d", tmp_path, Catalog(()), epsilon=2.0, max_epsilon=1.0)
    with pytest.raises(ValueError, match="key_sha256"):
        AnalystPolicy("a", "analyst", "ABC", ())
    with pytest.raises(ValueError, match="role"):
        AnalystPolicy("a", "root", ALICE_HASH, ())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="share an API key"):
        Policy(
            (),
            (AnalystPolicy("a", "admin", ALICE_HASH, ()), AnalystPolicy("b", "admin", ALICE_HASH, ())),
            tmp_path,
        )
    with pytest.raises(ValueError, match="unknown dataset"):
        Policy((), (AnalystPolicy("a", "admin", ALICE_HASH, (("x", Budget(1.0, 0.0)),)),), tmp_path)


# --- accounting, selection share and the dataset budget ---------------------------------------------------

D = "datasets.demo"
ZCDP = VALID.replace("max_epsilon = 1.0\n", 'max_epsilon = 1.0\naccounting = "zcdp"\n', 1)


def test_accounting_keys_load(tmp_path: Path) -> None:
    text = VALID.replace(
        "max_epsilon = 1.0\n",
        'max_epsilon = 1.0\naccounting = "gdp"\nselection_delta_share = 0.25\n'
        "budget = { epsilon = 20, delta = 1e-5 }\n",
        1,
    )
    dataset = load_policy(write(tmp_path, text)).dataset("demo")
    assert dataset is not None
    assert dataset.accounting == Accounting("gdp", 0.25)
    assert dataset.budget == _written(20, "1e-5")  # 1e-5 as written, its float never above it


def test_accounting_defaults_to_basic_without_a_shared_budget(tmp_path: Path) -> None:
    dataset = load_policy(write(tmp_path, VALID)).dataset("demo")
    assert dataset is not None and dataset.accounting == Accounting("basic", 0.5) and dataset.budget is None


ACCOUNTING_BROKEN = [
    ("unknown_rule", 'accounting = "zcdp"', 'accounting = "rdp"', f"{D}.accounting"),
    ("share_one", 'accounting = "zcdp"', 'accounting = "zcdp"\nselection_delta_share = 1.0',
     f"{D}.selection_delta_share"),
    ("share_text", 'accounting = "zcdp"', 'accounting = "zcdp"\nselection_delta_share = "half"',
     f"{D}.selection_delta_share"),
    ("analyst_budget_without_delta", "delta = 1e-6 }", "delta = 0.0 }", f"{A}.budgets.demo"),
    ("shared_budget_not_a_table", 'accounting = "zcdp"', 'accounting = "zcdp"\nbudget = 3', f"{D}.budget"),
    ("shared_budget_without_delta", 'accounting = "zcdp"', 'accounting = "zcdp"\nbudget = { epsilon = 3, delta = 0 }',
     f"{D}.budget"),
    ("shared_budget_unknown_key", 'accounting = "zcdp"',
     'accounting = "zcdp"\nbudget = { epsilon = 3, delta = 1e-6, rho = 1 }', f"{D}.budget.rho"),
]


@pytest.mark.parametrize(
    ("old", "new", "location"), [b[1:] for b in ACCOUNTING_BROKEN], ids=[b[0] for b in ACCOUNTING_BROKEN]
)
def test_each_broken_accounting_names_its_location(tmp_path: Path, old: str, new: str, location: str) -> None:
    base = ZCDP.replace('accounting = "zcdp"', 'accounting = "gdp"') if "gaussian" in new else ZCDP
    assert old in base
    problems = policy_problems(write(tmp_path, base.replace(old, new, 1)))
    assert [p.partition(": ")[0] for p in problems] == [location], problems


def test_gdp_with_gaussian_is_accepted(tmp_path: Path) -> None:
    # refused until the discrete Gaussian's μ-GDP bound was proven (docs/privacy.md §8)
    text = VALID.replace('mechanism = "laplace"', 'mechanism = "gaussian"\naccounting = "gdp"')
    assert policy_problems(write(tmp_path, text)) == ()


def test_gdp_budgets_need_an_epsilon_of_a_thousandth(tmp_path: Path) -> None:
    text = ZCDP.replace('accounting = "zcdp"', 'accounting = "gdp"').replace("epsilon = 3.0", "epsilon = 1e-4")
    (problem,) = policy_problems(write(tmp_path, text))
    assert problem.startswith(f"{A}.budgets.demo: needs epsilon >= 0.001")


def test_frozen_dataset_policy_checks_its_accounting(tmp_path: Path) -> None:
    DatasetPolicy("d", tmp_path, Catalog(()), mechanism="gaussian", accounting=Accounting("gdp"))  # accepted
    with pytest.raises(ValueError, match="budget needs delta > 0"):
        DatasetPolicy("d", tmp_path, Catalog(()), accounting=Accounting("zcdp"), budget=Budget(1.0, 0.0))
    dataset = DatasetPolicy("d", tmp_path, Catalog(()), accounting=Accounting("zcdp"))
    with pytest.raises(ValueError, match="needs delta > 0"):
        Policy((dataset,), (AnalystPolicy("a", "admin", ALICE_HASH, (("d", Budget(1.0, 0.0)),)),), tmp_path)


def test_check_accountable_refuses_before_any_charge(tmp_path: Path) -> None:
    gdp = DatasetPolicy("d", tmp_path, Catalog(()), accounting=Accounting("gdp"))
    check_accountable(gdp, "gaussian", "none")  # the discrete Gaussian has a proven μ (docs/privacy.md §8)
    check_accountable(gdp, "laplace", "private")
    no_share = DatasetPolicy("d", tmp_path, Catalog(()), accounting=Accounting("zcdp", 0.0))
    with pytest.raises(InvalidParameter, match="selection_delta_share = 0"):
        check_accountable(no_share, "laplace", "private")
    check_accountable(no_share, "gaussian", "public")
    check_accountable(DatasetPolicy("d", tmp_path, Catalog(())), "gaussian", "private")  # basic: anything


@pytest.mark.parametrize(("type_", "bounds", "refused"), [
    ("BIGINT", "[1e-300, 0.5]", True),  # found by the totality property: a clamp to it holds no whole number
    ("DECIMAL(38,0)", "[-3.7e-09, -1.3e-09]", True),
    ("DECIMAL(18,3)", "[0.0001, 0.0009]", True),
    ("UTINYINT", "[-5.0, -1.0]", True),  # below the type's least value
    ("BIGINT", "[0.5, 1.0]", False),  # holds 1
    ("DECIMAL(18,3)", "[0.0001, 0.001]", False),  # holds 0.001
    ("DOUBLE", "[1e-300, 2e-300]", False),  # every number is a DOUBLE value
])
def test_bounds_must_hold_a_value_of_the_columns_type(tmp_path: Path, type_: str, bounds: str,
                                                      refused: bool) -> None:
    old = 'amount = { type = "DOUBLE", bounds = [0.0, 500.0] }'
    assert old in VALID
    text = VALID.replace(old, f'amount = {{ type = "{type_}", bounds = {bounds} }}')
    problems = policy_problems(write(tmp_path, text))
    expected = [f"{C}.amount: column amount: bounds"] if refused else []
    assert [p.partition(" hold no ")[0].rsplit(" (", 1)[0] for p in problems] == expected, problems
    assert all(f"hold no {type_} value" in p for p in problems)
