"""Safeguarding alerts (licensing.safeguarding, docs/safeguarding.md): an institution's switch,
categories, thresholds and retention, and the alerts raised when the moderation guardrail flags
a student's message."""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from core.fields import EncryptedTextField

from .courses import Course
from .institutions import Institution
from .keys import EndUser

# OpenAI's moderation categories (omni-moderation): what an institution may choose.
CATEGORIES = (
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/instructions",
    "self-harm/intent",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
)
DEFAULT_RETENTION_DAYS = 30
# What one alert keeps of the flagged texts (sealed): a message beyond this is cut.
CONTENT_MAX_CHARACTERS = 100_000
NOTE_MAX_LENGTH = 2000


def default_categories() -> list[str]:
    return list(CATEGORIES)


class SafeguardingSettings(models.Model):
    """One institution's safeguarding alerts: off until its admin switches them on."""

    institution = models.OneToOneField(
        Institution, on_delete=models.CASCADE, related_name="safeguarding"
    )
    enabled = models.BooleanField(
        _("alerts on"),
        default=False,
        help_text=_("Raise an alert when the moderation guardrail flags a student's message"),
    )
    categories = models.JSONField(
        default=default_categories,
        blank=True,
        help_text=_("The moderation categories that raise an alert"),
    )
    # category -> score in [0, 1]: the category raises an alert at this score or above, even
    # when the provider did not flag it; absent: only when the provider flags it.
    thresholds = models.JSONField(default=dict, blank=True)
    retention_days = models.PositiveSmallIntegerField(
        _("retention (days)"),
        default=DEFAULT_RETENTION_DAYS,
        validators=[MinValueValidator(1), MaxValueValidator(365)],
        help_text=_("Alerts and the flagged messages are deleted after this many days"),
    )

    class Meta:
        verbose_name = _("safeguarding settings")
        verbose_name_plural = _("safeguarding settings")

    def __str__(self):
        return str(self.institution)


class SafeguardingAlert(models.Model):
    """A student's message flagged by the moderation guardrail: who, which course, when, the
    categories and scores, and only the flagged text(s), sealed at rest (core.crypto)."""

    class Status(models.TextChoices):
        OPEN = "open", _("Open")
        ACKNOWLEDGED = "acknowledged", _("Acknowledged")
        ESCALATED = "escalated", _("Escalated to the safeguarding contacts")
        CLOSED = "closed", _("Closed")

    class Direction(models.TextChoices):
        INPUT = "input", _("The student's message")
        OUTPUT = "output", _("The answer to the student")

    institution = models.ForeignKey(
        Institution, on_delete=models.CASCADE, related_name="safeguarding_alerts"
    )
    course = models.ForeignKey(
        Course,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="safeguarding_alerts",
    )
    end_user = models.ForeignKey(
        EndUser,
        on_delete=models.CASCADE,
        related_name="safeguarding_alerts",
        verbose_name=_("student"),
    )
    created_at = models.DateTimeField(_("raised"), default=timezone.now, db_index=True)
    request_id = models.CharField(max_length=64, blank=True)
    direction = models.CharField(max_length=8, choices=Direction.choices)
    categories = models.JSONField(default=list)  # the categories that raised it
    scores = models.JSONField(default=dict)  # category -> the highest score of the flagged texts
    # A JSON list of the flagged texts, sealed: read only through the audited change page.
    content = EncryptedTextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    # Each decision's note (at most NOTE_MAX_LENGTH, the form's bound), signed, after the earlier.
    note = models.TextField(blank=True)
    handled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    handled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("safeguarding alert")
        indexes = [
            models.Index(fields=["institution", "created_at"], name="safeguard_inst_time"),
        ]

    def __str__(self):
        return f"#{self.pk} {self.created_at:%Y-%m-%d %H:%M}"
