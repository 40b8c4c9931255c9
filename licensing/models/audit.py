"""The audit log's rows (licensing.access.audit writes them)."""

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .institutions import Institution


class AuditEvent(models.Model):
    """Who did what, when and from where: sign-ins (and refusals), roles, keys, policies,
    budgets, tokens (licensing.access.audit). Written once, never changed."""

    class Action(models.TextChoices):
        SIGN_IN = "sign_in", _("Signed in")
        SIGN_IN_REFUSED = "sign_in_refused", _("Sign-in refused")
        SIGN_OUT = "sign_out", _("Signed out")
        ROLE_CHANGED = "role_changed", _("Role changed")
        USER_CREATED = "user_created", _("User created")
        USER_DEACTIVATED = "user_deactivated", _("User deactivated")
        API_KEY_CREATED = "api_key_created", _("API key created")
        API_KEY_REVOKED = "api_key_revoked", _("API key revoked")
        POLICY_CHANGED = "policy_changed", _("Policy changed")
        BUDGET_CHANGED = "budget_changed", _("Budget changed")
        TOKEN_CREATED = "token_created", _("Management token created")
        SSO_CONFIGURED = "sso_configured", _("Identity provider configured")
        TERMS_ACCEPTED = "terms_accepted", _("Terms of use accepted")
        COURSE_CREATED = "course_created", _("Course created")
        COURSE_CHANGED = "course_changed", _("Course changed")
        COURSE_DELETED = "course_deleted", _("Course deleted")
        EXAM_MODE_CHANGED = "exam_mode_changed", _("Exam mode switched")
        COURSE_WINDOW_CHANGED = "course_window_changed", _("Course window added or removed")
        SCIM_TOKEN_CHANGED = "scim_token_changed", _("SCIM token created, rotated or revoked")
        SCIM_CHANGED = "scim_changed", _("SCIM user or group provisioned, changed or removed")
        SCIM_REFUSED = "scim_refused", _("SCIM request refused")
        DATA_EXPORTED = "data_exported", _("Personal data downloaded")
        PERSON_ERASED = "person_erased", _("Person erased")
        COURSE_MEMBER_CHANGED = (
            "course_member_changed",
            _("Course member added, changed or removed"),
        )
        SAFEGUARDING_ALERT_RAISED = "safeguarding_raised", _("Safeguarding alert raised")
        SAFEGUARDING_ALERT_VIEWED = "safeguarding_viewed", _("Safeguarding alert viewed")
        SAFEGUARDING_ALERT_HANDLED = (
            "safeguarding_handled",
            _("Safeguarding alert acknowledged, escalated or closed"),
        )
        SAFEGUARDING_SETTINGS_CHANGED = (
            "safeguarding_settings",
            _("Safeguarding settings changed"),
        )
        RETENTION_APPLIED = "retention_applied", _("Retention applied")
        RETENTION_CHANGED = "retention_changed", _("Retention periods changed")

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
    actor_name = models.CharField(max_length=254, blank=True, help_text=_("Kept if the user goes"))
    action = models.CharField(max_length=32, choices=Action.choices)
    target = models.CharField(max_length=200, blank=True, help_text=_("e.g. license:3, user:7"))
    detail = models.JSONField(default=dict, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True, verbose_name=_("from"))
    user_agent = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["institution", "created_at"], name="audit_institution_time"),
            models.Index(fields=["created_at"], name="audit_time"),
        ]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action}"
