"""`manage.py privacy_report`: Markdown on standard output, a PDF to a file, the institution by
id or name, another language; an unknown institution is a clear CommandError."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]


def run(*args) -> str:
    out = StringIO()
    call_command("privacy_report", *args, stdout=out)
    return out.getvalue()


def test_markdown_by_name_on_standard_output(world):
    text = run("--institution", "Privacy school")
    assert text.startswith("# Privacy pack: Privacy school\n")
    assert "eu-frankfurt" in text and "Other school" not in text


def test_by_id_in_german(world):
    text = run("--institution", str(world["school"].pk), "--language", "de")
    assert text.startswith("# Datenschutzpaket: Privacy school\n")


def test_a_pdf_to_a_file(world, tmp_path):
    target = tmp_path / "pack.pdf"
    run("--institution", "Privacy school", "--format", "pdf", "--output", str(target))
    assert target.read_bytes().startswith(b"%PDF")


def test_markdown_to_a_file(world, tmp_path):
    target = tmp_path / "pack.md"
    run("--institution", "Privacy school", "--output", str(target))
    assert "## 3. Sub-processors" in target.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "value", ["No such school", "999999", "99999999999999999999", "a\x00b", " "]
)
def test_an_unknown_institution_is_a_command_error(world, value):
    with pytest.raises(CommandError, match="institution"):
        run("--institution", value)


def test_an_unknown_language_is_a_command_error(world):
    with pytest.raises(CommandError, match="--language"):
        run("--institution", "Privacy school", "--language", "xx")


def test_an_unwritable_output_is_a_command_error(world, tmp_path):
    with pytest.raises(CommandError, match="Cannot write"):
        run("--institution", "Privacy school", "--output", str(tmp_path / "no" / "such.md"))
