"""The steps of CourseForm.clean (licensing/courses/form.py) with stand-ins for the
form and its two policy forms: what the overlay form and exam mode's switch write into the
cleaned data, and which errors they raise. The page end to end is
tests/console/test_course_page.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django import forms

from licensing.courses.form import EXAM_OFF, EXAM_ONLY, CourseForm

BASE = {"version": 1, "services": {"chat": {}, "embeddings": {}}}


class PolicyFormStandIn:
    def __init__(self, *, valid=True, changed=True, document=None, error=None):
        self.valid, self.changed_data = valid, ["field"] if changed else []
        self.document, self.error = document, error
        self.started_from = None

    def is_valid(self):
        return self.valid

    def document_for(self, start):
        self.started_from = start
        if self.error:
            raise forms.ValidationError(self.error)
        return self.document


class FormSelf(SimpleNamespace):
    def add_error(self, field, error):
        # A message is a string, a lazy one (translated when shown) or a ValidationError.
        message = error.messages[0] if isinstance(error, forms.ValidationError) else str(error)
        self.errors.setdefault(field, []).append(message)


def form_self(changed_data=()):
    license = SimpleNamespace(license_type=SimpleNamespace(policy=BASE))
    return FormSelf(
        errors={}, changed_data=list(changed_data), instance=SimpleNamespace(license=license)
    )


def test_the_overlay_step_writes_the_forms_document():
    form, overlay = form_self(), PolicyFormStandIn(document={"version": 1, "services": {}})
    cleaned = {"policy": None}
    CourseForm._clean_overlay(form, cleaned, overlay)
    # An empty overlay starts as every service of the license type, unchanged.
    assert overlay.started_from == {"version": 1, "services": {"chat": {}, "embeddings": {}}}
    assert cleaned == {"policy": {"version": 1, "services": {}}} and form.errors == {}


def test_the_overlay_step_keeps_the_json_view_when_the_form_is_untouched():
    form, overlay = form_self(), PolicyFormStandIn(changed=False)
    cleaned = {"policy": {"services": {"chat": {}}}}
    CourseForm._clean_overlay(form, cleaned, overlay)
    assert cleaned == {"policy": {"services": {"chat": {}}}} and overlay.started_from is None


@pytest.mark.parametrize(
    ("overlay", "cleaned", "errors"),
    [
        (
            PolicyFormStandIn(valid=False),
            {"policy": {}},
            {None: ["The overlay form has errors: see the marked fields below."]},
        ),
        (PolicyFormStandIn(error="widens chat"), {"policy": {}}, {"policy": ["widens chat"]}),
        (PolicyFormStandIn(), {}, {}),  # the JSON view's own error took `policy` out
    ],
)
def test_the_overlay_step_errors(overlay, cleaned, errors):
    form = form_self()
    CourseForm._clean_overlay(form, cleaned, overlay)
    assert form.errors == errors


@pytest.mark.parametrize(
    ("changed", "stored", "kept"),
    [
        (["exam_does"], {"services": {}}, None),  # switched off: the exam policy goes
        ([], None, None),
        ([], {"services": {"chat": {}}}, {"services": {"chat": {}}}),  # typed in the JSON view
    ],
)
def test_the_exam_switch_off(changed, stored, kept):
    form, exam = form_self(changed), PolicyFormStandIn(valid=False)
    cleaned = {"exam_does": EXAM_OFF, "exam_policy": stored}
    CourseForm._clean_exam(form, cleaned, exam)
    assert cleaned["exam_policy"] == kept and form.errors == {}
    assert exam.started_from is None  # the exam form is not asked when exam mode is off


def test_the_exam_switch_left_empty_is_off():
    form = form_self(["exam_does"])
    cleaned = {"exam_does": "", "exam_policy": {"services": {}}}
    CourseForm._clean_exam(form, cleaned, PolicyFormStandIn())
    assert cleaned["exam_policy"] is None


def test_exam_only_writes_the_exam_forms_document():
    document = {"version": 1, "services": {"chat": {"models": ["m"]}}}
    form, exam = form_self(), PolicyFormStandIn(document=document)
    cleaned = {"exam_does": EXAM_ONLY, "exam_policy": None}
    CourseForm._clean_exam(form, cleaned, exam)
    assert exam.started_from == {"version": 1, "services": {}}  # empty: every service off
    assert cleaned["exam_policy"] == document


def test_exam_only_with_the_form_untouched_keeps_the_stored_policy_as_a_document():
    form, exam = form_self(), PolicyFormStandIn(changed=False)
    cleaned = {"exam_does": EXAM_ONLY, "exam_policy": {"services": {"chat": {}}}}
    CourseForm._clean_exam(form, cleaned, exam)
    assert cleaned["exam_policy"] == {"version": 1, "services": {"chat": {}}}


@pytest.mark.parametrize(
    ("exam", "errors"),
    [
        (
            PolicyFormStandIn(valid=False),
            {None: ["The exam form has errors: see the marked fields below."]},
        ),
        (PolicyFormStandIn(error="widens the course"), {"exam_policy": ["widens the course"]}),
    ],
)
def test_exam_only_errors(exam, errors):
    form = form_self()
    cleaned = {"exam_does": EXAM_ONLY, "exam_policy": None}
    CourseForm._clean_exam(form, cleaned, exam)
    assert form.errors == errors
