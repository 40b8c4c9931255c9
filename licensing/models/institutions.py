"""Institutions, their license types (policy and guardrails) and licenses (budgets), and their
staff: institution roles (AdminProfile) and the colleagues proxy."""

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

# Retention defaults (docs/decisions/retention.md): a school year and a half for who made a
# request (a teacher's and a budget's questions are about this year and the last), two years
# for the audit log (a complaint or an incident is looked into within that time).
LEDGER_IDENTITY_DAYS = 540
AUDIT_LOG_DAYS = 730


def default_policy():
    from ..rules.policy import open_policy_document

    return open_policy_document()


class Institution(models.Model):
    name = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    # The student portal (licensing.portal): what a student accepts before their first key,
    # and how many active keys one student may hold.
    terms_of_use = models.TextField(
        blank=True,
        default="",
        db_default="",
        help_text=_("Shown in the student portal; a student accepts it before their first key"),
    )
    portal_key_limit = models.PositiveSmallIntegerField(
        default=5,
        db_default=5,
        validators=[MaxValueValidator(100)],
        help_text=_("Active API keys one student may hold in the portal"),
    )
    # Money shown as money (licensing.console.money): empty = GATEWAY_CURRENCY and
    # GATEWAY_CREDITS_PER_CURRENCY_UNIT.
    currency = models.CharField(
        max_length=3,
        blank=True,
        default="",
        db_default="",
        validators=[
            RegexValidator(r"^[A-Z]{3}\Z", _("Three capital letters (ISO 4217), e.g. EUR"))
        ],
        help_text=_("ISO 4217 code shown beside micro-credits (e.g. EUR); empty = the gateway's"),
    )
    # Courses' periods (day, week, month) and access windows are read in this time zone.
    timezone = models.CharField(
        max_length=64,
        default="UTC",
        db_default="UTC",
        help_text=_("IANA time zone of the institution's course periods, e.g. Europe/Berlin"),
    )
    # The language of the admin, the portal and the teacher's pages for a person who has chosen
    # none and whose browser asks for none the gateway speaks (gateway_site.settings.LANGUAGES);
    # empty = the gateway's LANGUAGE_CODE. Validated by the forms against LANGUAGES, not by
    # `choices`, so adding a language needs no migration.
    language = models.CharField(
        max_length=16,
        blank=True,
        default="",
        db_default="",
        help_text=_("Default language of the institution's pages, e.g. de; empty = the gateway's"),
    )
    micro_credits_per_currency_unit = models.BigIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=_("Micro-credits worth one unit of the currency; empty = the gateway's"),
    )

    # Retention (issue 39, licensing.privacy.retention, run daily by `manage.py apply_retention`):
    # after this many days a ledger row no longer says who made the request; the audit log's
    # rows are deleted after theirs. Empty = kept for as long as the institution exists.
    ledger_identity_days = models.PositiveSmallIntegerField(
        _("ledger: who made a request, kept (days)"),
        null=True,
        blank=True,
        default=LEDGER_IDENTITY_DAYS,
        db_default=LEDGER_IDENTITY_DAYS,
        validators=[MinValueValidator(1), MaxValueValidator(3650)],
        help_text=_(
            "After this many days (from a course's end, for a course's requests) a ledger row "
            "loses its person, key and metadata; credits and every sum stay. Empty = kept"
        ),
    )
    audit_log_days = models.PositiveSmallIntegerField(
        _("audit log kept (days)"),
        null=True,
        blank=True,
        default=AUDIT_LOG_DAYS,
        db_default=AUDIT_LOG_DAYS,
        validators=[MinValueValidator(30), MaxValueValidator(3650)],
        help_text=_(
            "The institution's audit log rows are deleted after this many days. Empty = kept"
        ),
    )

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class LicenseType(models.Model):
    """What a group of licenses may do: the policy document and guardrail settings."""

    institution = models.ForeignKey(
        Institution, on_delete=models.CASCADE, related_name="license_types", null=True, blank=True
    )
    name = models.CharField(max_length=200)
    active = models.BooleanField(default=True)
    policy = models.JSONField(
        default=default_policy, help_text=_("Policy document (see docs/policy.md)")
    )
    guardrails = models.JSONField(
        default=dict,
        blank=True,
        help_text=_(
            '{"input": {"patterns": ["regex", ...], "moderation": true}, '
            '"output": {"patterns": [...], "moderation": false}} (moderation: the direct '
            "provider's moderation call; a failed call refuses the request with 503)"
        ),
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def clean(self):
        from ..rules.guardrails import GuardrailConfigError, compile_guardrails
        from ..rules.policy import PolicyDocumentError, validate_policy_document

        errors = {}
        try:
            validate_policy_document(self.policy)
        except PolicyDocumentError as exc:
            errors["policy"] = str(exc)
        try:
            compile_guardrails(self.guardrails)
        except GuardrailConfigError as exc:
            errors["guardrails"] = str(exc)
        if errors:
            raise ValidationError(errors)


class License(models.Model):
    class Strategy(models.TextChoices):
        POOLED = "pooled", _("Pooled: one wallet for the license")
        PER_USER = "per_user", _("Per user: one wallet per end user or API key")

    class Period(models.TextChoices):
        DAILY = "daily", _("Daily")
        WEEKLY = "weekly", _("Weekly")
        MONTHLY = "monthly", _("Monthly")
        LIFETIME = "lifetime", _("Lifetime")

    institution = models.ForeignKey(Institution, on_delete=models.CASCADE, related_name="licenses")
    license_type = models.ForeignKey(LicenseType, on_delete=models.PROTECT, related_name="licenses")
    name = models.CharField(max_length=200, unique=True)
    active = models.BooleanField(default=True)
    budget_unit = models.CharField(max_length=32, default="micro_credits")
    budget_strategy = models.CharField(
        max_length=32, choices=Strategy.choices, default=Strategy.POOLED
    )
    budget_period = models.CharField(max_length=32, choices=Period.choices, default=Period.LIFETIME)
    budget_limit = models.BigIntegerField(
        null=True, blank=True, help_text=_("Micro-credits per wallet and period; empty = unlimited")
    )
    alert_threshold_percent = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        verbose_name=_("alert threshold (%)"),
        help_text=_(
            "Email the institution's admins once per window when a wallet's spend "
            "reaches this share of the limit (e.g. 80); empty = no alert"
        ),
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def alert_at(self) -> int | None:
        """The spend (micro-credits) at which the budget alert goes out; None = no alert."""
        if self.budget_limit is None or self.alert_threshold_percent is None:
            return None
        return alert_at(self.budget_limit, self.alert_threshold_percent)


def alert_at(limit: int, percent: int) -> int:
    return -(-limit * percent // 100)  # ceiling: 80% of 5 credits alerts at 4, not 3


class AdminProfile(models.Model):
    """Ties a staff user to one institution with a role (superusers need none: they see all)."""

    class Role(models.TextChoices):
        ADMIN = "admin", _("Institution admin: licenses, license types, keys, end users, issuers")
        REVIEWER = "reviewer", _("Reviewer: reads licenses, wallets and transactions")
        TEACHER = "teacher", _("Teacher: their own courses")
        SAFEGUARDING = "safeguarding", _("Safeguarding contact: the institution's alerts")

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="gateway_profile"
    )
    institution = models.ForeignKey(
        Institution, on_delete=models.CASCADE, related_name="admin_profiles"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.ADMIN)
    # Set by the identity provider at each sign-in (licensing.signin.sso): the admin's forms
    # leave such a role alone, the next sign-in would undo a change.
    managed_by_idp = models.BooleanField(default=False, db_default=False)
    # The person's own choice of language (the language menu), following them to every device;
    # empty = none (their browser's, else their institution's). Checked against LANGUAGES.
    language = models.CharField(max_length=16, blank=True, default="", db_default="")

    class Meta:
        verbose_name = _("institution role")

    def __str__(self):
        return f"{self.user} ({self.role}, {self.institution})"


class Colleague(User):
    """A staff user of one institution, as its institution admins see them in the admin
    ("Colleagues", licensing.console.admin.colleagues): a proxy, no table of its own."""

    class Meta:
        proxy = True
        verbose_name = _("colleague")
