"""The course page's form: the course's settings, its overlay edited through the policy form
under the license type's policy (the ceiling), and exam mode with what it allows (every service
off, or an exam policy edited through the same form under the course's own policy).

Both policy forms write onto the JSON views (`policy`, `exam_policy`), as on the license type's
page, so rules the forms do not cover are kept. Whatever the forms write is checked again by
`Course.clean` (licensing.courses.rules.overlay_problems) when the form validates and by
licensing.courses.services when the admin saves: a widening is refused with its reasons
whichever way it arrives (a forged post, the JSON view, a script).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from catalog.forms import AdminModelFormMixin
from catalog.selectors import connected_catalog, policy_choices, service_providers
from core.text import is_storable_json

from ..console.money import (
    MoneyFormMixin,
    Rate,
    currencies_of,
    institution_rate,
    single_rate,
)
from ..console.policy_form import PolicyForm
from ..models import Course
from ..rules.policy import PolicyDocumentError
from .rules import course_document

EXAM_OFF, EXAM_ONLY = "off", "only"


def _services(document: Any) -> dict:
    services = document.get("services") if isinstance(document, dict) else None
    return services if isinstance(services, dict) else {}


def overlay_as_document(base: Any, overlay: Any) -> dict:
    """The overlay as the policy form shows it. An empty overlay keeps every service of the
    license type as it is, so the form shows those services on (with no narrowing of their
    own); a stored overlay without `version` is version 1 (an overlay names only what it
    narrows)."""
    if not overlay or not isinstance(overlay, dict):
        return {"version": 1, "services": {name: {} for name in _services(base)}}
    return overlay if "version" in overlay else {"version": 1, **overlay}


def exam_as_document(exam: Any) -> dict:
    """The exam policy as its form shows it: empty is every service off."""
    if not exam or not isinstance(exam, dict):
        return {"version": 1, "services": {}}
    return exam if "version" in exam else {"version": 1, **exam}


class CourseForm(MoneyFormMixin, AdminModelFormMixin, forms.ModelForm):
    """`overlay_form` and `exam_form` (PolicyForm) exist on a saved course's page, whose
    license type is known; a new course is created with the JSON views only. The allowance and
    the pool are entered and shown in the institution's currency (MoneyFormMixin)."""

    money_fields = ("allowance", "pool_limit")

    exam_does = forms.ChoiceField(
        label=_("In exam mode"),
        required=False,
        choices=[
            (
                EXAM_OFF,
                _("All services off (every request is refused: “course … is in exam mode”)"),
            ),
            (EXAM_ONLY, _("Allow only what the exam form below allows")),
        ],
        widget=forms.RadioSelect,
    )

    class Meta:
        model = Course
        fields = (
            "license",
            "name",
            "code",
            "allowance",
            "allowance_period",
            "pool_limit",
            "active",
            "ends_at",
            "instructions",
            "policy",
            "exam_mode",
            "exam_policy",
        )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        course = self.instance
        self.overlay_form: PolicyForm | None = None
        self.exam_form: PolicyForm | None = None
        data = self.data if self.is_bound else None
        if course.pk is not None:
            base = course.license.license_type.policy
            models, providers = policy_choices(), service_providers()
            connected = connected_catalog()
            self.overlay_form = PolicyForm(
                data,
                document=overlay_as_document(base, course.policy),
                models=models,
                providers=providers,
                connected=connected,
                ceiling=base,
                disabled="policy" not in self.fields,
                prefix="overlayform",
            )
            try:
                course_doc = course_document(base, course.policy)
            except PolicyDocumentError:
                course_doc = base  # the stored overlay is broken: the JSON view shows why
            self.exam_form = PolicyForm(
                data,
                document=exam_as_document(course.exam_policy),
                models=models,
                providers=providers,
                connected=connected,
                ceiling=course_doc,
                ceiling_name="the course",
                disabled="exam_policy" not in self.fields,
                prefix="examform",
            )
            self.fields["exam_does"].initial = EXAM_ONLY if course.exam_policy else EXAM_OFF
            if "exam_policy" not in self.fields:
                self.fields["exam_does"].disabled = True
        else:
            self.fields["exam_does"].initial = EXAM_OFF
        self._money_help(course)

    def _money_help(self, course: Course) -> None:
        """The allowance and the pool as money, at the institution's rate: the course's, or
        for a new course the one institution its licenses belong to (an institution admin's
        own), else the chosen license's."""
        if course.institution_id:
            shown: Rate | None = institution_rate(course.institution)
            choices = None
        else:
            choices = getattr(self.fields.get("license"), "queryset", None)
            shown = single_rate(choices, "institution_id")
        if shown is None:
            self.setup_money(
                None,
                _("In the currency of the chosen license's institution (shown once chosen)."),
                ("id_license", currencies_of(choices, "institution_id")),
            )
        else:
            self.setup_money(shown)

    def money_rate(self) -> Rate | None:
        license = self.cleaned_data.get("license") or (
            self.instance.license if self.instance.license_id else None
        )
        return institution_rate(license.institution) if license is not None else None

    def _refuse_unstorable(self, name: str):
        value = self.cleaned_data.get(name)
        # PostgreSQL's jsonb refuses NUL (\u0000) and lone surrogates (\ud800): form errors.
        if not is_storable_json(value):
            raise forms.ValidationError(
                _(
                    "The document may not contain NUL characters (\\u0000) or lone surrogates "
                    "(\\ud800-\\udfff)."
                )
            )
        return value

    def clean_policy(self):
        return self._refuse_unstorable("policy")

    def clean_exam_policy(self):
        return self._refuse_unstorable("exam_policy")

    def clean(self):
        cleaned = super().clean()
        self.clean_money()
        course = self.instance
        license = cleaned.get("license")
        if course.pk is None and license is not None:
            course.institution_id = license.institution_id  # as course_create will set it
        institution_id = license.institution_id if license is not None else course.institution_id
        self._check_code(cleaned.get("code"), institution_id)
        overlay_form, exam_form = self.overlay_form, self.exam_form
        if overlay_form is not None and "policy" in self.fields and overlay_form.submitted:
            self._clean_overlay(cleaned, overlay_form)
        if exam_form is not None and "exam_policy" in self.fields and exam_form.submitted:
            self._clean_exam(cleaned, exam_form)
        return cleaned

    def _check_code(self, code: str | None, institution_id: int | None) -> None:
        # The code is unique in the institution, which the form does not edit (so Django leaves
        # the constraint out): asked here rather than refused later by the course services.
        if code and institution_id is not None:
            taken = Course.objects.filter(institution_id=institution_id, code=code)
            if taken.exclude(pk=self.instance.pk).exists():
                self.add_error("code", _("The institution has a course with this code already."))

    def _clean_overlay(self, cleaned: dict[str, Any], overlay_form: PolicyForm) -> None:
        """The overlay form's changes written onto the JSON view's overlay."""
        if not overlay_form.is_valid():
            self.add_error(None, _("The overlay form has errors: see the marked fields below."))
        elif "policy" in cleaned and overlay_form.changed_data:
            base = self.instance.license.license_type.policy
            start = overlay_as_document(base, cleaned["policy"])
            try:
                cleaned["policy"] = overlay_form.document_for(start)
            except forms.ValidationError as exc:
                self.add_error("policy", exc)

    def _clean_exam(self, cleaned: dict[str, Any], exam_form: PolicyForm) -> None:
        """Exam mode's switch, and the exam form's changes written onto the exam policy."""
        does = cleaned.get("exam_does") or EXAM_OFF
        if does == EXAM_OFF:
            # The switch decides; left untouched, an exam policy typed in the JSON view
            # is kept (the JSON view is for rules the form does not cover).
            if "exam_does" in self.changed_data or not cleaned.get("exam_policy"):
                cleaned["exam_policy"] = None
        elif not exam_form.is_valid():
            self.add_error(None, _("The exam form has errors: see the marked fields below."))
        elif "exam_policy" in cleaned:
            start = exam_as_document(cleaned["exam_policy"])
            if exam_form.changed_data:
                try:
                    start = exam_form.document_for(start)
                except forms.ValidationError as exc:
                    self.add_error("exam_policy", exc)
            cleaned["exam_policy"] = start
