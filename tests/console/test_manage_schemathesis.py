"""Property-based run over /manage/v1/openapi.json (schemathesis), as tests/api/test_schemathesis.py
runs /v1's: whatever an institution admin's script sends (valid and invalid bodies, query
parameters and path ids, NUL, lone surrogates, huge numbers), the live gateway never answers a
5xx of its own, and what it answers with a declared status has the declared shape.

The live gateway serves two seeded institutions (tests.console.test_admin.make_licensing); the
caller is institution a's admin, with a management token. Path ids are half random, half the
seeded rows' (a random id is a 404, which tests little). The examples are bounded and
derandomized so that CI is stable and quick (GATEWAY_MANAGE_SCHEMATHESIS_EXAMPLES, 12;
GATEWAY_MANAGE_SCHEMATHESIS_COVERAGE=1 adds the coverage phase's boundary cases: run it by hand)."""

from __future__ import annotations

import os

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from .test_admin import make_licensing
from .test_manage_api import user_with

pytestmark = pytest.mark.django_db(transaction=True)

MAX_EXAMPLES = int(os.environ.get("GATEWAY_MANAGE_SCHEMATHESIS_EXAMPLES", "12"))
COVERAGE = os.environ.get("GATEWAY_MANAGE_SCHEMATHESIS_COVERAGE") == "1"  # by hand: every phase
CHECKS = [not_a_server_error, content_type_conformance, response_schema_conformance]


@pytest.fixture
def seeded(gateway):
    a, b = make_licensing("a"), make_licensing("b")
    user = user_with("admin", a["institution"])
    token = Token.objects.create(user=user)
    return {"a": a, "b": b, "headers": {"Authorization": f"Token {token.key}"}}


def _seeded_ids(world) -> dict[str, list]:
    """What each path parameter may name: a's row (found), b's (another institution's: 404)."""
    a, b = world["a"], world["b"]
    return {
        "/manage/v1/courses/": [a["course"].pk, b["course"].pk],
        "/manage/v1/keys/": [a["api_key"].pk, b["api_key"].pk],
        "/manage/v1/licenses/": [a["license"].pk, b["license"].pk],
        "/manage/v1/end-users/": [a["end_user"].pk],
        "/manage/v1/transactions/": [a["transaction"].pk],
        "/manage/v1/audit/": [a["audit_event"].pk],
        "window_id": [a["course_window"].pk],
        "member_id": [a["course_member"].pk],
    }


@pytest.fixture
def manage_schema(gateway, seeded):
    headers = seeded["headers"]
    document = httpx.get(
        f"{gateway.url}/manage/v1/openapi.json", headers=headers, timeout=30
    ).json()  # built on the first request: slow when no earlier test asked for it
    schema = schemathesis.openapi.from_dict(document)
    schema.config.update(base_url=gateway.url)
    schema.config.generation.modes = list(GenerationMode)  # valid and invalid requests
    # The coverage phase's boundary cases are ~60 % of the requests (over 30 operations: a
    # minute, too long for CI); the fuzzing phase's examples, hostile scalars included, stay.
    schema.config.phases.coverage.enabled = COVERAGE
    ids = _seeded_ids(seeded)

    @schema.hook
    def flatmap_path_parameters(context, path_parameters):
        if not path_parameters:
            return st.just(path_parameters)
        path = context.operation.path
        variants = [path_parameters]
        known = {"id": next((v for p, v in ids.items() if path.startswith(p)), [])}
        known |= {name: ids[name] for name in ("window_id", "member_id") if name in path}
        for name, values in known.items():
            if name in path_parameters:
                variants += [{**path_parameters, name: value} for value in values]
        return st.sampled_from(variants)

    return schema


schema = schemathesis.pytest.from_fixture("manage_schema")


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_manage_openapi_contract(case, seeded, keep_alive_http):
    response = case.call(headers=seeded["headers"], timeout=30, session=keep_alive_http)
    case.validate_response(response, checks=CHECKS)
