"""A worker's start imports what /v1 and the admin need, not the libraries of the sign-in and
provisioning protocols a request may never use (docs/architecture.md, "Start-up"): pysaml2 and
scim2-models are imported by the first request that reaches SAML's or SCIM's URLs."""

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


def test_a_worker_starts_without_pysaml2_and_scim2_models(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'probe.sqlite3'}"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    started, reached = json.loads(out.splitlines()[-1])
    assert started == {"saml2": False, "scim2_models": False}
    assert reached == {"saml2": True, "scim2_models": True}
