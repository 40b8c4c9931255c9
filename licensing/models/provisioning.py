"""SCIM 2.0 provisioning (licensing.provisioning, docs/scim.md): an institution's bearer token,
the users and groups its identity provider pushes, and who is in which group."""

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .institutions import Institution


class ScimToken(models.Model):
    """An institution's SCIM bearer token, stored as its SHA-256 digest (as API keys are);
    rotated or revoked by `manage.py scim_token`. One active token per institution."""

    institution = models.ForeignKey(
        Institution, on_delete=models.CASCADE, related_name="scim_tokens"
    )
    prefix = models.CharField(max_length=32, editable=False)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Written at most once a minute (licensing.provisioning.services.do_note_scim_token_use).
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("SCIM token")
        constraints = [
            models.UniqueConstraint(
                fields=["institution"],
                condition=models.Q(active=True),
                name="uniq_active_scim_token",
            )
        ]

    def __str__(self):
        return f"{self.prefix}… ({self.institution})"


class ScimUser(models.Model):
    """A person the institution's identity provider provisioned: the Django user, the SCIM id
    the IdP addresses them by, and the resource as last written (returned as it was sent)."""

    institution = models.ForeignKey(
        Institution, on_delete=models.CASCADE, related_name="scim_users"
    )
    scim_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="scim_user"
    )
    user_name = models.CharField(max_length=255)
    external_id = models.CharField(max_length=255, blank=True)
    active = models.BooleanField(default=True)
    resource = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name = _("SCIM user")
        constraints = [
            models.UniqueConstraint(
                fields=["institution", "user_name"], name="uniq_scim_user_name"
            ),
        ]
        indexes = [models.Index(fields=["institution", "external_id"], name="scim_user_ext")]

    def __str__(self):
        return f"{self.user_name} ({self.institution})"


class ScimGroup(models.Model):
    """A group the identity provider pushed: its display name is what the sign-in mapping
    (admin/reviewer/teacher/student groups) matches."""

    institution = models.ForeignKey(
        Institution, on_delete=models.CASCADE, related_name="scim_groups"
    )
    scim_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    display_name = models.CharField(max_length=255)
    external_id = models.CharField(max_length=255, blank=True)
    members = models.ManyToManyField(ScimUser, related_name="groups", blank=True)
    # A member's `display` as the identity system sent it ({SCIM id: text}), where it differs
    # from the person's own name (docs/decisions/scim.md): answered back as it was sent.
    member_displays = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name = _("SCIM group")
        constraints = [
            models.UniqueConstraint(
                fields=["institution", "display_name"], name="uniq_scim_group_name"
            ),
        ]

    def __str__(self):
        return f"{self.display_name} ({self.institution})"
