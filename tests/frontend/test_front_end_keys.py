"""A front-end key acting for the students Open WebUI's forwarded headers name, end to end on the
live gateway with the fake OpenAI upstream: each student's request pays exactly as that
student's own course key would (their allowance, the course pool, their license wallet), the
course's rules refuse with a message the chat shows, and the teacher's per-student usage lists
every student. The SDK stands in for Open WebUI (`default_headers`)."""

from __future__ import annotations

from datetime import timedelta

import openai
import pytest
from django.db.models import Sum

from core import clock
from core.errors import AUTH_INVALID
from licensing.access.frontend import UNNAMED, portal_url
from licensing.courses.services import course_update, course_window_add
from licensing.courses.usage import course_usage
from licensing.models import ApiKey, CourseWindow, Transaction, Wallet
from tests.kit import error, wait_for_ledger

from .conftest import CHAT, MINI, as_user, chat_client

# The wallets and the ledger are written by the two databases' own writers: both passes.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.both_databases]


def wallets(license) -> dict[str, int]:
    return dict(Wallet.objects.filter(license=license).values_list("holder", "spent"))


def ledger_sum(**filters) -> int:
    return Transaction.objects.filter(**filters).aggregate(s=Sum("credits"))["s"] or 0


def chat(gateway, school, email, model=MINI, **headers):
    sdk = chat_client(gateway, school.key, email, **headers)
    return sdk.chat.completions.create(
        model=model, messages=[{"role": "user", "content": f"Hello from {email}"}]
    )


# --- two students of one course ------------------------------------------------------------


def test_two_students_each_pay_from_their_own_wallets(gateway, catalog, school):
    ana = school.student("ana@front.example")
    ben = school.student("ben@front.example")
    course = school.course("BIO-7A", members=[ana, ben], allowance=5_000_000, pool_limit=9_000_000)
    for email, times in (("ana@front.example", 2), ("ben@front.example", 1)):
        for _ in range(times):
            assert chat(gateway, school, email).choices[0].message.content
    wait_for_ledger(3)

    rows = Transaction.objects.filter(license=school.license)
    assert set(rows.values_list("api_key_id", "course_id", "status_code")) == {
        (school.key_row.pk, course.pk, 200)
    }
    assert rows.filter(end_user=ana).count() == 2 and rows.filter(end_user=ben).count() == 1
    spent = wallets(school.license)
    for student in (ana, ben):
        mine = ledger_sum(end_user=student)
        assert mine > 0
        assert spent[f"user:{student.pk}"] == mine  # the license wallet: the student's own
        assert spent[f"course:{course.pk}:user:{student.pk}"] == mine  # their allowance
    assert spent[f"course:{course.pk}"] == ledger_sum(license=school.license)  # the pool
    # The front-end key's own wallet is never spent.
    assert f"key:{school.key_row.pk}" not in spent

    # The teacher's per-student usage lists both, each with their rows.
    usage = {row.end_user_id: row for row in course_usage(course).rows}
    assert usage[ana.pk].requests == 2 and usage[ben.pk].requests == 1
    assert usage[ana.pk].credits == ledger_sum(end_user=ana)
    assert usage[ana.pk].student == "ana@front.example"


def test_exam_mode_refuses_the_next_message_with_a_readable_error(gateway, catalog, school):
    ana = school.student("ana@front.example")
    course = school.course("BIO-7A", members=[ana])
    assert chat(gateway, school, "ana@front.example").choices
    course_update(course=course, changes={"exam_mode": True})
    with pytest.raises(openai.PermissionDeniedError) as refused:
        chat(gateway, school, "ana@front.example")
    assert refused.value.status_code == 403
    assert refused.value.body == {
        "message": "course 'BIO-7A' is in exam mode",
        "code": "policy_denied",
        "param": None,
    }
    wait_for_ledger(2)
    refusal = Transaction.objects.get(status_code=403)
    assert (refusal.end_user_id, refusal.course_id, refusal.credits) == (ana.pk, course.pk, 0)
    assert refusal.error_code == "policy_denied"


