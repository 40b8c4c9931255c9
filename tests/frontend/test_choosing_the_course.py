"""Which course pays for a front-end key's request: the one its model's alias names
(`<code> · <model>`, listed by GET /v1/models), the student's only course for a plain model, the
license alone for a student in none, the key's own course for a key made for one course; and
the 403 a student gets for a course that is not theirs."""

from __future__ import annotations

import pytest

from licensing.access.credentials import api_key_create
from licensing.access.frontend import alias
from licensing.courses.services import course_update
from licensing.models import ApiKey, Transaction, Wallet
from tests.kit import wait_for_ledger

from .conftest import CHAT, MINI, SMALL, as_user, make_school

pytestmark = pytest.mark.django_db(transaction=True)


def post(client, school, email, model=MINI, path="/v1/chat/completions"):
    body = (
        {**CHAT, "model": model}
        if "chat" in path
        else {"model": model, "input": "words", "encoding_format": "float"}
    )
    return client.post(path, headers=as_user(school.key, email), json=body)


def refusal(answer) -> dict:
    assert answer.status_code == 403, answer.text
    return answer.json()["error"]


def only_row() -> Transaction:
    wait_for_ledger(1)
    return Transaction.objects.get()


def test_a_plain_model_is_the_students_only_course(gateway, catalog, school, client):
    ana = school.student("ana@front.example")
    course = school.course("BIO-7A", members=[ana], allowance=1_000_000)
    school.course("DE-7A")  # not hers
    assert post(client, school, "ana@front.example").status_code == 200
    row = only_row()
    assert (row.course_id, row.requested_model, row.end_user_id) == (course.pk, MINI, ana.pk)


def test_a_student_in_no_course_pays_from_their_license_wallet(gateway, catalog, school, client):
    ana = school.student("ana@front.example")
    school.course("BIO-7A")
    answer = post(client, school, "ana@front.example", SMALL, "/v1/embeddings")
    assert answer.status_code == 200
    row = only_row()
    assert (row.course_id, row.end_user_id) == (None, ana.pk)
    assert set(Wallet.objects.values_list("holder", flat=True)) == {f"user:{ana.pk}"}


def test_a_student_in_two_courses_chooses_by_alias(gateway, catalog, school, client):
    ana = school.student("ana@front.example")
    bio = school.course("BIO-7A", members=[ana], allowance=1_000_000)
    german = school.course("DE-7A", members=[ana], allowance=1_000_000)
    error = refusal(post(client, school, "ana@front.example"))
    assert error == {
        "message": "You are in several courses (BIO-7A, DE-7A): choose the model named after "
        "the course you are working in, e.g. 'BIO-7A · gpt-4o-mini'",
        "code": "policy_denied",
        "param": "model",
    }
    refused = only_row()
    assert (refused.course_id, refused.end_user_id, refused.credits) == (None, ana.pk, 0)
    for course in (bio, german):
        answer = post(client, school, "ana@front.example", alias(course.code, MINI))
        assert answer.status_code == 200, answer.text
    wait_for_ledger(3)
    charged = Transaction.objects.filter(status_code=200)
    assert sorted(charged.values_list("course_id", flat=True)) == sorted([bio.pk, german.pk])
    # The ledger holds the model the alias stands for, never the alias.
    assert set(charged.values_list("requested_model", flat=True)) == {MINI}
    for course in (bio, german):
        spent = Wallet.objects.get(holder=f"course:{course.pk}:user:{ana.pk}").spent
        assert spent == charged.get(course=course).credits > 0


def test_an_alias_of_a_course_that_is_not_theirs_is_refused(gateway, catalog, school, client):
    ana = school.student("ana@front.example")
    school.course("BIO-7A", members=[ana])
    school.course("DE-7A")
    other = make_school("Other School")
    other.course("XX-1")
    for code in ("DE-7A", "XX-1", "NOPE"):
        error = refusal(post(client, school, "ana@front.example", alias(code, MINI)))
        assert error["message"] == (
            f"You are not a member of course '{code}': choose a model of one of your courses "
            "(BIO-7A)"
        )
        assert error["param"] == "model"
    assert not Wallet.objects.exists()


