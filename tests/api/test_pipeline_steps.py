"""inference.pipeline's named steps without a server or a database: the policy in force, the
input guardrail, step 7's routes, and the request's last step (its ledger row through
`_record`, then the access log's code, the metrics, fair use's tokens). The whole pipeline end
to end: the rest of tests/api and tests/money."""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest

from catalog import routing
from catalog.routing import ConnectionMisconfigured
from core import metrics
from core.errors import BadRequest, ServiceUnavailable
from inference import pipeline
from inference.billing import Usage
from inference.pipeline import (
    Call,
    Operation,
    ProviderResult,
    _conclude,
    _guarded_input,
    _policy_in_force,
    _routes,
)
from licensing.access.credentials import LicenseInfo, Principal
from licensing.ledger import record
from licensing.ledger.budget import BudgetConfig
from licensing.rules.guardrails import Guardrails

from ..providers.test_routing import CATALOG, choose


@pytest.fixture(autouse=True)
def fresh_round_robin():
    """Step 7 picks a connection by weighted round-robin, whose scores are per process: each
    test here starts, and leaves the other tests, at its first pick."""
    routing._scores.clear()
    yield
    routing._scores.clear()


def principal(policy=None, guardrails=None, course_id=None) -> Principal:
    license = LicenseInfo(
        id=5,
        name="demo",
        institution="school",
        institution_id=3,
        active=True,
        type_id=1,
        type_name="t",
        type_active=True,
        policy=policy,
        guardrails=guardrails,
        budget=BudgetConfig(unit="credits", strategy="pooled", period="none", limit=None),
    )
    return Principal(license=license, api_key_id=9, end_user_id=None, course_id=course_id)


class Chat(Operation):
    endpoint = "chat_completions"
    service = "chat_completions"

    def input_texts(self, body):
        return (message for message in body.messages)

    def prepare(self, route, body):
        return None if body.keep else replace(route, upstream_model="x")


def make_call(who: Principal, **fields) -> Call:
    request = SimpleNamespace(request_id="req-1", started_at=0.0, error_code="unset")
    body = SimpleNamespace(**{"model": "gpt-4o-mini", "messages": ["hi"], "keep": True, **fields})
    return Call(request, "req-1", who, body, {}, {"m": "1"})


@pytest.fixture
def gateway_log(caplog):
    """What the `gateway` logger writes (it does not propagate: caplog listens on it)."""
    logger = logging.getLogger("gateway")
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


def test_the_course_policy_judges_instead_of_the_license_types():
    license_policy, course_policy = object(), object()
    assert _policy_in_force(principal(license_policy), None) is license_policy
    assert _policy_in_force(principal(license_policy), course_policy) is course_policy
    with pytest.raises(ServiceUnavailable) as refused:
        _policy_in_force(principal(None), None)
    assert refused.value.reason == "the license type's policy document cannot be evaluated"


def test_the_input_guardrail_checks_the_texts_and_hands_them_to_moderation():
    guardrails = Guardrails(input=(re.compile("secret"),), moderation=frozenset({"input"}))
    call = make_call(principal(guardrails=guardrails), messages=["hello", "there"])
    assert _guarded_input(call.principal, Chat(), call.body) == (guardrails, ["hello", "there"])
    blocked = make_call(principal(guardrails=guardrails), messages=["a secret"])
    with pytest.raises(BadRequest):
        _guarded_input(blocked.principal, Chat(), blocked.body)
    with pytest.raises(ServiceUnavailable) as refused:
        _guarded_input(principal(guardrails=None), Chat(), call.body)
    assert refused.value.reason == "the license type's guardrails cannot be evaluated"


class Policy:
    connection_tags: frozenset[str] = frozenset()


def test_step_7_refines_the_first_route_for_its_provider():
    call = make_call(principal(), keep=False)
    routes = _routes(call, Chat(), CATALOG, None, None, Policy())
    assert (routes.first.provider.slug, routes.first.upstream_model) == ("direct", "x")
    kept = _routes(make_call(principal()), Chat(), CATALOG, None, None, Policy())
    assert (kept.first.provider.slug, kept.first.upstream_model) == ("direct", "gpt-4o-mini")


def test_a_misconfigured_connection_is_logged_for_the_operator(gateway_log):
    call = make_call(principal(), model="gpt-4o-mini")
    pin = SimpleNamespace(slug="direct", connection="nokey")
    with pytest.raises(ConnectionMisconfigured):
        _routes(call, Chat(), CATALOG, pin, None, Policy())
    assert "connection direct/nokey is misconfigured: missing " in gateway_log.text
    assert "request req-1 for model 'gpt-4o-mini' refused (license demo)" in gateway_log.text


BUDGET = SimpleNamespace(lease=None)  # the budget step's state, as the door receives it


@pytest.fixture
def written(monkeypatch):
    """The ledger's door, metrics and fair use, as calls."""
    calls: list[tuple] = []

    async def transaction_record(*, entry, budget, lease=None):
        calls.append(("row", entry, budget))
        return 40

    async def add_tokens(window, tokens):
        calls.append(("tokens", window, tokens))

    monkeypatch.setattr(pipeline, "transaction_record", transaction_record)
    monkeypatch.setattr(pipeline.fairuse, "add_tokens", add_tokens)
    monkeypatch.setattr(metrics, "ENABLED", True)
    monkeypatch.setattr(pipeline, "_observe", lambda call, e, r: calls.append(("metrics", r)))
    return calls


def test_an_answer_is_charged_then_observed_then_counted_for_fair_use(written):
    call = make_call(principal())
    call.budget, call.fair_use, call.route = BUDGET, "window", choose("gpt-4o-mini")
    call.attempts, call.failovers = 2, ["direct/eu: timeout"]
    usage = Usage(prompt_tokens=3, completion_tokens=4, total_tokens=7)
    result = ProviderResult(body={}, billed_model="gpt-4o-mini", usage=usage, credits=12)
    assert asyncio.run(_conclude(call, Chat(), status=200, result=result)) == 40
    (_, entry, budget), observed, tokens = written
    assert (budget, observed, tokens) == (BUDGET, ("metrics", 40), ("tokens", "window", 7))
    assert (entry.provider, entry.connection, entry.attempts, entry.failovers) == (
        "direct",
        call.route.connection.name,
        2,
        "direct/eu: timeout",
    )
    assert (entry.credits, entry.total_tokens, entry.outcome, entry.error_code) == (
        12,
        7,
        "success",
        "",
    )
    assert (entry.license_id, entry.api_key_id, entry.metadata) == (5, 9, {"m": "1"})
    assert call.request.error_code is None


def test_a_refusal_charges_no_wallet_and_counts_no_tokens(written):
    call = make_call(principal())
    call.budget, call.fair_use = BUDGET, "window"
    error = (pipeline._BUDGET, BadRequest("Out of budget"))
    asyncio.run(_conclude(call, Chat(), status=400, error=error))
    assert [c[0] for c in written] == ["row", "metrics"]
    entry, budget = written[0][1:]
    assert (budget, entry.error_code, entry.error_message, entry.provider) == (
        None,
        record.OUT_OF_BUDGET,
        "Out of budget",
        "",
    )
    assert call.request.error_code == record.OUT_OF_BUDGET


def test_a_failed_metric_never_fails_the_request(written, monkeypatch, gateway_log):
    monkeypatch.setattr(pipeline, "_observe", lambda *a: 1 / 0)
    assert asyncio.run(_conclude(make_call(principal()), Chat(), status=200)) == 40
    assert "metrics of request req-1 not recorded" in gateway_log.text
