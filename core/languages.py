"""The languages the pages speak (settings.LANGUAGES) and a code checked against them.

A cookie, an Accept-Language header, a form or a stored value may hold anything (NUL, a lone
surrogate, 10 kB, `de-DE;q=1e400`): what comes out is a language of settings.LANGUAGES or None,
never an exception. Django's own helpers do the matching (a regional variant such as de-AT
falls back to de) and bound the lengths they parse (docs/languages.md).
"""

from decimal import Decimal

from django.utils import formats, numberformat
from django.utils.translation import get_supported_language_variant, gettext_lazy
from django.utils.translation.trans_real import language_code_re, parse_accept_lang_header

# The longest code worth looking at: a language, a script and a region (`sr-Latn-RS`) fit.
MAX_CODE_LENGTH = 35


def supported_language(code: object) -> str | None:
    """`code`'s language if the gateway has a catalogue for it, else None."""
    if not isinstance(code, str) or not code or len(code) > MAX_CODE_LENGTH:
        return None
    if not language_code_re.match(code):  # letters, digits and dashes only: no NUL, no surrogate
        return None
    try:
        return get_supported_language_variant(code.lower())
    except LookupError:
        return None


def browser_language(header: str) -> str | None:
    """The first language of an Accept-Language header, by its q-values, that the gateway
    speaks; None when it names none (an unparsable header names none)."""
    for code, _quality in parse_accept_lang_header(header):
        if code == "*":
            return None
        language = supported_language(code)
        if language is not None:
            return language
    return None


def derived_names(app_config) -> list[tuple[object, str, str]]:
    """The names Django derived from Python names in `app_config`'s models (a model's
    "license type", a field's "budget limit"): (the owner, its attribute, the English name)."""
    found: list[tuple[object, str, str]] = []
    for model in app_config.get_models():
        opts = model._meta
        for attribute in ("verbose_name", "verbose_name_plural"):
            if attribute not in opts.original_attrs:
                found.append((opts, attribute, str(getattr(opts, attribute))))
        for field in (*opts.local_fields, *opts.local_many_to_many):
            if field._verbose_name is None:  # none given: Django's "budget limit"
                found.append((field, "verbose_name", str(field.verbose_name)))
    return found


def translate_derived_names(app_config) -> None:
    """Called at start-up by the apps: the names Django derived go through gettext, lazily, so
    the admin shows them in the page's language. Their English stays as Django made it, and the
    migrations, which read the names as written (Field._verbose_name, Meta.original_attrs), do
    not change; scripts/messages.py puts them in the catalogues."""
    for owner, attribute, english in derived_names(app_config):
        setattr(owner, attribute, gettext_lazy(english))


def grouped(value: int | float | Decimal, places: int | None = None) -> str:
    """A number as the active language writes it: 1,500,000.50 in English, 1.500.000,50 in
    German (Django's formats for the language; `places` decimals when given, else as it is)."""
    return numberformat.format(
        value,
        formats.get_format("DECIMAL_SEPARATOR"),
        decimal_pos=places,
        grouping=3,
        thousand_sep=formats.get_format("THOUSAND_SEPARATOR"),
        force_grouping=True,
    )
