"""The transactions review page in a real browser (Debian's chromium driven by Playwright) on a
server started as the README starts it (`bash scripts/run.sh`): ledger rows in two
institutions (the demo key, and a second institution's license and key made with the operator
commands), then a superuser filters by institution (autocomplete) and a date range and sees the
right totals and every column on screen, and exports the CSV; a reviewer of the demo school
sees only its rows and its own export. Screenshots land in var/screenshots/."""

from __future__ import annotations

import csv
from datetime import UTC, datetime, timedelta

from openai import OpenAI

from tests.browser import BROWSER_TEST, login, pick, shot

pytestmark = BROWSER_TEST

REVIEWER_PASSWORD = "a-reviewer-password-1"


def embed(server, key: str, text: str) -> tuple[str, int]:
    """One /v1/embeddings request through the openai SDK: its request id and credits."""
    client = OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)
    raw = client.embeddings.with_raw_response.create(
        model="text-embedding-3-small", input=text, encoding_format="float"
    )
    return raw.headers["x-request-id"], raw.http_response.json()["usage"]["credits_used"]


def exported(page) -> list[dict]:
    with page.expect_download() as info:
        page.click("#export-csv")
    download = info.value
    assert download.suggested_filename.startswith("transactions-")
    with open(download.path(), newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def everything_on_screen(page) -> None:
    width = page.evaluate("window.innerWidth")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    right = page.eval_on_selector(
        "#result_list thead th:last-child", "e => e.getBoundingClientRect().right"
    )
    assert right <= width


def test_review_in_a_browser(server, page):
    demo_key = server.printed(r"Demo API key[^:]*: (sk-svc-\S+)")
    _, other_key, _ = server.manage_many(
        ("create_license", "other-class", "--institution", "Other school"),
        ("create_api_key", "other-class"),
        (
            ("create_institution_admin", "Demo school", "rita", "--role", "reviewer", "--noinput"),
            {"DJANGO_SUPERUSER_PASSWORD": REVIEWER_PASSWORD},
        ),
    )
    other_key = other_key.strip()
    demo = [embed(server, demo_key, f"demo request {i}") for i in range(2)]
    other = [embed(server, other_key, f"other request {i}") for i in range(3)]

    # A superuser: every row, then one institution and a date range.
    login(page, server, "admin", server.admin_password())
    page.goto(server.url + "/admin/licensing/transaction/")
    page.wait_for_selector("#review-totals")
    assert int(page.inner_text("#total-rows")) >= 5  # run.sh's own curl lines may add rows
    everything_on_screen(page)
    shot(page, "review-01-all-rows")

    pick(page, "id_institution", "Other school")
    today = datetime.now(UTC)
    page.fill("#id_since", (today - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"))
    page.fill("#id_until", (today + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"))
    page.click("#review-apply")
    page.wait_for_selector("#review-totals")
    assert page.inner_text("#total-rows") == "3"
    assert page.inner_text("#total-credits") == f"{sum(c for _, c in other):,}"
    assert "Other school" in page.inner_text("#review-filters")
    shown = page.locator("#result_list tbody tr")
    assert shown.count() == 3 and "other-class" in shown.first.inner_text()
    everything_on_screen(page)
    shot(page, "review-02-one-institution-and-dates")

    lines = exported(page)
    assert {line["request_id"] for line in lines} == {rid for rid, _ in other}
    assert {line["institution"] for line in lines} == {"Other school"}
    assert {line["outcome"] for line in lines} == {"success"}
    assert sum(int(line["credits"]) for line in lines) == sum(c for _, c in other)

    # A reviewer of the demo school: its rows only, in the page and in the export.
    page.context.clear_cookies()
    login(page, server, "rita", REVIEWER_PASSWORD)
    page.goto(server.url + "/admin/licensing/transaction/")
    page.wait_for_selector("#review-totals")
    assert page.locator("#id_institution").count() == 0
    rows = page.inner_text("#result_list tbody")
    assert "other-class" not in rows and "demo" in rows
    mine = {line["request_id"] for line in exported(page)}
    assert {rid for rid, _ in demo} <= mine and not mine & {rid for rid, _ in other}
    assert int(page.inner_text("#total-rows")) == len(mine)
    everything_on_screen(page)
    shot(page, "review-03-reviewer")

    # Another institution's license, typed into the address: a clear error, no rows.
    other_license = server.manage(
        "shell",
        "-c",
        "from licensing.models import License; print(License.objects.get(name='other-class').pk)",
    ).strip()
    response = page.goto(f"{server.url}/admin/licensing/transaction/?license={other_license}")
    assert response.status == 400
    assert "Select a valid choice" in page.inner_text("#review-filters")
    assert page.inner_text("#total-rows") == "0"
    shot(page, "review-04-reviewer-other-license-refused")