def test_a_closed_window_says_when_the_course_opens(gateway, catalog, school, client):
    ana = school.student("ana@front.example")
    course = school.course("BIO-7A", members=[ana])
    opens = clock.utcnow().replace(microsecond=0) + timedelta(days=1)
    course_window_add(
        course=course,
        kind=CourseWindow.Kind.ACCESS,
        starts_at=opens,
        ends_at=opens + timedelta(hours=2),
    )
    answer = client.post(
        "/v1/chat/completions", headers=as_user(school.key, "ana@front.example"), json=CHAT
    )
    assert error(answer, 403) == f"course 'BIO-7A' is closed until {opens.isoformat()}"


# --- who the headers name -------------------------------------------------------------------


def test_an_unknown_student_is_told_to_sign_in_once(gateway, catalog, school, client):
    headers = as_user(school.key, "new@front.example")
    answer = client.post("/v1/chat/completions", headers=headers, json=CHAT)
    message = error(answer, 401)
    assert portal_url() in message and "sign in once" in message
    assert "Front School" in message
    assert not Transaction.objects.exists() and not Wallet.objects.exists()
    # Signing in once makes them known: nothing negative was cached.
    new = school.student("new@front.example")
    answer = client.post("/v1/chat/completions", headers=headers, json=CHAT)
    assert answer.status_code == 200
    wait_for_ledger(1)
    assert Transaction.objects.get().end_user_id == new.pk


def test_a_front_end_key_without_the_headers_spends_nothing(gateway, catalog, school, client):
    school.student("ana@front.example")
    answer = client.post("/v1/chat/completions", headers=as_user(school.key), json=CHAT)
    assert error(answer, 401) == UNNAMED
    assert not Transaction.objects.exists() and not Wallet.objects.exists()
    # Open WebUI lists the models without a user: that answers.
    assert client.get("/v1/models", headers=as_user(school.key)).status_code == 200


def test_the_model_list_never_depends_on_who_asks(gateway, catalog, school, client):
    """Open WebUI refreshes its one model list with the headers of whoever's page asked: a
    teacher unknown to the gateway, or an odd address, still gets the list, the same one."""
    school.student("ana@front.example")
    school.course("BIO-7A")
    lists = [
        client.get("/v1/models", headers=as_user(school.key, email)).json()
        for email in (None, "ana@front.example", "teacher@front.example", "not an address")
    ]
    assert lists[0]["data"] and all(listed == lists[0] for listed in lists)


def test_the_license_answer_is_the_named_students(gateway, catalog, school, client):
    ana = school.student("ana@front.example")
    assert (
        client.post(
            "/v1/chat/completions", headers=as_user(school.key, "ana@front.example"), json=CHAT
        ).status_code
        == 200
    )
    wait_for_ledger(1)
    spent = Wallet.objects.get(holder=f"user:{ana.pk}").spent
    mine = client.get("/v1/license", headers=as_user(school.key, "ana@front.example")).json()
    assert mine["budget"]["used"] == spent > 0
    keys = client.get("/v1/license", headers=as_user(school.key)).json()
    assert keys["budget"]["used"] == 0  # the key's own view: nothing spent from it
    unknown = client.get("/v1/license", headers=as_user(school.key, "who@front.example"))
    assert unknown.status_code == 401


def test_an_ordinary_key_ignores_the_headers(gateway, catalog, school, client, make_key):
    ana = school.student("ana@front.example")
    school.course("BIO-7A", members=[ana], allowance=5_000_000)
    key = make_key(school.license)
    headers = {**as_user(key, "ana@front.example"), "X-OpenWebUI-User-Id": "x"}
    assert client.post("/v1/chat/completions", headers=headers, json=CHAT).status_code == 200
    wait_for_ledger(1)
    row = Transaction.objects.get()
    assert (row.end_user_id, row.course_id) == (None, None)
    ordinary = ApiKey.objects.get(kind=ApiKey.Kind.STANDARD)
    assert set(wallets(school.license)) == {f"key:{ordinary.pk}"}


def test_a_revoked_front_end_key_is_an_invalid_key(gateway, catalog, school, client):
    school.student("ana@front.example")
    ApiKey.objects.filter(pk=school.key_row.pk).update(active=False)
    from core.localcache import clear_all

    clear_all()
    answer = client.post(
        "/v1/chat/completions", headers=as_user(school.key, "ana@front.example"), json=CHAT
    )
    assert error(answer, 401) == AUTH_INVALID
