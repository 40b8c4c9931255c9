"""Sign-in: an institution's OpenID Connect provider and its users' identities, LTI
platforms, launches and identities (licensing.signin)."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.fields import EncryptedTextField
from core.outbound import Refused, validate_outbound_url

from ..rules.access import rules_from_groups
from .courses import Course
from .institutions import Institution, License

RULES_HELP = _(
    "Access rules, first match wins: a JSON list of "
    '{"when": [{"attribute": ..., "contains" | "is" | "any_of" | "present": ...}], '
    '"role": ..., "license": <id>, "courses": [<id>]} (docs/access-rules.md)'
)


class IdentityProvider(models.Model):
    """An institution's OpenID Connect or SAML 2.0 identity provider: its staff and students
    sign in with it (licensing.signin.sso, licensing.signin.saml), and its groups claim (SAML:
    memberOf, eduPersonEntitlement, eduPersonAffiliation) decides their role at every sign-in.
    One per institution, whichever protocol (docs/decisions/saml.md): a SAML provider keeps
    its IdP's entityID in `issuer` and has no client id."""

    class Protocol(models.TextChoices):
        OIDC = "oidc", _("OpenID Connect")
        SAML = "saml", _("SAML 2.0")

    protocol = models.CharField(max_length=8, choices=Protocol.choices, default=Protocol.OIDC)
    institution = models.OneToOneField(
        Institution, on_delete=models.CASCADE, related_name="identity_provider"
    )
    issuer = models.CharField(
        max_length=500, unique=True, help_text=_("The issuer URL (discovery at /.well-known/...)")
    )
    client_id = models.CharField(max_length=255)
    client_secret = EncryptedTextField(max_length=1000, blank=True)  # encrypted at rest
    client_secret_env = models.CharField(
        max_length=100, blank=True, help_text=_("Or: the environment variable holding the secret")
    )
    groups_claim = models.CharField(max_length=100, default="groups")
    admin_groups = models.JSONField(default=list, blank=True)
    reviewer_groups = models.JSONField(default=list, blank=True)
    teacher_groups = models.JSONField(default=list, blank=True)
    student_groups = models.JSONField(default=list, blank=True)
    student_license = models.ForeignKey(
        License,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text=_("The license students land on (per-user budgets apply)"),
    )
    access_rules = models.JSONField(default=list, blank=True, help_text=RULES_HELP)
    email_domains = models.CharField(
        max_length=500,
        blank=True,
        help_text=_("Comma-separated e-mail domains: the login page finds the institution by them"),
    )
    sso_only = models.BooleanField(
        _("SSO only"),
        default=False,
        help_text=_("Refuse local passwords for this institution's users"),
    )
    # SAML 2.0 only (docs/saml.md): the IdP's metadata from a URL (fetched through the
    # outbound guard, refreshed) or as stored XML; its signature checked with the federation's
    # signing certificate when one is set. The SP's own key pair signs nothing today but
    # decrypts encrypted assertions: its private key is encrypted at rest.
    saml_metadata_url = models.CharField(max_length=500, blank=True)
    saml_metadata_xml = models.TextField(blank=True)
    saml_federation_cert = models.TextField(
        blank=True, help_text=_("PEM certificate that signs the federation's metadata")
    )
    saml_sp_cert = models.TextField(blank=True)
    saml_sp_key = EncryptedTextField(max_length=10000, blank=True)  # encrypted at rest
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["institution__name"]
        verbose_name = _("identity provider (SSO)")

    def __str__(self):
        return f"{self.institution} ({self.issuer})"

    GROUP_FIELDS = ("admin_groups", "reviewer_groups", "teacher_groups", "student_groups")

    def save(self, *args, **kwargs):
        # The groups mapping is a shorthand for rules: while any group field is set, the rules
        # are the ones it means (docs/decisions/access-rules.md), whoever saves the row.
        if any(getattr(self, name) for name in self.GROUP_FIELDS):
            self.access_rules = self.rules_of_groups()
            fields = kwargs.get("update_fields")
            if fields is not None:
                kwargs["update_fields"] = {*fields, "access_rules"}
        super().save(*args, **kwargs)

    def rules_of_groups(self) -> list[dict]:
        return rules_from_groups(
            groups_claim=self.groups_claim,
            admin_groups=list(self.admin_groups or []),
            reviewer_groups=list(self.reviewer_groups or []),
            teacher_groups=list(self.teacher_groups or []),
            student_groups=list(self.student_groups or []),
            student_license_id=self.student_license_id,
        )


class SsoIdentity(models.Model):
    """Which Django user a subject of an identity provider is (the `sub` claim, stable)."""

    provider = models.ForeignKey(
        IdentityProvider, on_delete=models.CASCADE, related_name="identities"
    )
    subject = models.CharField(max_length=255)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity"
    )
    email = models.CharField(max_length=254, blank=True)
    groups = models.JSONField(default=list, blank=True, help_text=_("At the last sign-in"))
    last_sign_in = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "subject"], name="uniq_sso_subject")
        ]
        # A front-end key names a student by the e-mail their identity provider verified
        # (licensing.access.frontend): looked up by provider and address.
        indexes = [models.Index(fields=["provider", "email"], name="sso_identity_email")]

    def __str__(self):
        return f"{self.subject} ({self.provider.institution})"


