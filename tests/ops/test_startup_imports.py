"""A worker's start imports what /v1 and the admin need, not the libraries of the sign-in and
provisioning protocols a request may never use (docs/architecture.md, "Start-up"): pysaml2 and
scim2-models are imported by the first request that reaches SAML's or SCIM's URLs. A manage.py
command's system checks do not import them either; Django's own URL checks run here instead,
over the whole tree, lazy modules included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_site.settings")
import gateway_site.asgi
from django.urls import resolve
resolve("/v1/health"); resolve("/admin/"); resolve("/portal/")
started = {name: name in sys.modules for name in ("saml2", "scim2_models")}
resolve("/sso/1/saml/acs/"); resolve("/scim/v2/Users")
reached = {name: name in sys.modules for name in ("saml2", "scim2_models")}
print(json.dumps([started, reached]))
"""


def _probe(script: str, tmp_path: Path):
    """What `script` prints last, as JSON, run in a fresh interpreter on a throwaway SQLite."""
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'probe.sqlite3'}"}
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


def test_a_worker_starts_without_pysaml2_and_scim2_models(tmp_path):
    started, reached = _probe(PROBE, tmp_path)
    assert started == {"saml2": False, "scim2_models": False}
    assert reached == {"saml2": True, "scim2_models": True}


CHECKS = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_site.settings")
import django
django.setup()
from django.core import checks
messages = checks.run_checks(tags=[checks.Tags.urls])
print(json.dumps([[m.id for m in messages], [n in sys.modules for n in ("saml2", "scim2_models")]]))
"""


def test_a_command_s_system_checks_do_not_import_them(tmp_path):
    ids, imported = _probe(CHECKS, tmp_path)
    assert ids == [] and imported == [False, False]


def test_django_s_own_url_checks_pass_over_the_whole_tree_lazy_modules_included():
    from django.core.checks.urls import check_resolver, check_url_namespaces_unique
    from django.urls import URLResolver, get_resolver

    from gateway_site.checks import url_namespaces_unique
    from gateway_site.urls import LazyResolver

    lazy = [p for p in get_resolver().url_patterns if isinstance(p, LazyResolver)]
    assert {p.urlconf_name for p in lazy} == {
        "licensing.signin.saml_urls",
        "licensing.provisioning.urls",
    }
    for resolver in lazy:  # what LazyResolver.check skips: Django's check of its patterns
        assert resolver.url_patterns  # imported here
        assert URLResolver.check(resolver) == []
    assert check_resolver(get_resolver()) == []
    # The gateway's namespace check finds what Django's finds (nothing), and no lazy module
    # brings a namespace of its own that the gateway's would not look into.
    assert check_url_namespaces_unique(None) == url_namespaces_unique(None) == []
    for resolver in lazy:
        assert all(getattr(p, "namespace", None) is None for p in resolver.url_patterns)
