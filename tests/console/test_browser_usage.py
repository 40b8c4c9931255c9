"""The usage page in a real browser (Debian's chromium through Playwright) on a server started
the way the README starts it: requests made with a school's key through the official openai SDK
show up in the charts and the totals, for the superuser (with the institution selector) and
for a reviewer of that school (without it); bad parameters are a message on the page.
Screenshots in var/screenshots/usage-*.png."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import openai
import pytest
from openai import OpenAI

from tests.browser import BROWSER_TEST, SHOTS, login, shot

pytestmark = BROWSER_TEST

# This module's school on the session's README server (shared by the browser modules): the
# usage of "today" in it is exactly this module's requests.
SCHOOL, LICENSE, REVIEWER = "Usage school", "usage-class", ("uma", "uma-pass-123")

# Twenty past days of ledger rows for the module's school and a second school, so that the
# charts show more than today (run on the server's own database through manage.py shell).
HISTORY = """
from datetime import timedelta
from django.utils import timezone
from licensing.models import License, Transaction
from licensing.access.services import license_create
demo = License.objects.get(name="usage-class")
other = license_create(name="second-class", institution="Second school")
now = timezone.now()
rows = []
for day in range(1, 21):
    for n in range(day % 4 + 1):
        for lic, service, model, credits in (
            (demo, "embeddings", "text-embedding-3-small", 20 * day + n),
            (demo, "chat_completions", "gpt-4o-mini", 900 * (n + 1) + 37 * day),
            (other, "chat_completions", "o4-mini", 1500),
        ):
            rows.append(Transaction(
                created_at=now - timedelta(days=day, minutes=n), request_id=f"h-{day}-{n}-{model}",
                license=lic, service=service, requested_model=model, billed_model=model,
                provider="direct", status_code=200, credits=credits,
            ))
    rows.append(Transaction(
        created_at=now - timedelta(days=day), request_id=f"h-{day}-denied", license=demo,
        service="chat_completions", requested_model="gpt-4o", provider="", status_code=403,
        credits=0, outcome="denied", error_code="policy_denied",
    ))
