"""The catalogues (locale/<language>/LC_MESSAGES/django.po, docs/languages.md): each language
the gateway offers (settings.LANGUAGES) has one, complete (no empty or fuzzy entry, the same
placeholders as the English), its compiled .mo in step with it, and every name Django derives
for a model or a field in it; a string a colleague marked but nobody translated yet fails here,
with the command that lists it (`python scripts/messages.py`)."""

from __future__ import annotations

import gettext
import re
from pathlib import Path

import pytest
from babel.messages.pofile import read_po
from django.apps import apps
from django.conf import settings

from core.languages import derived_names

ROOT = Path(__file__).resolve().parents[2]
LOCALE = ROOT / "locale"
TRANSLATED = [code for code, _name in settings.LANGUAGES if code != "en"]  # the source is English
PLACEHOLDER = re.compile(r"%(?:\([A-Za-z_]+\))?[sdr%]")
FIX = "run `python scripts/messages.py` and translate what it lists (docs/languages.md)"


def po_path(code: str) -> Path:
    return LOCALE / code / "LC_MESSAGES" / "django.po"


def catalogue(code: str):
    with po_path(code).open("rb") as handle:
        return read_po(handle, locale=code)


def entries(code: str) -> dict:
    """msgid (or (singular, plural)) -> msgstr (or the tuple of plural forms), the header out."""
    return {message.id: message.string for message in catalogue(code) if message.id}


def test_every_language_offered_has_a_catalogue_and_every_catalogue_is_offered():
    shipped = sorted(p.name for p in LOCALE.iterdir() if (p / "LC_MESSAGES").is_dir())
    assert shipped == sorted(TRANSLATED)
    assert [code for code, _name in settings.LANGUAGES][0] == settings.LANGUAGE_CODE == "en"
    assert settings.LOCALE_PATHS == [LOCALE]


@pytest.mark.parametrize("code", TRANSLATED)
def test_no_entry_is_empty_or_fuzzy(code):
    missing = []
    for message in catalogue(code):
        if not message.id:
            continue
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        if message.fuzzy or not all(strings):
            missing.append(message.id)
    assert not missing, f"{len(missing)} entries of {code} to translate ({FIX}): {missing[:20]}"


@pytest.mark.parametrize("code", TRANSLATED)
def test_every_translation_keeps_the_placeholders(code):
    wrong = []
    for msgid, msgstr in entries(code).items():
        ids = msgid if isinstance(msgid, tuple) else (msgid,)
        strs = msgstr if isinstance(msgstr, tuple) else (msgstr,)
        wanted = sorted(PLACEHOLDER.findall(ids[-1]))
        for text in strs:
            found = sorted(PLACEHOLDER.findall(text))
            # A singular may leave its count out ("1 new row"), never put in one it lacks.
            if found != wanted and not (len(ids) == 2 and set(found) < set(wanted)):
                wrong.append((msgid, text))
    assert not wrong, wrong[:10]


@pytest.mark.parametrize("code", TRANSLATED)
def test_the_compiled_catalogue_is_the_po(code):
    """The .mo files are committed (an install needs no GNU gettext): each must say what its
    .po says. After editing a .po: `python manage.py compilemessages` (scripts/messages.py
    runs it)."""
    with (po_path(code).with_suffix(".mo")).open("rb") as handle:
        compiled = gettext.GNUTranslations(handle)._catalog  # type: ignore[attr-defined]
    expected = {}
    for msgid, msgstr in entries(code).items():
        if isinstance(msgid, tuple):
            for n, text in enumerate(msgstr):
                expected[(msgid[0], n)] = text
        else:
            expected[msgid] = msgstr
    compiled = {k: v for k, v in compiled.items() if k != ""}  # the header
    assert compiled == expected, "locale/*.mo is stale: run `python manage.py compilemessages`"


@pytest.mark.parametrize("code", TRANSLATED)
def test_every_derived_model_and_field_name_is_translated(code):
    """Names Django makes from Python names ("budget limit") are translated at start-up
    (core.languages.translate_derived_names): a field a colleague added needs its German too."""
    translated = {msgid for msgid, msgstr in entries(code).items() if msgstr}
    names = {english for app in apps.get_app_configs() for _o, _a, english in derived_names(app)}
    ours = {app.label for app in apps.get_app_configs() if app.label in ("catalog", "licensing")}
    assert ours == {"catalog", "licensing"}
    mine = {
        english
        for app in apps.get_app_configs()
        if app.label in ours
        for _owner, _attribute, english in derived_names(app)
    }
    assert mine <= names
    missing = sorted(mine - translated)
    assert not missing, f"{code}: no translation for {missing[:20]} ({FIX})"


def test_the_derived_names_are_lazy_and_change_no_migration():
    from django.utils.functional import Promise

    from licensing.models import License

    field = License._meta.get_field("budget_limit")
    assert isinstance(field.verbose_name, Promise) and field._verbose_name is None
    assert isinstance(License._meta.verbose_name, Promise)
    assert "verbose_name" not in License._meta.original_attrs
