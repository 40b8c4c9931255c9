"""Whom a front-end key's request acts for: the student of the key's institution whose identity
provider verified the e-mail address of `X-OpenWebUI-User-Email`, with an active end user on the
key's license. Never another institution's (by e-mail or by subject), never a guess between two
accounts, never a shared wallet; hostile header values are a 401 (or the server's own 400) and
charge nothing."""

from __future__ import annotations

import socket

import pytest

from licensing.access.frontend import (
    EMAIL_HEADER,
    MALFORMED,
    UNNAMED,
    address_of,
)
from licensing.models import SsoIdentity, Transaction, Wallet
from licensing.signin.sso import SignInRefused, sign_in_complete
from tests.kit import error, wait_for_ledger

from .conftest import CHAT, as_user

pytestmark = pytest.mark.django_db(transaction=True)


def chat(client, key, email=None, **headers):
    return client.post("/v1/chat/completions", headers=as_user(key, email, **headers), json=CHAT)


def charged_to(end_user) -> None:
    wait_for_ledger(1)
    row = Transaction.objects.get()
    assert (row.status_code, row.end_user_id) == (200, end_user.pk)


def nothing_charged() -> None:
    assert not Transaction.objects.exists() and not Wallet.objects.exists()


def unknown(answer, school="Front School") -> None:
    message = error(answer, 401)
    assert message.startswith(f"{school} has no student account with your e-mail address")


# --- the institution's own students only ----------------------------------------------------


def test_another_institutions_student_by_e_mail_is_unknown(
    gateway, catalog, school, other_school, client
):
    school.student("ana@front.example")
    other_school.student("zoe@other.example")
    unknown(chat(client, school.key, "zoe@other.example"))
    nothing_charged()


def test_a_student_of_another_license_of_the_institution_is_unknown(
    gateway, catalog, school, client
):
    from licensing.access.credentials import api_key_create
    from licensing.access.services import license_create
    from licensing.models import ApiKey

    school.student("ana@front.example")  # on the students' license
    staff = license_create(name="Front School staff", institution="Front School")
    _, key = api_key_create(license=staff, kind=ApiKey.Kind.FRONT_END)
    unknown(chat(client, key, "ana@front.example"))
    nothing_charged()


def test_one_address_at_two_institutions_is_each_keys_own_student(
    gateway, catalog, school, other_school, client
):
    mine = school.student("pat@shared.example")
    theirs = other_school.student("pat@shared.example")
    assert chat(client, school.key, "pat@shared.example").status_code == 200
    charged_to(mine)
    assert chat(client, other_school.key, "pat@shared.example").status_code == 200
    wait_for_ledger(2)
    assert Transaction.objects.filter(end_user=theirs, license=other_school.license).count() == 1


def test_the_user_id_header_never_names_anyone(gateway, catalog, school, other_school, client):
    ana = school.student("ana@front.example", sub="ana-sub")
    other_school.student("zoe@other.example", sub="zoe-sub")
    # Another institution's subject, or this one's, without an e-mail: no person.
    for subject in ("zoe-sub", "ana-sub"):
        answer = chat(client, school.key, **{"X-OpenWebUI-User-Id": subject})
        assert error(answer, 401) == UNNAMED
    nothing_charged()
    # Beside Ana's address, another institution's subject changes nothing: Ana pays.
    answer = chat(client, school.key, "ana@front.example", **{"X-OpenWebUI-User-Id": "zoe-sub"})
    assert answer.status_code == 200
    charged_to(ana)


def test_staff_without_the_student_role_are_unknown(gateway, catalog, school, client):
    school.provider.teacher_groups = ["teachers"]
    school.provider.save()
    sign_in_complete(
        provider=school.provider,
        claims={"sub": "t1", "email": "tess@front.example", "email_verified": True,
                "groups": ["teachers"]},
    )  # fmt: skip
    unknown(chat(client, school.key, "tess@front.example"))
    nothing_charged()


def test_a_student_whose_role_was_taken_away_is_refused_at_once(gateway, catalog, school, client):
    school.student("ana@front.example", sub="ana-sub")
    assert chat(client, school.key, "ana@front.example").status_code == 200  # cached now
    with pytest.raises(SignInRefused):  # her groups no longer give the student role
        sign_in_complete(
            provider=school.provider,
            claims={"sub": "ana-sub", "email": "ana@front.example", "email_verified": True,
                    "groups": []},
        )  # fmt: skip
    unknown(chat(client, school.key, "ana@front.example"))


