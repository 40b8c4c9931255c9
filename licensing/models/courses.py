"""Courses (licensing.courses): a class under a license, its windows, members and teachers."""

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.text import is_storable_text

from .institutions import Institution, License
from .keys import EndUser

# A course's instructions (licensing.courses.instructions): about 1,000 tokens at most, paid by
# every request of its members.
INSTRUCTIONS_MAX_LENGTH = 4000


def validate_storable(value: str) -> None:
    if not is_storable_text(value):
        raise ValidationError(_("The text may not contain NUL characters or lone surrogates."))


# Course.clean asks licensing.courses.rules.overlay_problems why an overlay or an exam policy
# cannot be saved (by field; empty: both only narrow). That pure rule lives in the courses wing,
# above the models: licensing.apps registers it at start-up, so the models import nothing above
# them (as inference registers its request models into licensing.rules.policy_schema).
OverlayCheck = Callable[[Any, Any, Any], dict[str, str]]
_overlay_check: OverlayCheck | None = None


def register_overlay_check(check: OverlayCheck) -> None:
    global _overlay_check
    _overlay_check = check


def _overlay_problems(base: Any, overlay: Any, exam: Any) -> dict[str, str]:
    if _overlay_check is None:
        raise ImproperlyConfigured("No course overlay check: licensing.apps registers it")
    return _overlay_check(base, overlay, exam)


class Course(models.Model):
    """A class under a license (same institution): each member student has an allowance per
    period, the course may have a pool per period, and its policy overlay may only narrow the
    license type's policy. Access windows and exam mode switch it off (or narrower) in time."""

    class Period(models.TextChoices):
        DAY = "day", _("Day")
        WEEK = "week", _("Week")
        MONTH = "month", _("Month")

    institution = models.ForeignKey(Institution, on_delete=models.CASCADE, related_name="courses")
    license = models.ForeignKey(License, on_delete=models.CASCADE, related_name="courses")
    name = models.CharField(max_length=200)
    code = models.CharField(max_length=64, help_text=_("Unique in the institution, e.g. CS101"))
    allowance = models.BigIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_("Micro-credits per student and period; empty = no per-student limit"),
    )
    allowance_period = models.CharField(max_length=8, choices=Period.choices, default=Period.DAY)
    pool_limit = models.BigIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_("Micro-credits for the whole course per period; empty = no course pool"),
    )
    policy = models.JSONField(
        default=dict,
        blank=True,
        help_text=_(
            "Overlay: may only narrow the license type's policy ({} = as the license type)"
        ),
    )
    instructions = models.TextField(
        _("instructions"),
        blank=True,
        default="",
        max_length=INSTRUCTIONS_MAX_LENGTH,
        validators=[validate_storable],
        help_text=_(
            "How the assistant behaves in this course, e.g. as a tutor who asks rather than "
            "answers: put before every chat and responses request of its members, on every "
            "provider, and shown to them on the course page (at most 4,000 characters)"
        ),
    )
    exam_mode = models.BooleanField(default=False)
    exam_policy = models.JSONField(
        null=True,
        blank=True,
        help_text=_("What exam mode allows: empty = every service off; else a narrower overlay"),
    )
    lti_context_id = models.CharField(max_length=255, blank=True, default="")
    active = models.BooleanField(default=True)
    ends_at = models.DateTimeField(
        _("ends at"),
        null=True,
        blank=True,
        help_text=_(
            "From this moment the course's keys stop working (every request of its members is "
            "refused) and its retention period starts; empty = the course does not end"
        ),
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["code"]
        constraints = [
            models.UniqueConstraint(fields=["institution", "code"], name="uniq_course_code"),
            # One course per LMS context (licensing.signin.lti): two first launches at once
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
        errors: dict[str, str] = {}
        if self.license_id is not None and self.institution_id is not None:
            if self.license.institution_id != self.institution_id:
                errors["license"] = gettext("The license belongs to another institution.")
            else:
                errors.update(
                    _overlay_problems(
                        self.license.license_type.policy, self.policy, self.exam_policy
                    )
                )
        if errors:
            raise ValidationError(errors)


class CourseWindow(models.Model):
    """A date-time range of a course: when it is open (`access`; none = always open) or in
    exam mode (`exam`, beside the switch)."""

    class Kind(models.TextChoices):
        ACCESS = "access", _("Open")
        EXAM = "exam", _("Exam")

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
            raise ValidationError({"ends_at": _("The window must end after it starts.")})


class CourseMember(models.Model):
    """A student in a course (an end user of the course's license): paused members are
    refused; a top-up adds to their allowance in one period."""

    course = models.ForeignKey(Course, on_delete=models.CASCADE, related_name="members")
    end_user = models.ForeignKey(EndUser, on_delete=models.CASCADE, related_name="memberships")
    paused = models.BooleanField(default=False)
    top_up = models.BigIntegerField(
        default=0, validators=[MinValueValidator(0)], help_text=_("Extra micro-credits")
    )
    top_up_window_start = models.DateTimeField(
        null=True, blank=True, help_text=_("The period the top-up is for")
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
