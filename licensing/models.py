from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from core.fields import EncryptedTextField
from core.outbound import Refused, validate_outbound_url


def default_policy():
    from .rules.policy import open_policy_document

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
        help_text="Shown in the student portal; a student accepts it before their first key",
    )
    portal_key_limit = models.PositiveSmallIntegerField(
        default=5,
        db_default=5,
        validators=[MaxValueValidator(100)],
        help_text="Active API keys one student may hold in the portal",
    )
    # Money shown as money (licensing.console.money): empty = GATEWAY_CURRENCY and
    # GATEWAY_CREDITS_PER_CURRENCY_UNIT.
    currency = models.CharField(
        max_length=3,
        blank=True,
        default="",
        db_default="",
        validators=[RegexValidator(r"^[A-Z]{3}\Z", "Three capital letters (ISO 4217), e.g. EUR")],
        help_text="ISO 4217 code shown beside micro-credits (e.g. EUR); empty = the gateway's",
    )
    # Courses' periods (day, week, month) and access windows are read in this time zone.
    timezone = models.CharField(
        max_length=64,
        default="UTC",
        db_default="UTC",
        help_text="IANA time zone of the institution's course periods, e.g. Europe/Berlin",
    )
    micro_credits_per_currency_unit = models.BigIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Micro-credits worth one unit of the currency; empty = the gateway's",
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
        default=default_policy, help_text="Policy document (see docs/policy.md)"
    )
    guardrails = models.JSONField(
        default=dict,
        blank=True,
        help_text='{"input": {"patterns": ["regex", ...], "moderation": true}, '
        '"output": {"patterns": [...], "moderation": false}} (moderation: the direct '
        "provider's moderation call; a failed call refuses the request with 503)",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def clean(self):
        from .rules.guardrails import GuardrailConfigError, compile_guardrails
        from .rules.policy import PolicyDocumentError, validate_policy_document

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
        POOLED = "pooled", "Pooled: one wallet for the license"
        PER_USER = "per_user", "Per user: one wallet per end user or API key"

    class Period(models.TextChoices):
        DAILY = "daily", "Daily"
        WEEKLY = "weekly", "Weekly"
        MONTHLY = "monthly", "Monthly"
        LIFETIME = "lifetime", "Lifetime"

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
        null=True, blank=True, help_text="Micro-credits per wallet and period; empty = unlimited"
    )
    alert_threshold_percent = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        verbose_name="alert threshold (%)",
        help_text="Email the institution's admins once per window when a wallet's spend "
        "reaches this share of the limit (e.g. 80); empty = no alert",
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


class ApiKey(models.Model):
    license = models.ForeignKey(License, on_delete=models.CASCADE, related_name="api_keys")
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
        help_text="Last request that reached a provider (updated at most once a minute)",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self):
        return f"{self.prefix}… ({self.name or self.license.name})"


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
    issuer = models.CharField(max_length=500, unique=True, help_text="The `iss` claim")
    audience = models.CharField(max_length=500, help_text="The required `aud` claim")
    algorithms = models.JSONField(default=list, help_text='e.g. ["RS256"] or ["HS256"]')
    jwks_url = models.CharField(max_length=500, blank=True)
    public_keys = models.TextField(blank=True, help_text="PEM public keys, one or more")
    hs256_secret = EncryptedTextField(max_length=500, blank=True)  # encrypted at rest
    course_claim = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text=(
            "The claim that names a course code of the license (e.g. course); blank = tokens "
            "name no course. An unknown code is refused like an unknown token."
        ),
    )
    active = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["issuer"]
        verbose_name = "JWT issuer"

    def __str__(self):
        return self.issuer

    def clean(self):
        algs = self.algorithms
        if not isinstance(algs, list) or not algs or not all(isinstance(a, str) for a in algs):
            raise ValidationError({"algorithms": "A non-empty list of algorithm names."})
        unknown = [a for a in algs if a not in ALLOWED_JWT_ALGORITHMS]
        if unknown:
            raise ValidationError({"algorithms": f"Unsupported algorithms: {unknown}"})
        if not (self.jwks_url or self.public_keys or self.hs256_secret):
            raise ValidationError("Give a JWKS URL, public keys or an HS256 secret.")
        if self.course_claim in REGISTERED_JWT_CLAIMS:
            raise ValidationError(
                {"course_claim": "A registered claim (iss, sub, aud, ...) names no course."}
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
        help_text="The portal student (signed in with the institution's identity provider)",
    )
    active = models.BooleanField(
        default=True, db_default=True, help_text="Off: the student lost the role; keys refused"
    )
    terms_accepted_at = models.DateTimeField(null=True, blank=True)
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


