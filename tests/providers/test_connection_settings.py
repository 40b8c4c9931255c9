"""What an operator sets for failover and residency, and what is refused: a connection's weight
and tags through `manage.py configure_connection` and the admin's connection form, and a policy's
`"routing": {"connection_tags": [...]}`. Hostile values are a clear error and save nothing.
What routing does with them: tests/providers/test_failover.py."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.urls import reverse

from catalog.models import Connection, Provider
from licensing.rules.policy import PolicyDocumentError, compile_policy, open_policy_document

pytestmark = pytest.mark.django_db

URL = "https://b.example.test/v1"
HOSTILE_WEIGHTS = [
    (str(2**64), "less than or equal to 1000"),
    ("1001", "less than or equal to 1000"),
    ("-1", "greater than or equal to 0"),
    ("1e400", None),
    ("nan", None),
    ("9" * 5000, None),  # past Python's int-parsing digit limit
]


@pytest.fixture(autouse=True)
def catalog_rows():
    from catalog.services import catalog_load_defaults

    catalog_load_defaults()


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def stored(name="b") -> tuple:
    connection = Connection.objects.get(provider__slug="direct", name=name)
    return connection.weight, connection.tags


# --- configure_connection --------------------------------------------------------------------


def test_the_command_sets_weight_and_tags():
    out = run(
        "configure_connection",
        "direct",
        "--name",
        "b",
        "--base-url",
        URL,
        "--api-key",
        "sk-b",
        "--weight",
        "3",
        "--tag",
        "eu",
        "--tag",
        "On-Premises",  # normalised: lower case, sorted, no repeats
        "--tag",
        "eu",
    )
    assert stored() == (3, "eu,on-premises")
    assert "weight 3, tags eu,on-premises" in out and "sk-b" not in out

    # Left out, they stay; given, they replace; --tag '' clears.
    run("configure_connection", "direct", "--name", "b", "--base-url", URL)
    assert stored() == (3, "eu,on-premises")
    run("configure_connection", "direct", "--name", "b", "--base-url", URL, "--tag", "on-premises")
    assert stored() == (3, "on-premises")
    run("configure_connection", "direct", "--name", "b", "--base-url", URL, "--tag", "")
    assert stored() == (3, "")
    run("configure_connection", "direct", "--name", "b", "--base-url", URL, "--weight", "0")
    assert stored() == (0, "")


def test_a_new_connection_has_weight_1_and_no_tags():
    run("configure_connection", "direct", "--name", "b", "--base-url", URL)
    assert stored() == (1, "")


@pytest.mark.parametrize("tag", ["bad tag", "eu!", "x" * 33, "-eu", "e\u00fc", "eu\x00"])
def test_the_command_refuses_a_bad_tag(tag):
    run("configure_connection", "direct", "--name", "b", "--base-url", URL, "--tag", "eu")
    with pytest.raises(CommandError, match=r"Invalid tag\(s\)"):
        run("configure_connection", "direct", "--name", "b", "--base-url", URL, f"--tag={tag}")
    assert stored() == (1, "eu")


@pytest.mark.parametrize(("weight", "message"), HOSTILE_WEIGHTS)
def test_the_command_refuses_a_hostile_weight(weight, message):
    with pytest.raises(CommandError) as refused:
        run(
            "configure_connection", "direct", "--name", "b", "--base-url", URL, f"--weight={weight}"
        )
    assert (message or "invalid int value") in str(refused.value)
    assert not Connection.objects.filter(name="b").exists()  # nothing saved
    run("configure_connection", "direct", "--name", "b", "--base-url", URL, "--weight", "2")
    with pytest.raises(CommandError):
        run(
            "configure_connection", "direct", "--name", "b", "--base-url", URL, f"--weight={weight}"
        )
    assert stored() == (2, "")


def test_the_service_refuses_a_hostile_weight():
    from catalog.services import connection_configure

    for weight in (2**64, -1, 1001):
        with pytest.raises(ValidationError):
            connection_configure(provider_slug="direct", name="b", base_url=URL, weight=weight)
    assert not Connection.objects.filter(name="b").exists()


# --- the admin's connection form ---------------------------------------------------------------


def form(**fields) -> dict:
    data = {
        "provider": str(Provider.objects.get(slug="direct").pk),
        "name": "b",
        "base_url": URL,
        "timeout": "",
        "weight": "1",
        "tags": "",
        "active": "on",
        "api_key": "sk-b",
        "region": "",
        "aws_access_key_id": "",
        "aws_secret_access_key": "",
    }
    data.update(fields)
    return data


def test_the_admin_form_saves_weight_and_tags(admin_client):
    add = reverse("admin:catalog_connection_add")
    response = admin_client.post(add, form(weight="3", tags="eu, On-Premises,eu"))
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert stored() == (3, "eu,on-premises")

    connection = Connection.objects.get(name="b")
    change = reverse("admin:catalog_connection_change", args=[connection.pk])
    page = admin_client.get(change).content.decode()
    assert 'name="weight"' in page and 'value="eu,on-premises"' in page
    response = admin_client.post(change, form(weight="0", tags=""))
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert stored() == (0, "")


@pytest.mark.parametrize(("weight", "message"), HOSTILE_WEIGHTS)
def test_the_admin_form_refuses_a_hostile_weight(admin_client, weight, message):
    add = reverse("admin:catalog_connection_add")
    response = admin_client.post(add, form(weight=weight))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["weight"]
    assert (message or "Enter a whole number") in errors["weight"][0]
    assert not Connection.objects.filter(name="b").exists()


def test_the_admin_form_refuses_a_bad_tag(admin_client):
    response = admin_client.post(reverse("admin:catalog_connection_add"), form(tags="eu, bad tag"))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["tags"]
    assert errors["tags"][0].startswith("Invalid tag(s): bad tag;")
    assert not Connection.objects.filter(name="b").exists()


# --- the policy's routing ----------------------------------------------------------------------

TAGS_MESSAGE = (
    "routing.connection_tags: must be a list of tags (1-32 lower-case letters, digits, '-' or "
    "'_', as on the connections)"
)


def document(routing) -> dict:
    return {**open_policy_document(), "routing": routing}


def test_a_routing_rule_compiles_to_its_tags():
    policy = compile_policy(document({"connection_tags": ["eu", "on-premises"]}))
    assert policy.connection_tags == frozenset({"eu", "on-premises"})
    assert compile_policy(document({})).connection_tags == frozenset()
    assert compile_policy(open_policy_document()).connection_tags == frozenset()


@pytest.mark.parametrize(
    ("routing", "message"),
    [
        ("eu", "'routing' must be an object"),
        (["eu"], "'routing' must be an object"),
        ({"tags": ["eu"]}, "routing: unknown keys ['tags']; use ['connection_tags']"),
        ({"connection_tags": "eu"}, TAGS_MESSAGE),
        ({"connection_tags": {"eu": True}}, TAGS_MESSAGE),
        ({"connection_tags": ["EU"]}, TAGS_MESSAGE),
        ({"connection_tags": ["eu\x00"]}, TAGS_MESSAGE),
        ({"connection_tags": ["e" * 40]}, TAGS_MESSAGE),
        ({"connection_tags": [""]}, TAGS_MESSAGE),
        ({"connection_tags": ["eu\n"]}, TAGS_MESSAGE),
        ({"connection_tags": [1]}, TAGS_MESSAGE),
        ({"connection_tags": [None]}, TAGS_MESSAGE),
    ],
)
def test_a_bad_routing_rule_is_refused_on_save(routing, message):
    from licensing.access.services import license_create
    from licensing.models import License, LicenseType

    with pytest.raises(PolicyDocumentError) as refused:
        compile_policy(document(routing))
    assert str(refused.value) == message
    with pytest.raises(ValidationError) as refused_save:
        license_create(name="eu-class", policy=document(routing))
    assert refused_save.value.messages == [f"Invalid policy: {message}"]
    assert not License.objects.filter(name="eu-class").exists()
    license_type = LicenseType(name="eu", policy=document(routing))
    with pytest.raises(ValidationError) as refused_clean:  # the admin's and the API's check
        license_type.full_clean()
    assert refused_clean.value.message_dict["policy"] == [message]
