"""A key made in the portal, used by the openai SDK against the live gateway (the fake OpenAI
upstream behind it): the request bills the student's own wallet (`user:<end user id>` on a
per-user license), the ledger row carries the key and the end user, the overview shows it in
credits and money, the models listed on the overview are what GET /v1/models lists for the
key, and a key revoked in the portal is refused on /v1 at once."""

from __future__ import annotations

import re

import openai
import pytest

from licensing.access import reach
from licensing.models import ApiKey, Transaction, Wallet
from licensing.portal import selectors
from tests.client_helpers import assert_charged

from .conftest import make_student, signed_in

pytestmark = pytest.mark.django_db(transaction=True)
MINI = "gpt-4o-mini"
KEY_RE = re.compile(r"sk-svc-[A-Za-z0-9_-]{43}")


def _portal_key(client, name: str) -> str:
    assert client.post("/portal/keys/", {"name": name}).status_code == 302
    (key,) = set(KEY_RE.findall(client.get("/portal/keys/").content.decode()))
    return key


def test_portal_key_works_with_the_openai_sdk_and_bills_the_students_wallet(gateway, catalog):
    user, end_user = make_student(limit=10_000_000, period="daily", strategy="per_user")
    institution = end_user.license.institution
    institution.currency = "EUR"
    institution.micro_credits_per_currency_unit = 1_000
    institution.save()
    _, classmate = make_student()  # same license, own wallet
    portal = signed_in(user)
    key = _portal_key(portal, "sdk")
    sdk = openai.OpenAI(api_key=key, base_url=gateway.url + "/v1", max_retries=0)

    answer = sdk.chat.completions.create(
        model=MINI, messages=[{"role": "user", "content": "Hello from the portal"}]
    )
    assert answer.choices[0].message.content

    (row,) = assert_charged(1, "chat_completions", model=MINI)
    api_key = ApiKey.objects.get(end_user=end_user)
    assert (row.api_key_id, row.end_user_id, row.license_id) == (
        api_key.pk,
        end_user.pk,
        end_user.license_id,
    )
    wallet = Wallet.objects.get(pk=row.wallet_id)
    assert wallet.holder == f"user:{end_user.pk}" and wallet.period == "daily"
    assert wallet.spent == row.credits
    assert not Wallet.objects.filter(holder=f"user:{classmate.pk}").exists()
    assert not Wallet.objects.filter(holder=f"key:{api_key.pk}").exists()

    view = selectors.wallet_view(end_user)
    assert view.used == row.credits and view.remaining == 10_000_000 - row.credits
    body = portal.get("/portal/").content.decode()
    money = selectors.institution_rate(institution).format(row.credits)
    assert money.endswith(" EUR") and money in body
    assert f"{10_000_000 - row.credits:,} of 10,000,000 micro-credits left" in body
    by_model = body.split('id="usage-by-model"')[1].split("</table>")[0]
    assert f"<td>{MINI}</td>" in by_model and f">{row.credits:,}<" in by_model

    # The models on the overview are the ones GET /v1/models lists for this key.
    listed = {model.id for model in sdk.models.list()}
    assert {m.model_id for m in selectors.usable_models(end_user)} == listed
    assert MINI in listed

    # Revoked in the portal: refused on /v1 at once (the saved row clears the key cache).
    assert portal.post(f"/portal/keys/{api_key.pk}/revoke/").status_code == 302
    with pytest.raises(openai.AuthenticationError):
        sdk.chat.completions.create(model=MINI, messages=[{"role": "user", "content": "again"}])
    assert Transaction.objects.count() == 1


def test_models_and_destinations_follow_a_restrictive_policy_like_v1_models(gateway, catalog):
    """Model rules, allowed providers and a residency tag: the overview lists what GET
    /v1/models lists for the student's key, and the data page only the tagged connection."""
    from catalog.models import Connection
    from core.localcache import clear_all

    Connection.objects.filter(provider__slug="direct").update(tags="eu")
    clear_all()
    policy = {
        "version": 1,
        "services": {
            "chat_completions": {
                "providers": ["direct", "aggregator"],
                "params": {"model": {"allowed": [MINI, "o4-mini"]}},
            },
            "embeddings": {"providers": ["direct"]},
        },
        "routing": {"connection_tags": ["eu"]},
    }
    user, end_user = make_student(license="eu-only", policy=policy)
    portal = signed_in(user)
    key = _portal_key(portal, "eu")
    sdk = openai.OpenAI(api_key=key, base_url=gateway.url + "/v1", max_retries=0)

    listed = {model.id for model in sdk.models.list()}
    shown = selectors.usable_models(end_user)
    assert {m.model_id for m in shown} == listed
    assert MINI in listed and "gpt-4.1" not in listed
    destinations = reach.destinations_of(shown)
    assert {(d.provider, d.tags) for d in destinations} == {("direct", ("eu",))}
    table = portal.get("/portal/data/").content.decode().split('id="destinations"')[1]
    assert "aggregator" not in table.split("</table>")[0]