class Wallet(models.Model):
    """Spend of one budget holder (the license, a key or an end user) in one window."""

    license = models.ForeignKey(License, on_delete=models.CASCADE, related_name="wallets")
    holder = models.CharField(max_length=100, help_text="license, key:<id> or user:<id>")
    period = models.CharField(max_length=32)
    window_start = models.DateTimeField()
    unit = models.CharField(max_length=32)
    spent = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-window_start", "license__name", "holder"]
        constraints = [
            models.UniqueConstraint(
                fields=["license", "holder", "period", "window_start"], name="uniq_wallet_window"
            )
        ]

    def __str__(self):
        return f"{self.license.name} {self.holder} {self.period} {self.window_start:%Y-%m-%d}"


class Outcome(models.TextChoices):
    """A ledger row's status class, for reviewers (decided by the pipeline's step that ended
    the request, see licensing.ledger.record's codes)."""

    SUCCESS = "success", "Success"
    CLIENT_ERROR = "client_error", "Client error"
    DENIED = "denied", "Denied by the gateway"
    FAILURE = "failure", "Provider or gateway failure"


class Transaction(models.Model):
    """One row per request that reached the provider call, and one per refusal after the
    caller was identified (0 credits, no wallet). Never updated or deleted."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # Unique: a spooled entry replayed after its first write did commit is recognised by it.
    request_id = models.CharField(max_length=64, unique=True)
    # Indexed by `tx_license_time` below (license first), not by an index of its own.
    license = models.ForeignKey(
        License, on_delete=models.PROTECT, related_name="transactions", db_index=False
    )
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="transactions"
    )
    end_user = models.ForeignKey(
        EndUser, on_delete=models.SET_NULL, null=True, blank=True, related_name="transactions"
    )
    wallet = models.ForeignKey(
        Wallet, on_delete=models.SET_NULL, null=True, blank=True, related_name="transactions"
    )
    # The course that paid (its allowance and pool), when the caller is a course member.
    course = models.ForeignKey(
        "Course",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="transactions",
        db_index=False,
    )
    service = models.CharField(max_length=64, db_index=True)
    requested_model = models.CharField(max_length=200)
    billed_model = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=64)
    connection = models.CharField(max_length=64, blank=True)
    # Defaults in the database too: rows written by code that does not know the columns (a
    # worker of the previous release during a rolling upgrade, SQL) still go in.
    attempts = models.PositiveSmallIntegerField(
        default=1,
        db_default=1,
        help_text="Provider calls made for the request (0: refused before any)",
    )
    failovers = models.CharField(
        max_length=500,
        blank=True,
        default="",
        db_default="",
        help_text="The attempts that failed before the last: connection and reason",
    )
    status_code = models.PositiveSmallIntegerField()
    prompt_tokens = models.BigIntegerField(null=True, blank=True)
    completion_tokens = models.BigIntegerField(null=True, blank=True)
    total_tokens = models.BigIntegerField(null=True, blank=True)
    images = models.IntegerField(null=True, blank=True)
    megapixels = models.DecimalField(max_digits=12, decimal_places=4, null=True, blank=True)
    units = models.IntegerField(
        null=True, blank=True, help_text="Searches made or pages fetched (web_search, fetch)"
    )
    credits = models.BigIntegerField(default=0, help_text="Micro-credits charged")
    metadata = models.JSONField(default=dict, blank=True)
    latency_ms = models.IntegerField(default=0)
    upstream_id = models.CharField(
        max_length=200,
        blank=True,
        default="",
        verbose_name="answer id",
        help_text="The id of the provider's answer (chatcmpl-..., resp_...) a user may quote",
    )
    outcome = models.CharField(
        max_length=16, choices=Outcome.choices, default=Outcome.SUCCESS, verbose_name="status class"
    )
    error_code = models.CharField(
        max_length=40, blank=True, default="", help_text="Why it failed or was refused"
    )
    error_message = models.CharField(
        max_length=500, blank=True, default="", help_text="The reason, sanitized"
    )

    class Meta:
        ordering = ["-created_at"]
        # For the review filters and totals (licensing.console.review), measured in bench/review.py;
        # on PostgreSQL also a GIN index on `metadata` (migration 0008: SQLite has none).
        indexes = [
            # A license's (an institution's: its few licenses) rows in a time range; the
            # totals read the included columns without visiting the table (PostgreSQL).
            models.Index(
                fields=["license", "created_at"],
                include=["credits", "total_tokens", "images"],
                name="tx_license_time",
            ),
            # A course's rows in a time range, for its teachers' per-student usage
            # (licensing.console.course_usage); partial: a plain license's insert skips it.
            models.Index(
                fields=["course", "created_at"],
                include=["credits"],
                condition=models.Q(course__isnull=False),
                name="tx_course_time",
            ),
            # Answer-id prefix search (LIKE 'chatcmpl-abc%') in any collation.
            models.Index(
                fields=["upstream_id"],
                opclasses=["varchar_pattern_ops"],
                name="tx_answer_id_prefix",
            ),
        ]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.service} {self.credits}"


class AdminProfile(models.Model):
    """Ties a staff user to one institution with a role (superusers need none: they see all)."""

    class Role(models.TextChoices):
        ADMIN = "admin", "Institution admin: licenses, license types, keys, end users, issuers"
        REVIEWER = "reviewer", "Reviewer: reads licenses, wallets and transactions"
        TEACHER = "teacher", "Teacher: their own courses"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="gateway_profile"
    )
    institution = models.ForeignKey(
        Institution, on_delete=models.CASCADE, related_name="admin_profiles"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.ADMIN)
    # Set by the identity provider at each sign-in (licensing.access.sso): the admin's forms
    # leave such a role alone, the next sign-in would undo a change.
    managed_by_idp = models.BooleanField(default=False, db_default=False)

    class Meta:
        verbose_name = "institution role"

    def __str__(self):
        return f"{self.user} ({self.role}, {self.institution})"


class BudgetAlert(models.Model):
    """One row per license and budget window whose alert threshold was crossed: the email
    goes out once per window, whatever the concurrency (the unique constraint decides)."""

    license = models.ForeignKey(License, on_delete=models.CASCADE, related_name="budget_alerts")
    period = models.CharField(max_length=32)
    window_start = models.DateTimeField()
    holder = models.CharField(max_length=100)
    spent = models.BigIntegerField(help_text="The wallet's spend after the crossing request")
    threshold = models.BigIntegerField(help_text="Micro-credits")
    limit = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)
    recipients = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["license", "period", "window_start"], name="uniq_budget_alert_window"
            )
        ]

    def __str__(self):
        return f"{self.license} {self.window_start:%Y-%m-%d}"


class IdentityProvider(models.Model):
    """An institution's OpenID Connect provider: its staff and students sign in with it
    (licensing.access.sso), and its groups claim decides their role at every sign-in."""

    institution = models.OneToOneField(
        Institution, on_delete=models.CASCADE, related_name="identity_provider"
    )
    issuer = models.CharField(
        max_length=500, unique=True, help_text="The issuer URL (discovery at /.well-known/...)"
    )
    client_id = models.CharField(max_length=255)
    client_secret = EncryptedTextField(max_length=1000, blank=True)  # encrypted at rest
    client_secret_env = models.CharField(
        max_length=100, blank=True, help_text="Or: the environment variable holding the secret"
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
        help_text="The license students land on (per-user budgets apply)",
    )
    email_domains = models.CharField(
        max_length=500,
        blank=True,
        help_text="Comma-separated e-mail domains: the login page finds the institution by them",
    )
    sso_only = models.BooleanField(
        default=False, help_text="Refuse local passwords for this institution's users"
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["institution__name"]
        verbose_name = "identity provider (SSO)"

    def __str__(self):
        return f"{self.institution} ({self.issuer})"


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
    groups = models.JSONField(default=list, blank=True, help_text="At the last sign-in")
    last_sign_in = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "subject"], name="uniq_sso_subject")
        ]

    def __str__(self):
        return f"{self.subject} ({self.provider.institution})"


class AuditEvent(models.Model):
    """Who did what, when and from where: sign-ins (and refusals), roles, keys, policies,
    budgets, tokens (licensing.access.audit). Written once, never changed."""

    class Action(models.TextChoices):
        SIGN_IN = "sign_in", "Signed in"
        SIGN_IN_REFUSED = "sign_in_refused", "Sign-in refused"
        SIGN_OUT = "sign_out", "Signed out"
        ROLE_CHANGED = "role_changed", "Role changed"
        USER_CREATED = "user_created", "User created"
        USER_DEACTIVATED = "user_deactivated", "User deactivated"
        API_KEY_CREATED = "api_key_created", "API key created"
        API_KEY_REVOKED = "api_key_revoked", "API key revoked"
        POLICY_CHANGED = "policy_changed", "Policy changed"
        BUDGET_CHANGED = "budget_changed", "Budget changed"
        TOKEN_CREATED = "token_created", "Management token created"
        SSO_CONFIGURED = "sso_configured", "Identity provider configured"
        TERMS_ACCEPTED = "terms_accepted", "Terms of use accepted"
        COURSE_CREATED = "course_created", "Course created"
        COURSE_CHANGED = "course_changed", "Course changed"
        COURSE_DELETED = "course_deleted", "Course deleted"
        EXAM_MODE_CHANGED = "exam_mode_changed", "Exam mode switched"
        COURSE_WINDOW_CHANGED = "course_window_changed", "Course window added or removed"
        COURSE_MEMBER_CHANGED = "course_member_changed", "Course member added, changed or removed"

    created_at = models.DateTimeField(default=timezone.now)
    institution = models.ForeignKey(
        Institution, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    actor_name = models.CharField(max_length=254, blank=True, help_text="Kept if the user goes")
    action = models.CharField(max_length=32, choices=Action.choices)
    target = models.CharField(max_length=200, blank=True, help_text="e.g. license:3, user:7")
    detail = models.JSONField(default=dict, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True, verbose_name="from")
    user_agent = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["institution", "created_at"], name="audit_institution_time"),
            models.Index(fields=["created_at"], name="audit_time"),
        ]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action}"


class Colleague(User):
    """A staff user of one institution, as its institution admins see them in the admin
    ("Colleagues", licensing.console.admin.colleagues): a proxy, no table of its own."""

    class Meta:
        proxy = True
        verbose_name = "colleague"


class Course(models.Model):
    """A class under a license (same institution): each member student has an allowance per
    period, the course may have a pool per period, and its policy overlay may only narrow the
    license type's policy. Access windows and exam mode switch it off (or narrower) in time."""

    class Period(models.TextChoices):
        DAY = "day", "Day"
        WEEK = "week", "Week"
        MONTH = "month", "Month"

    institution = models.ForeignKey(Institution, on_delete=models.CASCADE, related_name="courses")
    license = models.ForeignKey(License, on_delete=models.CASCADE, related_name="courses")
    name = models.CharField(max_length=200)
    code = models.CharField(max_length=64, help_text="Unique in the institution, e.g. CS101")
    allowance = models.BigIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="Micro-credits per student and period; empty = no per-student limit",
    )
    allowance_period = models.CharField(max_length=8, choices=Period.choices, default=Period.DAY)
    pool_limit = models.BigIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="Micro-credits for the whole course per period; empty = no course pool",
    )
    policy = models.JSONField(
        default=dict,
        blank=True,
        help_text="Overlay: may only narrow the license type's policy ({} = as the license type)",
    )
    exam_mode = models.BooleanField(default=False)
    exam_policy = models.JSONField(
        null=True,
        blank=True,
        help_text="What exam mode allows: empty = every service off; else a narrower overlay",
    )
    lti_context_id = models.CharField(max_length=255, blank=True, default="")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["code"]
        constraints = [
            models.UniqueConstraint(fields=["institution", "code"], name="uniq_course_code"),
            # One course per LMS context (licensing.access.lti): two first launches at once
            # cannot make two.
            models.UniqueConstraint(
                fields=["institution", "lti_context_id"],
                condition=~models.Q(lti_context_id=""),
                name="uniq_course_lti_context",
            ),
        ]

    def __str__(self):
        return f"{self.code} {self.name}"

    def clean(self):
        from .rules.courses import overlay_problems

        errors: dict[str, str] = {}
        if self.license_id is not None and self.institution_id is not None:
            if self.license.institution_id != self.institution_id:
                errors["license"] = "The license belongs to another institution."
            else:
                errors.update(
                    overlay_problems(
                        self.license.license_type.policy, self.policy, self.exam_policy
                    )
                )
        if errors:
            raise ValidationError(errors)


