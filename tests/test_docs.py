"""The docs cover every error code and every setting, so they cannot fall behind the code."""

from __future__ import annotations

import re
from pathlib import Path

from proxy.errors import STATUS
from proxy.settings import Settings

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_every_error_code_is_documented_with_its_status() -> None:
    text = (DOCS / "errors.md").read_text()
    for code, status in STATUS.items():
        assert re.search(rf"\| `{code}` \| {status} \|", text), code


def test_every_process_setting_is_documented() -> None:
    text = (DOCS / "policy.md").read_text()
    for name in Settings.model_fields:
        assert f"`DPPROXY_{name.upper()}`" in text, name


def test_every_policy_key_is_documented() -> None:
    from proxy import policy, policy_dataset, policy_tables

    text = (DOCS / "policy.md").read_text()
    source = "".join(Path(m.__file__).read_text() for m in (policy, policy_dataset, policy_tables))
    keys = re.findall(r'"([a-z_0-9]+)"', source)
    documented = {k for k in keys if f"`{k}`" in text}
    for key in ("ledger", "path", "mechanism", "epsilon", "delta", "max_epsilon", "privacy_unit", "max_groups",
                "max_rows", "type", "bounds", "unit_level", "groupable", "public_domain", "role", "key_sha256",
                "budgets"):
        assert key in documented, key
