"""`manage.py privacy_report --institution ID|NAME [--format markdown|pdf] [--output FILE]
[--language de]`: the institution's privacy pack (docs/privacy.md). Reads only."""

import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import translation

from core.text import is_storable_text
from licensing.models import Institution
from licensing.privacy.document import document
from licensing.privacy.markdown import to_markdown
from licensing.privacy.pdf import to_pdf
from licensing.privacy.report import privacy_report


class Command(BaseCommand):
    help = (
        "Write an institution's privacy pack (records of processing, a draft DPIA) as Markdown "
        "or PDF, from the configuration as it is (docs/privacy.md). Reads only."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--institution", required=True, help="The institution's id or name, as in the admin"
        )
        parser.add_argument("--format", choices=("markdown", "pdf"), default="markdown")
        parser.add_argument(
            "--output", metavar="FILE", help="Write here (default: standard output)"
        )
        parser.add_argument(
            "--language",
            help="The report's language, a code of LANGUAGES (default: the institution's)",
        )

    def handle(self, *args, **options):
        institution = _institution(options["institution"])
        language = _language(options["language"]) or institution.language or settings.LANGUAGE_CODE
        with translation.override(language):
            doc = document(privacy_report(institution))
            if options["format"] == "pdf":
                data = to_pdf(doc)
            else:
                data = to_markdown(doc).encode("utf-8")
        self._write(data, options["output"])

    def _write(self, data: bytes, output: str | None) -> None:
        if output and output != "-":
            try:
                with open(output, "wb") as handle:
                    handle.write(data)
            except OSError as exc:
                raise CommandError(f"Cannot write {output}: {exc.strerror}") from exc
            return
        self.stdout.flush()
        stream = getattr(self.stdout, "_out", sys.stdout)
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            buffer.write(data)
            buffer.flush()
        else:  # a text stream (call_command's StringIO): Markdown only makes sense there
            stream.write(data.decode("utf-8", "replace"))


def _institution(value: str) -> Institution:
    value = value.strip()
    if not value or not is_storable_text(value):
        raise CommandError("--institution: give an institution's id or name")
    found = Institution.objects.filter(name=value).first()
    if found is None and value.isascii() and value.isdigit() and len(value) < 19:
        found = Institution.objects.filter(pk=int(value)).first()
    if found is None:
        raise CommandError(f"No institution with the id or name {value!r}")
    return found


def _language(code: str | None) -> str:
    if not code:
        return ""
    known = {language for language, _name in settings.LANGUAGES}
    if code not in known:
        raise CommandError(f"--language: one of {sorted(known)}")
    return code
