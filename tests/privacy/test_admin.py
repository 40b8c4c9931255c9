"""The privacy pack in the admin: the institution's admins and superusers read it and download
it (Markdown, PDF); another institution's admin gets a 404, its reviewers, teachers and
safeguarding contacts a 403; hostile ids and names are never a 500."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from .conftest import signed_in

pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]


def url(institution_id) -> str:
    return f"/admin/licensing/institution/{institution_id}/privacy/"


def test_an_institution_admin_reads_their_pack_and_downloads_it(world):
    client = signed_in(world["admin"])
    page = client.get(url(world["school"].pk))
    assert page.status_code == 200
    html = page.content.decode()
    assert "Privacy pack: Privacy school" in html and "eu-frankfurt" in html
    assert "it is not a statement of compliance" in html
    markdown = client.get(url(world["school"].pk) + "?format=markdown")
    assert markdown.status_code == 200
    assert markdown["Content-Type"].startswith("text/markdown")
    assert "attachment" in markdown["Content-Disposition"]
    assert markdown.content.decode().startswith("# Privacy pack: Privacy school")
    pdf = client.get(url(world["school"].pk) + "?format=pdf")
    assert (pdf.status_code, pdf["Content-Type"]) == (200, "application/pdf")
    assert pdf.content.startswith(b"%PDF")


def test_the_change_page_links_to_the_pack(world):
    client = signed_in(world["admin"])
    page = client.get(f"/admin/licensing/institution/{world['school'].pk}/change/")
    assert url(world["school"].pk) in page.content.decode()


def test_a_superuser_reads_any_institutions_pack(world):
    root = get_user_model().objects.create_superuser("pp-root", password="pw")
    client = signed_in(root)
    assert client.get(url(world["other"].pk)).status_code == 200
    page = client.get(url(world["school"].pk))
    assert "| direct |" not in page.content.decode()  # HTML, not Markdown
    assert '<th scope="row">direct</th>' in page.content.decode()


def test_another_institutions_admin_gets_a_404(world):
    client = signed_in(world["other_admin"])
    assert client.get(url(world["school"].pk)).status_code == 404
    assert client.get(url(world["school"].pk) + "?format=pdf").status_code == 404
    assert client.get(url(world["other"].pk)).status_code == 200


@pytest.mark.parametrize("who", ["teacher", "reviewer", "contact"])
def test_other_roles_are_refused(world, who):
    response = signed_in(world[who]).get(url(world["school"].pk))
    assert response.status_code in (403, 404)
    assert b"eu-frankfurt" not in response.content


def test_a_visitor_is_sent_to_sign_in(world):
    response = Client().get(url(world["school"].pk))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


@pytest.mark.parametrize("bad", ["abc", "0", "99999999999999999999", "%00", "1%00", "-1"])
def test_hostile_ids_are_404(world, bad):
    assert signed_in(world["admin"]).get(url(bad)).status_code == 404


def test_hostile_names_in_the_page_and_downloads_are_never_a_500(db):
    from .test_report import HOSTILE, make_hostile

    make_hostile(HOSTILE + "<script>alert(1)</script>")
    from licensing.models import Institution

    school = Institution.objects.get(name="Privacy school")
    root = get_user_model().objects.create_superuser("pp-root2", password="pw")
    client = signed_in(root)
    page = client.get(url(school.pk))
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in page.content.decode()
    for wanted in ("markdown", "pdf"):
        assert client.get(url(school.pk) + f"?format={wanted}").status_code == 200


def test_the_admins_front_page_links_to_the_pack(world):
    page = signed_in(world["admin"]).get("/admin/")
    assert url(world["school"].pk) in page.content.decode()
