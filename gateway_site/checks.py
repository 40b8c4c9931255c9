"""System checks: the encryption keys, and (with `--deploy`) what production must set."""

from collections import Counter

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register, registry
from django.core.checks.urls import check_url_namespaces_unique

from core.crypto import KEYS_VARIABLE, EncryptionKeyError, parse_keys

DEV_SECRET_KEY_PREFIX = "insecure-dev-key"
# Installed in ADMIN_MIDDLEWARE (gateway_site.middleware.AdminStack) instead of MIDDLEWARE.
ADMIN_ONLY_MIDDLEWARE = (
    ("django.middleware.security.SecurityMiddleware", "security.W001"),
    ("django.middleware.clickjacking.XFrameOptionsMiddleware", "security.W002"),
    ("django.middleware.csrf.CsrfViewMiddleware", "security.W003"),
    ("axes.middleware.AxesMiddleware", "axes.W002"),
)


@register(Tags.security)
def encryption_keys_parse(app_configs, **kwargs):
    try:
        parse_keys(settings.GATEWAY_ENCRYPTION_KEYS)
    except EncryptionKeyError as exc:
        return [Error(str(exc), id="gateway.E003")]
    return []


@register(Tags.security)
def admin_middleware_installed(app_configs, **kwargs):
    return [
        Error(
            f"{path} is missing from ADMIN_MIDDLEWARE.",
            hint=f"It replaces Django's check {replaced}, silenced in settings.",
            id="gateway.E004",
        )
        for path, replaced in ADMIN_ONLY_MIDDLEWARE
        if path not in settings.ADMIN_MIDDLEWARE
    ]


@register(Tags.security, deploy=True)
def production_secrets_set(app_configs, **kwargs):
    errors = []
    if settings.SECRET_KEY.startswith(DEV_SECRET_KEY_PREFIX):
        errors.append(
            Error(
                "SECRET_KEY is not set: the development key is public.",
                hint="Set SECRET_KEY to a long random value (docs/deployment.md, 'Production').",
                id="gateway.E001",
            )
        )
    if not settings.GATEWAY_ENCRYPTION_KEYS:
        errors.append(
            Error(
                f"{KEYS_VARIABLE} is not set: provider credentials and JWT secrets are "
                "encrypted with a key generated into var/ on this host.",
                hint="Set it (`manage.py generate_encryption_key`); "
                "docs/deployment.md, 'Secrets at rest'.",
                id="gateway.E002",
            )
        )
    return errors


@register(Tags.security, deploy=True)
def https_settings(app_configs, **kwargs):
    """Django's own W004/W008 look for SecurityMiddleware in MIDDLEWARE and so stay silent
    here (it runs in ADMIN_MIDDLEWARE): the same advice, for the admin."""
    warnings = []
    if not settings.SECURE_HSTS_SECONDS:
        warnings.append(
            Warning(
                "SECURE_HSTS_SECONDS is not set: browsers may reach the admin over plain http.",
                hint="docs/deployment.md, 'Production'.",
                id="gateway.W004",
            )
        )
    if not settings.SECURE_SSL_REDIRECT:
        warnings.append(
            Warning(
                "SECURE_SSL_REDIRECT is not set: the admin answers plain http requests.",
                hint="docs/deployment.md, 'Production'.",
                id="gateway.W008",
            )
        )
    return warnings


# Django's namespace check reads every resolver's patterns, a lazy one's too (gateway_site.urls,
# `lazy_include`): it would import SAML's and SCIM's modules before every manage.py command. This
# one is Django's, without looking into a lazy resolver; Django's own runs over the whole tree in
# tests/ops/test_startup_imports.py.
registry.registry.registered_checks.discard(check_url_namespaces_unique)


@register(Tags.urls)
def url_namespaces_unique(app_configs, **kwargs):
    if not getattr(settings, "ROOT_URLCONF", None):
        return []
    from django.urls import get_resolver

    counted = Counter(_namespaces(get_resolver()))
    return [
        Warning(
            f"URL namespace '{namespace}' isn't unique. You may not be able to reverse all URLs "
            "in this namespace",
            id="urls.W005",
        )
        for namespace, count in counted.items()
        if count > 1
    ]


def _namespaces(resolver, parents: tuple[str, ...] = ()) -> list[str]:
    from gateway_site.urls import LazyResolver

    if isinstance(resolver, LazyResolver):
        return []
    found = []
    for pattern in getattr(resolver, "url_patterns", []):
        namespace = getattr(pattern, "namespace", None)
        current = parents if namespace is None else (*parents, namespace)
        if namespace is not None:
            found.append(":".join(current))
        found.extend(_namespaces(pattern, current))
    return found
