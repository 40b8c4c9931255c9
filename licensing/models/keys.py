"""Who calls the API: API keys, JWT issuers (the algorithms and claims they may use) and end
users."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.fields import EncryptedTextField
from core.outbound import Refused, validate_outbound_url

from .institutions import Institution, License


class ApiKey(models.Model):
    class Kind(models.TextChoices):
        """What the key is: the one place key kinds are declared (the admin, the command, the
        management API and the request path read them from here)."""

        # Its caller is the key (a service, a student's portal key, a course key).
        STANDARD = "standard", _("API key")
        # A trusted chat front end (Open WebUI) acting for the person each request names
        # (licensing.access.frontend; docs/open-webui.md).
        FRONT_END = "front_end", _("Front-end key")

    license = models.ForeignKey(License, on_delete=models.CASCADE, related_name="api_keys")
    kind = models.CharField(
        _("kind"),
        max_length=16,
        choices=Kind.choices,
        default=Kind.STANDARD,
        db_default=Kind.STANDARD,
        help_text=_(
            "A front-end key (Open WebUI) acts for the students its requests name by e-mail: "
            "each pays from their own allowance under their course's rules."
        ),
    )
    # A student's own key (the portal): the wallet and the ledger rows are the end user's.
    end_user = models.ForeignKey(
        "EndUser", on_delete=models.CASCADE, null=True, blank=True, related_name="api_keys"
    )
    # A course member's key: charged to the course's levels too (a key pays for one course).
    course = models.ForeignKey(
        "Course", on_delete=models.CASCADE, null=True, blank=True, related_name="api_keys"
    )
    name = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=32, db_index=True, editable=False)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    active = models.BooleanField(default=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text=_("Last request that reached a provider (updated at most once a minute)"),
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("API key")
        constraints = [
            # A front-end key acts for many people: it is never one student's own key.
            models.CheckConstraint(
                condition=~models.Q(kind="front_end") | models.Q(end_user__isnull=True),
                name="front_end_key_has_no_end_user",
            ),
        ]

    def __str__(self):
        label = self.name or self.license.name
        if self.kind == self.Kind.FRONT_END:
            return f"{self.prefix}… ({label}, {gettext('front-end key')})"
        return f"{self.prefix}… ({label})"

    @property
    def is_front_end(self) -> bool:
        return self.kind == self.Kind.FRONT_END


# What an issuer may sign with: checked when an issuer is saved and when a token is verified.
ALLOWED_JWT_ALGORITHMS = (
    "HS256", "HS384", "HS512",
    "RS256", "RS384", "RS512",
    "PS256", "PS384", "PS512",
    "ES256", "ES384", "ES512",
    "EdDSA",
)  # fmt: skip


# The claims every token carries for its own purpose: none of them can name a course.
REGISTERED_JWT_CLAIMS = frozenset({"iss", "sub", "aud", "exp", "nbf", "iat", "jti"})


class JwtIssuer(models.Model):
    """An identity provider whose tokens are accepted; its users land on `license`."""

    institution = models.ForeignKey(
        Institution, on_delete=models.CASCADE, related_name="jwt_issuers"
    )
    license = models.ForeignKey(License, on_delete=models.CASCADE, related_name="jwt_issuers")
    issuer = models.CharField(max_length=500, unique=True, help_text=_("The `iss` claim"))
    audience = models.CharField(max_length=500, help_text=_("The required `aud` claim"))
    algorithms = models.JSONField(default=list, help_text=_('e.g. ["RS256"] or ["HS256"]'))
    jwks_url = models.CharField(max_length=500, blank=True)
    public_keys = models.TextField(blank=True, help_text=_("PEM public keys, one or more"))
    hs256_secret = EncryptedTextField(max_length=500, blank=True)  # encrypted at rest
    course_claim = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text=(
            _(
                "The claim that names a course code of the license (e.g. course); blank = tokens "
                "name no course. An unknown code is refused like an unknown token."
            )
        ),
    )
    active = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["issuer"]
        verbose_name = _("JWT issuer")

    def __str__(self):
        return self.issuer

    def clean(self):
        algs = self.algorithms
        if not isinstance(algs, list) or not algs or not all(isinstance(a, str) for a in algs):
            raise ValidationError({"algorithms": _("A non-empty list of algorithm names.")})
        unknown = [a for a in algs if a not in ALLOWED_JWT_ALGORITHMS]
        if unknown:
            raise ValidationError(
                {"algorithms": _("Unsupported algorithms: %(names)s") % {"names": unknown}}
            )
        if not (self.jwks_url or self.public_keys or self.hs256_secret):
            raise ValidationError(_("Give a JWKS URL, public keys or an HS256 secret."))
        if self.course_claim in REGISTERED_JWT_CLAIMS:
            raise ValidationError(
                {"course_claim": _("A registered claim (iss, sub, aud, ...) names no course.")}
            )
        if self.jwks_url:
            # The SSRF guard's rules for every URL an admin sets (checked again at each fetch).
            try:
                validate_outbound_url(self.jwks_url)
            except Refused as exc:
                raise ValidationError({"jwks_url": exc.message}) from exc


class EndUser(models.Model):
    """A person on a license with a wallet of their own under a per-user strategy: known from
    a JWT `sub` (created on their first valid token) or a student who signed in to the portal
    (`user`; their portal keys carry `ApiKey.end_user`)."""

    license = models.ForeignKey(License, on_delete=models.CASCADE, related_name="end_users")
    issuer = models.ForeignKey(
        JwtIssuer, on_delete=models.CASCADE, related_name="end_users", null=True, blank=True
    )
    subject = models.CharField(max_length=500)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="end_users",
        help_text=_("The portal student (signed in with the institution's identity provider)"),
    )
    active = models.BooleanField(
        default=True, db_default=True, help_text=_("Off: the student lost the role; keys refused")
    )
    terms_accepted_at = models.DateTimeField(null=True, blank=True)
    # The student's own choice of language (the portal's menu; as AdminProfile.language).
    language = models.CharField(max_length=16, blank=True, default="", db_default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="uniq_end_user_subject"),
            models.UniqueConstraint(
                fields=["license", "user"],
                condition=models.Q(user__isnull=False),
                name="uniq_end_user_portal_user",
            ),
        ]

    def __str__(self):
        return self.subject
