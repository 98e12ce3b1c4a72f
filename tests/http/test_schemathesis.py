"""The proxy's own OpenAPI schema, fuzzed by schemathesis against a live server (loopback only).

Every operation of GET /openapi.json gets a bounded number of generated requests, schema-valid (positive)
and schema-invalid (negative), authenticated as the analyst; a second run as the admin covers every operation again, the
admin-only /v1/ledger included (negative too).
Each response must be no 5xx, carry a documented status code and content type, and have a body (and
headers) that validate against the schema; schema-invalid requests must be refused with a 4xx.
The server has a budget no run can exhaust, so a `budget_exceeded` can never mask another answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from proxy.cli.demo import DemoFiles
from tests.support.live import Server, policy_copy

POSITIVE_EXAMPLES = 100  # per operation and role: the fixed budget of the run (about 15 s on 2 cores)
NEGATIVE_EXAMPLES = 50
RESPONSE_CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
# every operation of the served schema is fuzzed (new routes included); these must be among them
CORE_OPERATIONS = {
    ("GET", "/healthz"),
    ("POST", "/v1/query"),
    ("POST", "/v1/query/preview"),
    ("GET", "/v1/budget"),
    ("GET", "/v1/datasets"),
    ("GET", "/v1/ledger"),
}


@pytest.fixture(scope="module")
def live(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A fresh server (the `fresh_server` recipe at module scope) whose budget the fuzzer cannot exhaust."""
    directory = tmp_path_factory.mktemp("schemathesis")
    server = Server(directory / "server.log").start(policy_copy(demo, directory, epsilon=1e9, delta=0.5))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def schema(live: Server) -> Any:
    assert live.base_url.startswith("http://127.0.0.1:")  # loopback only
    loaded = schemathesis.openapi.from_url(f"{live.base_url}/openapi.json")
    # a schema-violating body may also be too large to read: 413 payload_too_large refuses it (docs/errors.md)
    rejection = loaded.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "413"]
    return loaded


def operations(schema: Any) -> list[tuple[str, str]]:
    return sorted((op.ok().method.upper(), op.ok().path) for op in schema.get_all_operations())


def fuzz(schema: Any, live: Server, key: str, method: str, path: str, mode: GenerationMode, examples: int) -> int:
    """Send up to `examples` generated requests to one operation; returns how many were sent."""
    operation = schema[path][method]
    # the bearer key is fixed, not generated: otherwise nearly every request would stop at 401
    strategy = operation.as_strategy(generation_mode=mode, headers={"authorization": f"Bearer {key}"})
    checks = RESPONSE_CHECKS + ([negative_data_rejection] if mode is GenerationMode.NEGATIVE else [])
    sent = 0

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],  # no shrinking: a failure reports its request as curl, and time is bounded
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        nonlocal sent
        sent += 1
        case.call_and_validate(base_url=live.base_url, session=session, checks=checks, timeout=30)

    with requests.Session() as session:
        run()
    return sent


def fuzz_all(schema: Any, live: Server, key: str, mode: GenerationMode, examples: int, only: set[str] | None = None
             ) -> None:
    """Fuzz every operation (or those whose path is in `only`); report the failures of all of them together."""
    failures, sent = [], {}
    for method, path in operations(schema):
        if only is not None and path not in only:
            continue
        try:
            sent[f"{method} {path}"] = fuzz(schema, live, key, method, path, mode, examples)
        except Unsatisfiable:  # nothing of the operation can be made schema-invalid (no parameters, no body)
            assert mode is GenerationMode.NEGATIVE, f"{method} {path}: no positive example can be generated"
        except (Exception, BaseExceptionGroup) as err:  # schemathesis reports failures as an exception group
            failures.append(f"--- {method} {path} ({mode.value}) ---\n{err}")
    print(f"schemathesis {mode.value}: requests per operation {sent}")  # shown with -s or on failure
    assert not failures, "\n\n".join(failures)
    assert sent and all(n >= 1 for n in sent.values()), sent


def test_schema_has_the_core_operations(schema: Any) -> None:
    assert set(operations(schema)) >= CORE_OPERATIONS


def test_analyst_positive(schema: Any, live: Server, demo: DemoFiles) -> None:
    # GET /metrics and GET /dashboard/data answer an analyst 403: their schema must document it
    fuzz_all(schema, live, demo.analyst_key, GenerationMode.POSITIVE, POSITIVE_EXAMPLES)


def test_analyst_negative(schema: Any, live: Server, demo: DemoFiles) -> None:
    # Regression: a body that is not UTF-8 (b'\xff') became 500 `internal` on the query routes.
    fuzz_all(schema, live, demo.analyst_key, GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES)


def test_admin_positive(schema: Any, live: Server, demo: DemoFiles) -> None:
    # Regression: GET /v1/ledger?offset=<2**63 or more> answered 500
    fuzz_all(schema, live, demo.admin_key, GenerationMode.POSITIVE, POSITIVE_EXAMPLES)


def test_admin_ledger_negative(schema: Any, live: Server, demo: DemoFiles) -> None:
    # Regression: a Unix timestamp or bare date in `since`/`until` was accepted
    fuzz_all(schema, live, demo.admin_key, GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES, only={"/v1/ledger"})


def test_budget_held_through_the_run(live: Server, demo: DemoFiles) -> None:
    """The run never ran into the budget, so no answer was a budget_exceeded in disguise."""
    with live.client(demo.analyst_key) as client:
        budget = client.get("/v1/budget").json()["budgets"][0]
    assert budget["epsilon_remaining"] > 1e8 and budget["delta_remaining"] > 0.1


# a sanity check that the key really is fixed (a typo in the header name would silently turn the whole run
# into 401s, which all conform)
def test_fixed_key_reaches_the_handler(schema: Any, live: Server, demo: DemoFiles) -> None:
    strategy = schema["/v1/budget"]["GET"].as_strategy(headers={"authorization": f"Bearer {demo.analyst_key}"})

    @settings(max_examples=3, deadline=None, database=None, phases=[Phase.generate])
    @given(case=strategy, _=st.just(None))
    def run(case: Any, _: None) -> None:
        response = case.call(base_url=live.base_url, timeout=30)
        assert response.status_code == 200, response.text

    run()


@pytest.mark.parametrize("moment", ["0", "0.0", "2026-01-01"])
def test_ledger_time_filters_take_only_documented_date_times(live: Server, demo: DemoFiles, moment: str) -> None:
    # Regression: `since`/`until` took Unix timestamps ("0", "0.0") and bare dates (found by the negative run).
    with live.client(demo.admin_key) as admin:
        response = admin.get("/v1/ledger", params={"until": moment})
    assert (response.status_code, response.json().get("code")) == (400, "invalid_request"), response.text


@pytest.mark.parametrize("offset", [str(2**63), "18104863449640764642758230016"])
def test_ledger_offset_past_a_sqlite_integer_is_an_invalid_request(live: Server, demo: DemoFiles, offset: str) -> None:
    # Regression: `offset` had no upper bound; from 2**63 on SQLite could not bind it and the route answered 500.
    with live.client(demo.admin_key) as admin:
        response = admin.get("/v1/ledger", params={"offset": offset})
    assert (response.status_code, response.json().get("code")) == (400, "invalid_request"), response.text
