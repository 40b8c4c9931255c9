"""A course's instructions (issue 39, licensing.courses.instructions): put before every chat and
responses request of the course's members, as the system message or `instructions` each
provider expects; a client cannot remove them; paid for in the tokens the provider counts; not
judged by the guardrails (the client's text is); a request outside the course is unchanged."""

from __future__ import annotations

import pytest

from fake_upstreams import gemini_chat as fake_gemini
from licensing.courses.instructions import instructed
from licensing.courses.services import (
    course_create,
    course_key_create,
    course_member_add,
    course_update,
)
from licensing.models import EndUser, Transaction
from tests.kit import wait_for_ledger

pytestmark = pytest.mark.django_db(transaction=True)

MINI = "gpt-4o-mini"
TUTOR = "You are a Socratic tutor. Ask questions; never write the essay."
HELLO = [{"role": "user", "content": "Write my essay on the French revolution."}]


@pytest.fixture
def course(license):
    return course_create(license=license, name="History 9b", code="HIS9B", instructions=TUTOR)


@pytest.fixture
def course_auth(license, course):
    student = EndUser.objects.create(license=license, subject="student-1")
    course_member_add(course=course, end_user=student)
    _, key = course_key_create(course=course, end_user=student, name="course key", via="test")
    return {"Authorization": f"Bearer {key}"}


def chat(client, auth, model=MINI, messages=HELLO, **extra):
    body = {"model": model, "messages": messages, **extra}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_chat_request_gets_the_instructions_first(client, catalog, course_auth):
    own = [{"role": "system", "content": "Answer in French."}, *HELLO]
    chat(client, course_auth, messages=own)
    sent = catalog["direct"].last.json["messages"]
    assert sent == [{"role": "system", "content": TUTOR}, *own]


def test_a_responses_request_gets_them_before_its_own(client, catalog, course_auth):
    body = {"model": MINI, "input": "Write my essay.", "instructions": "Be brief."}
    response = client.post("/v1/responses", json=body, headers=course_auth)
    assert response.status_code == 200, response.text
    assert catalog["direct"].last.json["instructions"] == f"{TUTOR}\n\nBe brief."
    del body["instructions"]
    assert client.post("/v1/responses", json=body, headers=course_auth).status_code == 200
    assert catalog["direct"].last.json["instructions"] == TUTOR


def test_a_stream_gets_them_too(client, catalog, course_auth):
    with client.stream(
        "POST",
        "/v1/chat/completions",
        json={"model": MINI, "messages": HELLO, "stream": True},
        headers=course_auth,
    ) as response:
        assert response.status_code == 200
        response.read()
    assert catalog["direct"].last.json["messages"][0] == {"role": "system", "content": TUTOR}


def test_outside_the_course_nothing_is_added(client, catalog, course, auth):
    chat(client, auth)
    assert catalog["direct"].last.json["messages"] == HELLO


def test_a_course_without_instructions_sends_the_body_as_it_is(
    client, catalog, course, course_auth
):
    course_update(course=course, changes={"instructions": ""})
    chat(client, course_auth)
    assert catalog["direct"].last.json["messages"] == HELLO


def test_the_student_pays_for_them(client, catalog, license, course, course_auth, make_key):
    plain = {"Authorization": f"Bearer {make_key(license)}"}
    without = chat(client, plain)["usage"]
    with_them = chat(client, course_auth)["usage"]
    assert with_them["prompt_tokens"] > without["prompt_tokens"]
    assert with_them["credits_used"] > without["credits_used"]
    wait_for_ledger(2)
    row = Transaction.objects.filter(course=course).get()
    assert row.prompt_tokens == with_them["prompt_tokens"]
    assert row.credits == with_them["credits_used"]


def test_the_guardrails_judge_the_client_s_text_not_the_teacher_s(
    client, catalog, license, course, course_auth
):
    license.license_type.guardrails = {"input": {"patterns": ["(?i)never write the essay"]}}
    license.license_type.save()
    chat(client, course_auth)  # the pattern is in the instructions only: allowed
    mine = [{"role": "user", "content": "Never write the essay, please."}]
    response = client.post(
        "/v1/chat/completions", json={"model": MINI, "messages": mine}, headers=course_auth
    )
    assert response.status_code == 400, response.text


def test_a_change_is_in_force_on_the_next_request(client, catalog, course, course_auth):
    chat(client, course_auth)
    course_update(course=course, changes={"instructions": "Answer only in German."})
    chat(client, course_auth)
    assert catalog["direct"].last.json["messages"][0]["content"] == "Answer only in German."


def test_anthropic_gets_them_as_its_system(client, claude_catalog, anthropic_upstream, course_auth):
    chat(client, course_auth, model="claude-haiku-4-5")
    system = anthropic_upstream.last.json["system"]
    texts = [system] if isinstance(system, str) else [block["text"] for block in system]
    assert texts == [TUTOR]
    assert anthropic_upstream.last.json["messages"][0]["role"] == "user"


def test_anthropic_responses_get_them_through_the_bridge(
    client, claude_catalog, anthropic_upstream, course_auth
):
    body = {"model": "claude-haiku-4-5", "input": "Write my essay."}
    response = client.post("/v1/responses", json=body, headers=course_auth)
    assert response.status_code == 200, response.text
    system = anthropic_upstream.last.json["system"]
    assert TUTOR in (system if isinstance(system, str) else system[0]["text"])


def test_gemini_gets_them_as_its_system_instruction(client, gemini_chat, course_auth):
    chat(client, course_auth, model="gemini-2.5-flash")
    sent = fake_gemini.normalize(gemini_chat.last.json)
    assert sent["systemInstruction"]["parts"] == [{"text": TUTOR}]


def test_bedrock_gets_them_as_its_system(client, bedrock_chat, course_auth):
    chat(client, course_auth, model="nova-pro")
    converse = [r.json for r in bedrock_chat["cloud"].requests if r.path.endswith("/converse")]
    assert converse[-1]["system"][0] == {"text": TUTOR}


def test_the_shapes_as_the_try_panel_shows_them():
    chat = {"model": MINI, "messages": HELLO}
    assert instructed("chat_completions", chat, TUTOR)["messages"] == [
        {"role": "system", "content": TUTOR},
        *HELLO,
    ]
    assert instructed("responses", {"input": "x"}, TUTOR)["instructions"] == TUTOR
    joined = instructed("responses", {"input": "x", "instructions": "Be brief."}, TUTOR)
    assert joined["instructions"] == f"{TUTOR}\n\nBe brief."
    assert instructed("embeddings", {"input": "x"}, TUTOR) == {"input": "x"}
    assert instructed("chat_completions", chat, "") is chat
    assert instructed("chat_completions", ["not", "an", "object"], TUTOR) == ["not", "an", "object"]
