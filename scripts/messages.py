"""Updates the translation catalogues (locale/<language>/LC_MESSAGES/django.po) from the source,
compiles them (django.mo beside each) and checks that nothing is left to translate.

    .venv/bin/python scripts/messages.py           # every catalogue in locale/
    .venv/bin/python scripts/messages.py -l fr     # also starts French's catalogue

What it collects: the strings marked in templates and Python (Django's makemessages) and the
names Django derives for models and fields that have none written (core.languages: "budget
limit" from budget_limit), written for the time of the run to gateway_site/_derived_names.py so
that makemessages finds them. Then a translator fills the empty and fuzzy entries of the .po
(docs/languages.md, "Translating") and runs it again; it exits 1 while any is left, with the
list (tests/ops/test_translations.py checks the same). Needs GNU gettext (apt-get install
gettext).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DERIVED = ROOT / "gateway_site" / "_derived_names.py"
# Nothing a person reads in these: the API, the fakes, the tests, the benchmark.
IGNORED = ["var/*", ".venv/*", "tests/*", "bench/*", "fake_upstreams/*", "docs/*", "scripts/*"]


def derived_names_module() -> str:
    from django.apps import apps

    from core.languages import derived_names

    apps_ = apps.get_app_configs()
    names = sorted({english for app in apps_ for _owner, _name, english in derived_names(app)})
    lines = [
        '"""Written by scripts/messages.py for makemessages, removed after it: the names Django',
        'derives for models and fields (core.languages.translate_derived_names)."""',
        "",
        "from django.utils.translation import gettext_noop as _",
        "",
        *(f"_({name!r})" for name in names),
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-l", "--locale", action="append", default=[], help="a new language")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_site.settings")
    import django
    from django.core.management import call_command

    django.setup()
    locales = sorted({*args.locale, *(p.name for p in (ROOT / "locale").iterdir() if p.is_dir())})
    locales = [code for code in locales if code != "en"]  # the source is English
    DERIVED.write_text(derived_names_module())
    try:
        call_command(
            "makemessages",
            locale=locales,
            ignore_patterns=IGNORED,
            add_location="file",
            no_obsolete=True,
            verbosity=1,
        )
    finally:
        DERIVED.unlink()
    call_command("compilemessages", locale=locales, verbosity=1)
    check = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    return subprocess.call([*check, "tests/ops/test_translations.py"], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())