def test_two_accounts_with_one_address_are_never_guessed(gateway, catalog, school, client):
    school.student("old@front.example", sub="old-sub")
    school.student("old@front.example", sub="new-sub")  # the IdP gave the address again
    assert SsoIdentity.objects.filter(email="old@front.example").count() == 2
    message = error(chat(client, school.key, "old@front.example"), 401)
    assert message.startswith("More than one account of Front School has your e-mail address")
    nothing_charged()


def test_a_changed_address_follows_the_latest_sign_in(gateway, catalog, school, client):
    ana = school.student("ana@front.example", sub="ana-sub")
    assert chat(client, school.key, "ana@front.example").status_code == 200  # cached now
    sign_in_complete(
        provider=school.provider,
        claims={"sub": "ana-sub", "email": "ana.berg@front.example", "email_verified": True,
                "groups": ["students"]},
    )  # fmt: skip
    unknown(chat(client, school.key, "ana@front.example"))
    assert chat(client, school.key, "ana.berg@front.example").status_code == 200
    wait_for_ledger(2)
    assert Transaction.objects.filter(end_user=ana, status_code=200).count() == 2


def test_case_does_not_matter(gateway, catalog, school, client):
    ana = school.student("ana@front.example")
    assert chat(client, school.key, "Ana@FRONT.example").status_code == 200
    charged_to(ana)


def test_an_address_in_utf8_is_matched(gateway, catalog, school, client):
    jurgen = school.student("jürgen@front.example")
    headers = [(b"Authorization", f"Bearer {school.key}".encode()),
               (EMAIL_HEADER.encode(), "Jürgen@front.example".encode())]  # fmt: skip
    assert client.post("/v1/chat/completions", headers=headers, json=CHAT).status_code == 200
    charged_to(jurgen)


# --- hostile header values ------------------------------------------------------------------


HOSTILE = [
    b"",  # empty
    b"ana",  # no @
    b"@front.example",
    b"ana@",
    b"\xed\xa0\x80@front.example",  # a lone surrogate in UTF-8: not UTF-8
    b"j\xfcrgen@front.example",  # ISO-8859-1, not UTF-8
    b"a" * 10_000 + b"@front.example",  # 10 kB
    b"ana@front.example, ben@front.example",  # two addresses
    b"Ana <ana@front.example>",  # a display name
    b"ana @front.example",  # white space inside
]


def test_hostile_addresses_are_401_and_charge_nothing(gateway, catalog, school, client):
    school.student("ana@front.example")
    for value in HOSTILE:
        headers = [
            (b"Authorization", f"Bearer {school.key}".encode()),
            (EMAIL_HEADER.encode(), value),
        ]
        answer = client.post("/v1/chat/completions", headers=headers, json=CHAT)
        assert error(answer, 401) == MALFORMED, value
    nothing_charged()


def test_a_repeated_header_is_no_address(gateway, catalog, school, client):
    school.student("ana@front.example")
    headers = [(b"Authorization", f"Bearer {school.key}".encode()),
               (EMAIL_HEADER.encode(), b"ana@front.example"),
               (EMAIL_HEADER.encode(), b"ana@front.example")]  # fmt: skip
    answer = client.post("/v1/chat/completions", headers=headers, json=CHAT)
    assert error(answer, 401) == MALFORMED
    nothing_charged()


def test_many_other_headers_change_nothing(gateway, catalog, school, client):
    ana = school.student("ana@front.example")
    junk = {f"X-Junk-{n}": "x" * 50 for n in range(200)}
    junk["X-OpenWebUI-User-Role"] = "admin"
    junk["X-OpenWebUI-User-Name"] = "Someone Else"
    assert chat(client, school.key, "ana@front.example", **junk).status_code == 200
    charged_to(ana)


def test_a_nul_in_the_header_never_reaches_a_wallet(gateway, catalog, school):
    """httpx will not send a NUL in a header: a raw request. The server refuses it (400) before
    the gateway sees it; whatever answers, it is no 5xx and nothing is charged."""
    school.student("ana@front.example")
    body = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}'
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {school.key}\r\n".encode()
        + EMAIL_HEADER.encode()
        + b": ana\x00@front.example\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    host, port = gateway.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        status_line = sock.makefile("rb").readline()
    status = int(status_line.split()[1])
    assert 400 <= status < 500, status_line
    nothing_charged()


@pytest.mark.parametrize(
    "raw",
    ["ana\x00@front.example", "ana\ud800@front.example", "ana\u2028@front.example", "\x7f@x.y"],
)
def test_nul_and_surrogates_are_no_address(raw):
    from core.errors import AuthenticationFailed

    with pytest.raises(AuthenticationFailed) as refused:
        address_of(raw)
    assert refused.value.message == MALFORMED