class CourseWindow(models.Model):
    """A date-time range of a course: when it is open (`access`; none = always open) or in
    exam mode (`exam`, beside the switch)."""

    class Kind(models.TextChoices):
        ACCESS = "access", "Open"
        EXAM = "exam", "Exam"

    course = models.ForeignKey(Course, on_delete=models.CASCADE, related_name="windows")
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.ACCESS)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()

    class Meta:
        ordering = ["starts_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ends_at__gt=models.F("starts_at")),
                name="course_window_ends_after_start",
            )
        ]

    def __str__(self):
        # In the current time zone: the course page shows its windows in the institution's.
        starts_at = timezone.localtime(self.starts_at)
        return f"{self.course.code} {self.kind} {starts_at:%Y-%m-%d %H:%M}"

    def clean(self):
        # The check constraint's rule, as a message on the field (forms, the API's 400).
        if self.starts_at and self.ends_at and self.ends_at <= self.starts_at:
            raise ValidationError({"ends_at": "The window must end after it starts."})


class CourseMember(models.Model):
    """A student in a course (an end user of the course's license): paused members are
    refused; a top-up adds to their allowance in one period."""

    course = models.ForeignKey(Course, on_delete=models.CASCADE, related_name="members")
    end_user = models.ForeignKey(EndUser, on_delete=models.CASCADE, related_name="memberships")
    paused = models.BooleanField(default=False)
    top_up = models.BigIntegerField(
        default=0, validators=[MinValueValidator(0)], help_text="Extra micro-credits"
    )
    top_up_window_start = models.DateTimeField(
        null=True, blank=True, help_text="The period the top-up is for"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["course", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["course", "end_user"], name="uniq_course_member")
        ]

    def __str__(self):
        return f"{self.course.code} {self.end_user}"


