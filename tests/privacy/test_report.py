"""The privacy pack's figures are the configuration's (licensing.privacy.report), in words
(document), as Markdown and as a PDF whose text holds the same figures."""

from __future__ import annotations

import io

import pytest
from django.utils import translation
from pypdf import PdfReader

from inference.moderation import MODERATION_PROVIDER
from licensing.privacy import report as report_module
from licensing.privacy.document import document
from licensing.privacy.markdown import escape, to_markdown
from licensing.privacy.pdf import font_dir, to_pdf
from licensing.privacy.report import privacy_report

pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]


def by_name(report, name):
    return next(t for t in report.license_types if t.name == name)


def pdf_text(data: bytes) -> str:
    assert data.startswith(b"%PDF")
    reader = PdfReader(io.BytesIO(data))
    return " ".join(page.extract_text() for page in reader.pages)


def test_each_license_type_reaches_what_routing_reaches(world):
    report = privacy_report(world["school"])
    assert [t.name for t in report.license_types] == ["EU only", "Open for all"]
    open_type, eu_only = by_name(report, "Open for all"), by_name(report, "EU only")
    assert [(p.provider, p.connection) for p in open_type.places] == [
        ("direct", "default"),
        ("direct", "eu-frankfurt"),
    ]
    assert [(p.connection, p.tags, p.host) for p in eu_only.places] == [
        ("eu-frankfurt", ("eu",), "eu.provider.example")
    ]
    assert eu_only.required_tags == ("eu",)
    assert eu_only.services == ("chat_completions",)
    assert [m.model for m in eu_only.models] == ["gpt-small"]
    assert (open_type.licenses, open_type.people, eu_only.people) == (1, 3, 2)
    assert (open_type.input_moderation, open_type.output_moderation) == (True, False)
    assert (open_type.input_patterns, eu_only.input_moderation) == (1, False)
    assert open_type.moderation_place.connection == "default"


def test_sub_processors_are_the_enabled_connections_reached(world):
    report = privacy_report(world["school"])
    assert [(p.provider, p.connection) for p in report.sub_processors] == [
        ("direct", "default"),
        ("direct", "eu-frankfurt"),
    ]
    assert [p.connection for p in report.possible_transfers] == ["default"]
    assert "switched-off" not in to_markdown(document(report))


def test_retention_figures_and_role_counts_are_the_institutions(world):
    report = privacy_report(world["school"])
    stored = report.stored
    assert (stored.ledger_identity_days, stored.audit_log_days) == (200, 400)
    assert (stored.alerts_on, stored.alert_days, stored.alert_categories) == (
        True,
        14,
        ("self-harm",),
    )
    assert stored.identity_columns == ("end_user", "api_key", "metadata")
    assert "prompt" not in " ".join(stored.ledger_columns).replace("prompt_tokens", "")
    assert stored.audit_rows == 1 and report.retention_last_run is not None
    roles = {r.role: r.people for r in report.roles}
    assert roles == {
        "admin": 2,
        "reviewer": 1,
        "teacher": 1,  # the former teacher is inactive
        "safeguarding": 1,
        "student": 4,  # one end user lost their role
        "operator": 0,
    }


def test_a_lifetime_per_person_budget_is_named_beside_the_ledgers_period(world):
    from licensing.models import License

    text = to_markdown(document(privacy_report(world["school"])))
    assert "lifetime budget" not in text
    license = License.objects.filter(institution=world["school"]).first()
    License.objects.filter(pk=license.pk).update(
        budget_strategy="per_user", budget_period="lifetime"
    )
    text = to_markdown(document(privacy_report(world["school"])))
    assert f"licenses with a lifetime budget, which never close: {license.name})" in text


def test_the_retention_job_never_run_says_never(world):
    world["school"].ledger_identity_days = None
    world["school"].save()
    from licensing.models import AuditEvent

    AuditEvent.objects.all().delete()
    text = to_markdown(document(privacy_report(world["school"])))
    assert "| Retention job (apply\\_retention) | never |" in text
    assert "kept for as long as the institution exists" in text


