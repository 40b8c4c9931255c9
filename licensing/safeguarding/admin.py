"""Safeguarding in the admin (docs/safeguarding.md): the institution's settings (its admins) and
the alerts' review page (the course's teachers, the institution's safeguarding contacts). The
list shows no content; the change page shows the flagged text(s) and writes an audit row each
time it does, and its form acknowledges, escalates or closes the alert with a note."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from ..console.admin.base import RefuseNulParamsMixin, ScopedAdminMixin
from ..models import SafeguardingAlert, SafeguardingSettings
from ..models.safeguarding import CATEGORIES, NOTE_MAX_LENGTH
from . import services

Status = SafeguardingAlert.Status

DECISIONS = (
    ("acknowledge", _("Acknowledge")),
    ("escalate", _("Escalate to the safeguarding contacts")),
    ("close", _("Close with a note")),
)


def _threshold_name(index: int) -> str:
    return f"threshold_{index}"


class SettingsForm(forms.ModelForm):
    """The switch, the categories (checkboxes), a threshold per category and the retention."""

    categories = forms.MultipleChoiceField(
        choices=[(c, c) for c in CATEGORIES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label=_("Categories that raise an alert"),
    )

    class Meta:
        model = SafeguardingSettings
        fields = ("institution", "enabled", "categories", "retention_days")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        thresholds = self.instance.thresholds or {}
        for index, category in enumerate(CATEGORIES):
            self.fields[_threshold_name(index)] = forms.FloatField(
                required=False,
                min_value=0.0,
                max_value=1.0,
                label=_("Threshold: %(category)s") % {"category": category},
                help_text=_("Empty: only when the provider flags it"),
                initial=thresholds.get(category),
            )

    def clean(self):
        cleaned = super().clean() or {}
        cleaned["thresholds"] = {
            category: cleaned[_threshold_name(index)]
            for index, category in enumerate(CATEGORIES)
            if cleaned.get(_threshold_name(index)) is not None
        }
        return cleaned

    def save(self, commit=True):
        self.instance.thresholds = self.cleaned_data["thresholds"]
        return super().save(commit=commit)


@admin.register(SafeguardingSettings)
class SafeguardingSettingsAdmin(ScopedAdminMixin, admin.ModelAdmin):
    form = SettingsForm
    list_display = ("institution", "enabled", "retention_days")

    def save_model(self, request, obj, form, change):
        services.do_save_settings(row=obj, request=request, changed=list(form.changed_data))


class AlertForm(forms.ModelForm):
    """What a reviewer decides: no field of the alert itself is edited here."""

    decision = forms.ChoiceField(choices=DECISIONS, widget=forms.RadioSelect, label=_("Decision"))
    new_note = forms.CharField(
        required=False,
        max_length=NOTE_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 4}),
        label=_("Note"),
        help_text=_("Required to close; kept with the alert, never e-mailed"),
    )

    class Meta:
        model = SafeguardingAlert
        fields: tuple[str, ...] = ()

    def clean(self):
        cleaned = super().clean() or {}
        if "decision" in cleaned and "new_note" in cleaned:
            try:
                services.check_decision(decision=cleaned["decision"], note=cleaned["new_note"])
            except ValidationError as error:
                self.add_error("new_note", error.messages)
        return cleaned


@admin.register(SafeguardingAlert)
class SafeguardingAlertAdmin(RefuseNulParamsMixin, ScopedAdminMixin, admin.ModelAdmin):
    form = AlertForm
    list_display = ("id", "created_at", "course_shown", "student", "categories_shown", "status")
    list_display_links = ("id", "created_at")
    list_filter = ("status",)
    readonly_fields = (
        "created_at",
        "student",
        "course_shown",
        "direction",
        "categories_shown",
        "scores_shown",
        "flagged_content",
        "status",
        "note",
        "handled_by_shown",
        "handled_at",
    )

    def get_fieldsets(self, request, obj=None):
        head = (None, {"fields": self.readonly_fields[:6]})
        content = (_("The flagged message"), {"fields": ("flagged_content",)})
        handling = (_("Handling"), {"fields": ("status", "note", "handled_by_shown", "handled_at")})
        if obj is None or not self.has_change_permission(request, obj):
            return (head, content, handling)
        return (head, content, handling, (_("Your decision"), {"fields": ("decision", "new_note")}))

    def has_change_permission(self, request, obj=None):
        if obj is not None and obj.status == Status.CLOSED:
            return False  # closed: read only
        return super().has_change_permission(request, obj)

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("course", "end_user__user")

    def get_object(self, request, object_id, from_field=None):
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            obj._reader = request  # the change page's content is read for this request
        return obj

    def has_add_permission(self, request, *args):
        return False  # raised by the gateway only

    def has_delete_permission(self, request, obj=None):
        return False  # deleted by the retention only

    @admin.display(description=_("student"))
    def student(self, obj):
        user = obj.end_user.user
        if user is not None:
            return user.get_full_name() or user.get_username()
        return obj.end_user.subject

    @admin.display(description=_("course"))
    def course_shown(self, obj):
        return str(obj.course) if obj.course is not None else "-"  # no link: not their page

    @admin.display(description=_("handled by"))
    def handled_by_shown(self, obj):
        person = obj.handled_by
        return (person.get_full_name() or person.get_username()) if person is not None else "-"

    @admin.display(description=_("categories"))
    def categories_shown(self, obj):
        return ", ".join(obj.categories or [])

    @admin.display(description=_("scores"))
    def scores_shown(self, obj):
        chosen = obj.categories or []
        scores = obj.scores or {}
        return format_html_join(", ", "{}: {}", ((c, f"{scores.get(c, 0.0):.2f}") for c in chosen))

    @admin.display(description=_("flagged message"))
    def flagged_content(self, obj):
        request = getattr(obj, "_reader", None)
        if request is None:
            return "-"
        texts = services.do_read_alert_content(alert=obj, request=request)
        return format_html_join(
            "",
            '<p class="safeguarding-content" style="white-space: pre-wrap">{}</p>',
            ((text,) for text in texts),
        ) or format_html("{}", "-")

    def save_model(self, request, obj, form, change):
        decision, note = form.cleaned_data["decision"], form.cleaned_data["new_note"]
        try:
            services.do_decide(alert=obj, decision=decision, note=note, request=request)
        except ValidationError as error:  # closed by someone else meanwhile
            messages.error(request, "; ".join(error.messages))

    def log_change(self, request, obj, message):
        return None  # the audit log has it (services), with the decision