class CourseTeacher(models.Model):
    """A teacher of a course (a staff user with the teacher role, or an institution admin)."""

    course = models.ForeignKey(Course, on_delete=models.CASCADE, related_name="teachers")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="taught_courses"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["course", "user"], name="uniq_course_teacher")
        ]

    def __str__(self):
        return f"{self.course.code} {self.user}"


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
    issuer = models.CharField(max_length=500, help_text="The platform's `iss` (its base URL)")
    client_id = models.CharField(max_length=255, help_text="The client id the LMS gave the tool")
    deployment_ids = models.JSONField(
        default=list, blank=True, help_text='The deployment ids accepted, e.g. ["1"]'
    )
    jwks_url = models.CharField(max_length=500, help_text="The platform's public keyset URL")
    auth_login_url = models.CharField(
        max_length=500, help_text="The platform's OIDC authentication request URL"
    )
    license = models.ForeignKey(
        License,
        on_delete=models.PROTECT,
        related_name="lti_platforms",
        help_text="Courses created by a launch go on this license (same institution)",
    )
    allowance = models.BigIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0), MaxValueValidator(2**63 - 1)],
        help_text="Default allowance of the courses a launch creates (micro-credits); empty = none",
    )
    allowance_period = models.CharField(
        max_length=8, choices=Course.Period.choices, default=Course.Period.WEEK
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["institution__name", "issuer"]
        verbose_name = "LTI platform"
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
            errors["deployment_ids"] = "A list of deployment ids (strings)."
        if (
            self.license_id
            and self.institution_id
            and self.license.institution_id != self.institution_id
        ):
            errors["license"] = "The license must belong to the platform's institution."
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
        verbose_name = "LTI launch"
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
        verbose_name = "LTI identity"
        verbose_name_plural = "LTI identities"
        constraints = [
            models.UniqueConstraint(fields=["platform", "subject"], name="uniq_lti_subject")
        ]

    def __str__(self):
        return f"{self.subject} ({self.platform})"