def test_the_markdown_holds_the_figures_and_the_draft_line(world):
    text = to_markdown(document(privacy_report(world["school"])))
    assert "Draft for the data-protection officer to complete" in text
    assert "it is not a statement of compliance" in text
    assert (
        "| direct | OpenAI REST API | default | api.us-provider.example | - | us-east-1 | " in text
    )
    assert "possible transfer: check" in text
    assert "200 days" in text and "400 days" in text and "14 days" in text
    assert "| Institution admin |" in text and "To be completed by the DPO." in text


def test_the_report_in_german(world):
    with translation.override("de"):
        text = to_markdown(document(privacy_report(world["school"])))
    assert "Entwurf" in text and "Datenschutzbeauftragte" in text


def test_the_pdf_holds_the_figures(world):
    data = to_pdf(document(privacy_report(world["school"])))
    text = pdf_text(data)
    for figure in ("Privacy school", "eu-frankfurt", "us-provider", "200 days", "GDPR Art. 30"):
        assert figure in text, figure


def test_the_moderation_provider_is_the_guardrails():
    assert report_module.MODERATION_PROVIDER == MODERATION_PROVIDER


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a|b", "a\\|b"),
        ("one\ntwo\r\nthree", "one two three"),
        ("nul\x00here", "nul\ufffdhere"),
        ("lone \ud800", "lone \ufffd"),
        ("<script>*x*</script>", "\\<script\\>\\*x\\*\\</script\\>"),
    ],
)
def test_a_cell_is_one_escaped_line(text, expected):
    assert escape(text) == expected


HOSTILE = 'Year 7 | "pipes"\nnew line\r\n<b>bold</b> → … Ünïcödé Привет 汉字 مرحبا'


def test_hostile_names_keep_the_tables_whole(db):
    make_hostile(HOSTILE)
    from licensing.models import Institution

    report = privacy_report(Institution.objects.get(name="Privacy school"))
    text = to_markdown(document(report))
    for line in text.splitlines():
        if line.startswith("| "):
            assert line.endswith(" |")
            assert line.replace("\\|", "").count("|") in (3, 4, 7, 8), line
    assert 'Year 7 \\| "pipes" new line' in text
    data = to_pdf(document(report))
    assert "Year 7" in pdf_text(data)


@pytest.mark.skipif(font_dir() is None, reason="no DejaVu font here (fonts-dejavu-core)")
def test_text_in_any_script_survives_the_pdf(db):
    make_hostile(HOSTILE)
    from licensing.models import Institution

    text = pdf_text(
        to_pdf(document(privacy_report(Institution.objects.get(name="Privacy school"))))
    )
    # DejaVu has no CJK glyphs: those are left blank (fpdf2 logs it), the rest is text.
    assert "Привет" in text and "→" in text


def test_the_pdf_without_a_unicode_font_replaces_what_latin1_cannot_hold(db, monkeypatch):
    from licensing.privacy import pdf

    monkeypatch.setattr(pdf, "FONT_DIRS", ())
    make_hostile(HOSTILE)
    from licensing.models import Institution

    data = to_pdf(document(privacy_report(Institution.objects.get(name="Privacy school"))))
    assert "Ünïcödé" in pdf_text(data)


def test_nul_and_lone_surrogates_never_reach_a_renderer():
    from licensing.privacy.document import Document, Section, Table

    doc = Document(
        "t\x00\ud800",
        (Section("s\x00", ("p\ud800",), ("i\x00",), Table(("h\ud800",), (("c\x00|\n",),))),),
    )
    assert "\x00" not in to_markdown(doc) and "\ud800" not in to_markdown(doc)
    assert to_pdf(doc).startswith(b"%PDF")


def make_hostile(name: str) -> None:
    """The school with a license type and a connection named with pipes and line breaks (the
    admin's forms refuse such connection names; a script or the shell does not)."""
    from .conftest import make_catalog, make_school

    make_catalog(connection_name="eu | x\nline")
    make_school(type_name=name)