def test_a_switched_off_course_says_it_is_closed(gateway, catalog, school, client):
    ana = school.student("ana@front.example")
    course = school.course("BIO-7A", members=[ana])
    course_update(course=course, changes={"active": False})
    # Plain: she is in no active course now, so her license pays.
    assert post(client, school, "ana@front.example").status_code == 200
    # By alias: the course's own gate answers.
    answer = post(client, school, "ana@front.example", alias("BIO-7A", MINI))
    assert refusal(answer)["message"] == "course 'BIO-7A' is closed"


def test_a_key_for_one_course(gateway, catalog, school, client):
    ana = school.student("ana@front.example")
    ben = school.student("ben@front.example")
    bio = school.course("BIO-7A", members=[ana])
    school.course("DE-7A", members=[ana, ben])
    _, key = api_key_create(license=school.license, kind=ApiKey.Kind.FRONT_END, course=bio)
    headers = as_user(key, "ana@front.example")
    assert client.post("/v1/chat/completions", headers=headers, json=CHAT).status_code == 200
    assert only_row().course_id == bio.pk
    # Another course's alias is not this key's.
    body = {**CHAT, "model": alias("DE-7A", MINI)}
    answer = client.post("/v1/chat/completions", headers=headers, json=body)
    assert refusal(answer)["message"].startswith("You are not a member of course 'DE-7A'")
    # Ben is not in the key's course.
    headers = as_user(key, "ben@front.example")
    answer = client.post("/v1/chat/completions", headers=headers, json=CHAT)
    assert refusal(answer)["message"] == "You are not a member of the course this chat is for"
    # Its models are the course's, plain.
    listed = client.get("/v1/models", headers=headers).json()["data"]
    assert MINI in {m["id"] for m in listed} and not any(" · " in m["id"] for m in listed)


def test_models_lists_each_courses_aliases_under_its_policy(gateway, catalog, school, client):
    school.course("BIO-7A")
    school.course("DE-7A")
    school.course("OLD-1")
    course_update(course=school.license.courses.get(code="OLD-1"), changes={"active": False})
    german = school.license.courses.get(code="DE-7A")
    overlay = {"services": {"chat_completions": {"params": {"model": {"allowed": [MINI]}}}}}
    course_update(course=german, changes={"policy": overlay})
    headers = as_user(school.key)  # Open WebUI lists models without a user too
    listed = {m["id"]: m for m in client.get("/v1/models", headers=headers).json()["data"]}
    plain = {i for i in listed if " · " not in i}
    assert MINI in plain and SMALL in plain
    assert {i for i in listed if i.startswith("BIO-7A · ")} == {alias("BIO-7A", i) for i in plain}
    # The overlay names chat only, and gpt-4o-mini only (an overlay's services are the course's).
    assert {i for i in listed if i.startswith("DE-7A · ")} == {alias("DE-7A", MINI)}
    assert not any(i.startswith("OLD-1") for i in listed)
    assert listed[alias("BIO-7A", MINI)] == {**listed[MINI], "id": alias("BIO-7A", MINI)}
    one = client.get(f"/v1/models/{alias('BIO-7A', MINI)}", headers=headers)
    assert one.status_code == 200 and one.json()["id"] == alias("BIO-7A", MINI)
    # An ordinary key of the same license lists no alias.
    ordinary = api_key_create(license=school.license)[1]
    listed = client.get("/v1/models", headers={"Authorization": f"Bearer {ordinary}"}).json()
    assert not any(" · " in m["id"] for m in listed["data"])


def test_a_new_membership_is_seen_within_the_cache_ttl(gateway, catalog, school, client):
    from core.localcache import clear_all
    from licensing.courses.services import course_member_add

    ana = school.student("ana@front.example")
    course = school.course("BIO-7A")
    assert post(client, school, "ana@front.example").status_code == 200  # cached: no course
    course_member_add(course=course, end_user=ana)
    clear_all()  # what the TTL (5 s by default) does by itself; no test waits for the clock
    assert post(client, school, "ana@front.example").status_code == 200
    wait_for_ledger(2)
    assert list(Transaction.objects.order_by("created_at").values_list("course_id", flat=True)) == [
        None,
        course.pk,
    ]