Transaction.objects.bulk_create(rows)
"""


def make_requests(server, key: str) -> tuple[int, int]:
    """Embeddings and chat with the module's key, a failed and a refused request: (credits,
    requests)."""
    client = OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)
    credits = requests = 0
    for text in ("usage one", "usage two", "usage three"):
        answer = client.embeddings.create(
            model="text-embedding-3-small", input=text, encoding_format="float"
        )
        credits += answer.usage.model_extra["credits_used"]
        requests += 1
    for text in ("hello", "how are you?"):
        chat = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": text}]
        )
        credits += chat.usage.model_extra["credits_used"]
        requests += 1
    # The provider does not know the model (a client error), and a pin to a provider that
    # does not exist (refused by the gateway): both are ledger rows with 0 credits.
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"X-Service-Provider": "nowhere"},
        )
    return credits, requests + 2


def wait_for_ledger(page, server, query: str, requests: int) -> dict:
    """The usage API (with the page's session) once the batched ledger writes have landed."""
    body = {}
    for _ in range(50):
        body = page.request.get(f"{server.url}/manage/v1/usage?{query}").json()
        if body.get("totals", {}).get("requests", 0) >= requests:
            return body
        page.wait_for_timeout(200)
    raise AssertionError(f"the ledger never reached {requests} requests: {json.dumps(body)}")


def bars(page, chart: str) -> int:
    return page.locator(f"#{chart} svg g.bars rect").count()


def test_usage_page_in_a_browser(server, page):
    _, key, _, _ = server.manage_many(
        ("create_license", LICENSE, "--institution", SCHOOL),
        ("create_api_key", LICENSE),
        (
            ("create_institution_admin", SCHOOL, REVIEWER[0], "--role", "reviewer", "--noinput"),
            {"DJANGO_SUPERUSER_PASSWORD": REVIEWER[1]},
        ),
        ("shell", "-c", HISTORY),
    )
    credits, requests = make_requests(server, key.strip())
    login(page, server, "admin", server.admin_password())
    today = datetime.now(UTC).date()
    tomorrow = today + timedelta(days=1)

    # The default range: the last 30 days, every institution, the history included.
    page.goto(server.url + "/admin/licensing/transaction/usage/")
    assert page.locator("#credits-by-service svg").is_visible()
    assert bars(page, "credits-by-service") > 20 and bars(page, "requests-by-outcome") > 20
    assert page.locator("#id_institution").is_visible()
    assert "Last 30 days" in page.inner_text(".usage-presets [aria-current]")
    shot(page, "usage-01-superuser-30-days")
    page.locator("#credits-by-model").screenshot(path=str(SHOTS / "usage-01-one-chart.png"))

    # Today in the module's school: exactly the requests made above.
    demo = page.locator("#id_institution option", has_text=SCHOOL).get_attribute("value")
    page.select_option("#id_institution", demo)
    page.fill("#id_since", today.isoformat())
    page.fill("#id_until", tomorrow.isoformat())
    query = f"institution={demo}&since={today}&until={tomorrow}"
    api = wait_for_ledger(page, server, query, requests)
    page.click("#usage-form input[type=submit]")
    page.wait_for_selector("#usage-totals")
    assert page.inner_text("#total-credits dd") == f"{credits:,}" == f"{api['totals']['credits']:,}"
    assert page.inner_text("#total-requests dd") == str(api["totals"]["requests"])
    assert api["totals"]["requests"] == requests
    assert page.inner_text("#total-denied dd") == "1"  # refusals count
    assert page.inner_text("#total-client_error dd") == "1"
    assert bars(page, "credits-by-service") == 2  # one day, embeddings and chat
    assert bars(page, "requests-by-outcome") == 3  # one day: success, client error, denied
    svg = page.locator("#credits-by-service svg").bounding_box()
    assert svg["width"] > 400 and svg["height"] > 150
    shot(page, "usage-02-demo-school-today")

    # A reviewer of the module's school: no selector, that school only.
    page.context.clear_cookies()
    login(page, server, *REVIEWER)
    page.goto(server.url + "/admin/licensing/transaction/usage/")
    page.click(".usage-presets a:has-text('Last 90 days')")
    page.wait_for_selector("#usage-totals")
    assert page.locator("#id_institution").count() == 0
    top = page.inner_text("#top-licenses")
    assert LICENSE in top and "second-class" not in top
    mine = page.request.get(f"{server.url}/manage/v1/usage?since={today - timedelta(days=89)}")
    assert page.inner_text("#total-requests dd") == f"{mine.json()['totals']['requests']:,}"
    shot(page, "usage-03-reviewer-90-days")

    # The top lists link to the transactions; from the license's page, its own usage.
    href = page.get_attribute("#top-licenses a.link", "href")
    assert href.startswith("/admin/licensing/transaction/?license=") and "&since=" in href
    page.goto(server.url + f"/admin/licensing/license/?q={LICENSE}")
    page.click("#result_list tbody tr th a")
    shot(page, "usage-04-license-page-link")
    page.click(".object-tools a:has-text('Usage')")
    page.wait_for_selector("#usage-totals")
    assert f"License {LICENSE}" in page.inner_text("#content h2")
    shot(page, "usage-05-one-license")

    # Bad parameters: a message, the form still there.
    page.goto(server.url + "/admin/licensing/transaction/usage/?since=2026-13-45")
    assert "Enter a date as YYYY-MM-DD." in page.inner_text("#usage-errors")
    assert page.locator("#usage-form").is_visible()
    shot(page, "usage-06-bad-date")

    # The dark theme keeps the labels readable (they follow the text colour).
    page.emulate_media(color_scheme="dark")
    page.goto(server.url + "/admin/licensing/transaction/usage/")
    colour = page.eval_on_selector("#credits-by-service svg", "e => getComputedStyle(e).color")
    assert colour != "rgb(0, 0, 0)"
    shot(page, "usage-07-dark")
    page.emulate_media(color_scheme="light")
