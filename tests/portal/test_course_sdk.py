"""A course key made on the portal's course page, used by the openai SDK against the live
gateway (the fake OpenAI upstream behind it): the ledger row carries the course and the end
user, the allowance, pool and license wallets are charged, the course page's numbers are those
wallets, the page's models are what GET /v1/models lists for the key, GET /v1/license names the
course, and the instructor's exam switch (a POST on the page) refuses the key's next request at
once with the spec's 403."""

from __future__ import annotations

import re

import openai
import pytest

from licensing.courses.services import course_member_add, course_teacher_add, course_update
from licensing.models import ApiKey, Transaction, Wallet
from licensing.portal import courses as portal_courses
from licensing.portal import selectors
from tests.client_helpers import assert_charged

from .conftest import make_student, signed_in
from .test_course_page import make_course, staff

pytestmark = pytest.mark.django_db(transaction=True)
MINI = "gpt-4o-mini"
KEY_RE = re.compile(r"sk-svc-[A-Za-z0-9_-]{43}")


def test_a_course_key_with_the_openai_sdk(gateway, catalog):
    user, end_user = make_student(limit=10_000_000, period="daily", strategy="per_user")
    course = make_course(end_user, allowance=3_000_000, pool_limit=8_000_000)
    course_member_add(course=course, end_user=end_user)
    teacher = staff("teacher-sdk", course.institution)
    course_teacher_add(course=course, user=teacher)
    portal = signed_in(user)
    page = f"/portal/courses/{course.pk}/"

    assert portal.post(page, {"name": "sdk"}).status_code == 302
    (key,) = set(KEY_RE.findall(portal.get(page).content.decode()))
    sdk = openai.OpenAI(api_key=key, base_url=gateway.url + "/v1", max_retries=0)
    answer = sdk.chat.completions.create(
        model=MINI, messages=[{"role": "user", "content": "Hello from the course"}]
    )
    assert answer.choices[0].message.content

    (row,) = assert_charged(1, "chat_completions", model=MINI)
    api_key = ApiKey.objects.get(end_user=end_user)
    assert (row.api_key_id, row.end_user_id, row.course_id) == (api_key.pk, end_user.pk, course.pk)
    allowance = Wallet.objects.get(holder=f"course:{course.pk}:user:{end_user.pk}")
    pool = Wallet.objects.get(holder=f"course:{course.pk}")
    license_wallet = Wallet.objects.get(holder=f"user:{end_user.pk}")
    assert allowance.spent == pool.spent == license_wallet.spent == row.credits > 0

    # The page's numbers are the wallets'.
    body = portal.get(page).content.decode()
    card = body.split('id="allowance"')[1].split("</section>")[0]
    assert f"{3_000_000 - row.credits:,} of 3,000,000 micro-credits left" in card
    pool_card = body.split('id="pool"')[1].split("</section>")[0]
    assert f"{8_000_000 - row.credits:,} of 8,000,000 micro-credits left" in pool_card
    smallest = body.split('id="course-remaining"')[1].split("</section>")[0]
    assert f"{3_000_000 - row.credits:,} micro-credits" in smallest
    by_model = body.split('id="usage-by-model"')[1].split("</table>")[0]
    assert f"<td>{MINI}</td>" in by_model and f">{row.credits:,}<" in by_model

    # GET /v1/license names the course with the same levels.
    info = sdk.get("/license", cast_to=object)
    assert isinstance(info, dict)
    assert info["course"]["id"] == course.pk and info["course"]["code"] == "CS101"
    assert info["course"]["allowance"]["used"] == allowance.spent
    assert info["course"]["pool"]["remaining"] == 8_000_000 - pool.spent
    levels = portal_courses.course_levels_of(course, end_user)
    assert levels is not None and levels.allowance.used == allowance.spent

    # The page's models are what GET /v1/models lists for the course key, overlay or not.
    listed = {model.id for model in sdk.models.list()}
    assert {m.model_id for m in selectors.usable_models(end_user, course=course)} == listed
    overlay = {"services": {"chat_completions": {"params": {"model": {"allowed": [MINI]}}}}}
    course_update(course=course, changes={"policy": overlay})
    listed = {model.id for model in sdk.models.list()}
    assert listed == {MINI}
    assert {m.model_id for m in selectors.usable_models(end_user, course=course)} == listed

    # The instructor sees the student and switches exam mode: the key is refused at once.
    instructor = signed_in(teacher)
    usage = instructor.get(page).content.decode().split('id="student-usage"')[1]
    assert "hill.example" in usage.split("</table>")[0]
    answer = instructor.post(f"/portal/courses/{course.pk}/exam/", {"exam_mode": "on"})
    assert answer.status_code == 302
    with pytest.raises(openai.PermissionDeniedError) as refused:
        sdk.chat.completions.create(model=MINI, messages=[{"role": "user", "content": "exam?"}])
    assert refused.value.status_code == 403
    assert "course 'CS101' is in exam mode" in str(refused.value)
    refusal = Transaction.objects.order_by("-id").first()
    assert refusal is not None
    assert (refusal.status_code, refusal.course_id, refusal.credits) == (403, course.pk, 0)
    assert "Exam mode" in portal.get(page).content.decode()