class SamlAssertionUse(models.Model):
    """A SAML assertion taken once: its id is kept until its NotOnOrAfter, so a replayed
    assertion is refused even with a fresh session (the unique constraint decides races)."""

    provider = models.ForeignKey(
        IdentityProvider, on_delete=models.CASCADE, related_name="saml_assertions"
    )
    assertion_id = models.CharField(max_length=255)
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "assertion_id"], name="uniq_saml_assertion")
        ]
        indexes = [models.Index(fields=["expires_at"], name="saml_assertion_expiry")]

    def __str__(self):
        return self.assertion_id


def _outbound_url_errors(**urls: str) -> dict[str, str]:
    """The SSRF guard's verdict on each admin-set URL (checked again at each fetch)."""
    errors = {}
    for name, value in urls.items():
        try:
            validate_outbound_url(value)
        except Refused as exc:
            errors[name] = exc.message
    return errors


class LtiPlatform(models.Model):
    """An institution's LMS (Moodle, Canvas...) registered for LTI 1.3 launches (docs/lti.md):
    its id_tokens are verified with its JWKS; courses created by an instructor's launch go on
    `license` with the default allowance and period."""

    institution = models.ForeignKey(
        Institution, on_delete=models.CASCADE, related_name="lti_platforms"
    )
    issuer = models.CharField(max_length=500, help_text=_("The platform's `iss` (its base URL)"))
    client_id = models.CharField(max_length=255, help_text=_("The client id the LMS gave the tool"))
    deployment_ids = models.JSONField(
        default=list, blank=True, help_text=_('The deployment ids accepted, e.g. ["1"]')
    )
    jwks_url = models.CharField(max_length=500, help_text=_("The platform's public keyset URL"))
    auth_login_url = models.CharField(
        max_length=500, help_text=_("The platform's OIDC authentication request URL")
    )
    license = models.ForeignKey(
        License,
        on_delete=models.PROTECT,
        related_name="lti_platforms",
        help_text=_("Courses created by a launch go on this license (same institution)"),
    )
    allowance = models.BigIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0), MaxValueValidator(2**63 - 1)],
        help_text=_(
            "Default allowance of the courses a launch creates (micro-credits); empty = none"
        ),
    )
    allowance_period = models.CharField(
        max_length=8, choices=Course.Period.choices, default=Course.Period.WEEK
    )
    access_rules = models.JSONField(
        default=list,
        blank=True,
        help_text=_("Access rules on the launch's claims (empty: roles from the LTI roles claim)"),
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["institution__name", "issuer"]
        verbose_name = _("LTI platform")
        constraints = [
            models.UniqueConstraint(fields=["issuer", "client_id"], name="uniq_lti_platform")
        ]

    def __str__(self):
        return f"{self.issuer} ({self.client_id})"

    def save(self, *args, **kwargs):
        # The URLs are checked on every save, not only through forms (the SSRF guard's rules).
        errors = _outbound_url_errors(jwks_url=self.jwks_url, auth_login_url=self.auth_login_url)
        if errors:
            raise ValidationError(errors)
        super().save(*args, **kwargs)

    def clean(self):
        errors: dict[str, str] = _outbound_url_errors(
            jwks_url=self.jwks_url, auth_login_url=self.auth_login_url
        )
        ids = self.deployment_ids
        if not isinstance(ids, list) or not all(
            isinstance(i, str) and 0 < len(i) <= 255 for i in ids
        ):
            errors["deployment_ids"] = gettext("A list of deployment ids (strings).")
        if (
            self.license_id
            and self.institution_id
            and self.license.institution_id != self.institution_id
        ):
            errors["license"] = gettext("The license must belong to the platform's institution.")
        if errors:
            raise ValidationError(errors)


class LtiLaunchState(models.Model):
    """One LTI login initiation: the `state` and `nonce` sent to the platform, used once by the
    launch within 10 minutes. Kept in the database (every worker sees it; the LMS's cross-site
    POST carries no session cookie); a used row keeps its nonce: a replayed id_token is known."""

    platform = models.ForeignKey(LtiPlatform, on_delete=models.CASCADE, related_name="launches")
    state = models.CharField(max_length=64, unique=True)
    nonce = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("LTI launch")
        indexes = [models.Index(fields=["created_at"], name="lti_launch_time")]

    def __str__(self):
        return f"{self.platform} {self.created_at:%Y-%m-%d %H:%M:%S}"


class LtiIdentity(models.Model):
    """Which Django user a person of an LMS is (the id_token's `sub`, stable per platform)."""

    platform = models.ForeignKey(LtiPlatform, on_delete=models.CASCADE, related_name="identities")
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="lti_identities"
    )
    name = models.CharField(max_length=200, blank=True)
    email = models.CharField(max_length=254, blank=True)
    last_launch = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("LTI identity")
        verbose_name_plural = _("LTI identities")
        constraints = [
            models.UniqueConstraint(fields=["platform", "subject"], name="uniq_lti_subject")
        ]

    def __str__(self):
        return f"{self.subject} ({self.platform})"
