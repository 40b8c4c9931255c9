"""Model rules for several services at once (issue 37, item 4), through /v1: the report was
"chat limited to gpt-4o-mini, a student still used gpt-4.1 through /v1/responses (58 credits)".
A license type's `models.text` rule holds for chat completions and responses together, and
`models.all` for every service; a refusal is the usual 403 before any provider call, with a
ledger row at 0 credits; GET /v1/models lists what the rules leave; a course's overlay narrows
them the same way."""

from __future__ import annotations

import pytest

from licensing.access.credentials import api_key_create
from licensing.models import ApiKey, Course, CourseMember, EndUser, Transaction
from tests.kit import wait_for_ledger

pytestmark = pytest.mark.django_db(transaction=True)

MINI, BIG = "gpt-4o-mini", "gpt-4.1"
SMALL = "text-embedding-3-small"
HELLO = [{"role": "user", "content": "hello"}]
TEXT_MINI = {
    "version": 1,
    "models": {"text": {"allowed": [MINI]}},
    "services": {"chat_completions": {}, "responses": {}, "embeddings": {}},
}


def _auth(make_license, make_key, policy, name="scopes") -> dict:
    return {"Authorization": f"Bearer {make_key(make_license(name=name, policy=policy))}"}


def _chat(client, auth, model):
    return client.post(
        "/v1/chat/completions", json={"model": model, "messages": HELLO}, headers=auth
    )


def _respond(client, auth, model):
    return client.post("/v1/responses", json={"model": model, "input": "hello"}, headers=auth)


def _embed(client, auth, model):
    return client.post("/v1/embeddings", json={"model": model, "input": "x"}, headers=auth)


def _denied(response, allowed: str) -> None:
    assert response.status_code == 403, response.text
    assert response.json()["error"] == {
        "message": f"'model' must be one of: [{allowed}]",
        "code": "policy_denied",
        "param": "model",
    }


def test_the_report_gpt_4_1_through_responses_is_refused(client, catalog, make_license, make_key):
    auth = _auth(make_license, make_key, TEXT_MINI)
    _denied(_respond(client, auth, BIG), MINI)
    _denied(_chat(client, auth, BIG), MINI)
    assert catalog["direct"].requests == []  # refused before any provider call
    assert _respond(client, auth, MINI).status_code == 200
    assert _chat(client, auth, MINI).status_code == 200
    # `text` does not hold for embeddings.
    assert _embed(client, auth, SMALL).status_code == 200
    wait_for_ledger(5)
    refusals = Transaction.objects.filter(status_code=403).order_by("id")
    assert [(r.service, r.requested_model, r.credits, r.wallet_id) for r in refusals] == [
        ("responses", BIG, 0, None),
        ("chat_completions", BIG, 0, None),
    ]
    models = client.get("/v1/models", headers=auth).json()["data"]
    ids = {m["id"] for m in models}
    assert MINI in ids and SMALL in ids
    assert BIG not in ids and "gpt-4o" not in ids


def test_a_models_rule_for_every_service(client, catalog, make_license, make_key):
    policy = {
        "version": 1,
        "models": {"all": {"allowed": [MINI, SMALL]}},
        "services": {"chat_completions": {}, "responses": {}, "embeddings": {}},
    }
    auth = _auth(make_license, make_key, policy)
    _denied(_respond(client, auth, BIG), f"{MINI}, {SMALL}")
    _denied(_embed(client, auth, "text-embedding-3-large"), f"{MINI}, {SMALL}")
    assert _embed(client, auth, SMALL).status_code == 200
    assert _chat(client, auth, MINI).status_code == 200


def test_a_service_rule_and_a_models_rule_both_hold(client, catalog, make_license, make_key):
    """The service's own rule and `models.text` are conjoined: the 403 lists exactly the
    models both allow."""
    policy = {
        "version": 1,
        "models": {"text": {"allowed": [MINI, "gpt-4o"]}},
        "services": {
            "chat_completions": {"params": {"model": {"allowed": ["gpt-4o", BIG]}}},
            "responses": {},
        },
    }
    auth = _auth(make_license, make_key, policy)
    _denied(_chat(client, auth, BIG), "gpt-4o")
    _denied(_chat(client, auth, MINI), "gpt-4o")
    _denied(_respond(client, auth, BIG), f"{MINI}, gpt-4o")
    assert _respond(client, auth, MINI).status_code == 200


def test_a_course_overlay_narrows_text_models(client, catalog, make_license, make_key):
    license = make_license(name="open", policy={**TEXT_MINI, "models": {}})
    course = Course.objects.create(
        institution=license.institution, license=license, name="Intro", code="CS1"
    )
    course.policy = {"models": {"text": {"allowed": [MINI]}}, "services": {"responses": {}}}
    course.full_clean()
    course.save()
    student = EndUser.objects.create(license=license, subject="student-1")
    CourseMember.objects.create(course=course, end_user=student)
    row, key = api_key_create(license=license, end_user=student, name="course key")
    ApiKey.objects.filter(pk=row.pk).update(course=course)
    member = {"Authorization": f"Bearer {key}"}
    _denied(_respond(client, member, BIG), MINI)
    assert _respond(client, member, MINI).status_code == 200
    plain = {"Authorization": f"Bearer {make_key(license)}"}
    assert _respond(client, plain, BIG).status_code == 200  # the license itself is open


def test_the_admin_limits_chat_and_responses_in_the_policy_form(
    client, catalog, make_license, make_key, admin_client
):
    """The report's path: an admin limits the models in the license type's form, and the
    student's requests through either text service are ruled by it."""
    from licensing.models import LicenseType

    from ..console.test_admin import form_data, url

    license = make_license(name="form", policy={"version": 1, "services": TEXT_MINI["services"]})
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    assert _respond(client, auth, BIG).status_code == 200  # open before
    change = url(LicenseType, "change", license.license_type_id)
    data = form_data(admin_client.get(change))
    data["policyform-models__text"] = [MINI]
    response = admin_client.post(change, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    _denied(_respond(client, auth, BIG), MINI)
    _denied(_chat(client, auth, BIG), MINI)
    assert _respond(client, auth, MINI).status_code == 200
