"""People as the staff pages name and find them: never by a database id or an identity
provider's subject alone.

An end user is named by the person behind it: the portal or LMS user linked to it (their full
name, their e-mail), else what their sign-in left (the SSO identity's e-mail, the LTI identity's
name and e-mail); the subject (`stu-1001`) only when nothing else is known (a JWT's end user).
Staff (teachers, colleagues) by their full name, e-mail and user name.

`people_json` answers the admin's autocompletes (select2's format) from a queryset the caller
has already scoped: this module narrows and names, it never widens. A search term is words, each
of which must match the name, the e-mail, the user name or the subject (case-insensitive, any
part); a NUL, a lone surrogate or a term longer than TERM_MAX_CHARS is a 400.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django import forms
from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.contrib.admin.widgets import AutocompleteSelect
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.http import JsonResponse
from django.utils.translation import gettext as _

from core.text import is_storable_text

from ..models import EndUser, LtiIdentity

PER_PAGE = 20
TERM_MAX_CHARS = 100
TERM_MAX_WORDS = 5
MAX_PAGE = 1000


@dataclass(frozen=True)
class Person:
    name: str  # "" when unknown
    email: str  # "" when unknown
    subject: str = ""  # the identity provider's or the LMS's id (end users only)

    def label(self) -> str:
        """`Ada Lovelace (ada@school.example)`, or whichever of the two is known, else the
        subject."""
        if self.name and self.email:
            return f"{self.name} ({self.email})"
        return self.name or self.email or self.subject or "-"


# --- end users ---------------------------------------------------------------------------------


def end_user_people(ids: Iterable[int]) -> dict[int, Person]:
    """The person behind each end user (by id), in one query whatever their number (the LTI
    identity's name and e-mail, of the latest launch, as subqueries)."""
    wanted = {int(pk) for pk in ids if pk is not None}
    if not wanted:
        return {}
    launches = LtiIdentity.objects.filter(user_id=OuterRef("user_id")).order_by("-last_launch")
    rows = (
        EndUser.objects.filter(pk__in=wanted)
        .annotate(
            lti_name=Subquery(launches.values("name")[:1]),
            lti_email=Subquery(launches.values("email")[:1]),
        )
        .values_list(
            "pk",
            "subject",
            "user__first_name",
            "user__last_name",
            "user__email",
            "user__sso_identity__email",
            "lti_name",
            "lti_email",
        )
    )
    people = {}
    for pk, subject, first, last, email, sso_email, lti_name, lti_email in rows:
        name = f"{first or ''} {last or ''}".strip() or lti_name or ""
        people[pk] = Person(name=name, email=email or sso_email or lti_email or "", subject=subject)
    return people


def end_user_person(end_user: EndUser) -> Person:
    return end_user_people([end_user.pk]).get(end_user.pk) or Person("", "", end_user.subject)


def _words(term: str) -> list[str]:
    return term.split()[:TERM_MAX_WORDS]


def end_user_search(queryset: QuerySet, term: str) -> QuerySet:
    """The end users of `queryset` every word of `term` finds in their name, e-mail, user name
    or subject (any part, any case)."""
    for word in _words(term):
        lti = LtiIdentity.objects.filter(user_id=OuterRef("user_id")).filter(
            Q(name__icontains=word) | Q(email__icontains=word)
        )
        queryset = queryset.filter(
            Q(subject__icontains=word)
            | Q(user__first_name__icontains=word)
            | Q(user__last_name__icontains=word)
            | Q(user__email__icontains=word)
            | Q(user__username__icontains=word)
            | Q(user__sso_identity__email__icontains=word)
            | Q(Exists(lti))
        )
    return queryset


# --- staff -------------------------------------------------------------------------------------


def staff_person(user) -> Person:
    return Person(name=user.get_full_name().strip() or user.get_username(), email=user.email)


def staff_search(queryset: QuerySet, term: str) -> QuerySet:
    """The users of `queryset` every word of `term` finds in their name, e-mail or user name."""
    for word in _words(term):
        queryset = queryset.filter(
            Q(first_name__icontains=word)
            | Q(last_name__icontains=word)
            | Q(email__icontains=word)
            | Q(username__icontains=word)
        )
    return queryset


# --- the autocompletes' answer ----------------------------------------------------------------


def term_problem(term: str, page_text: str) -> str | None:
    """Why a term or page cannot be searched (None: it can)."""
    if len(term) > TERM_MAX_CHARS:
        return _("The search is longer than %(max)s characters.") % {"max": TERM_MAX_CHARS}
    if not is_storable_text(term):
        return _("The search holds a NUL character or a lone surrogate.")
    if not (page_text.isascii() and page_text.isdigit() and 1 <= int(page_text) <= MAX_PAGE):
        return _("The page is a number from 1 to %(max)s.") % {"max": MAX_PAGE}
    return None


def people_json(
    request, queryset: QuerySet, kind: str, ordering: tuple[str, ...], with_license: bool = False
) -> JsonResponse:
    """select2's answer: the rows of `queryset` (already scoped by the caller) that the request's
    `term` finds, PER_PAGE at a time, each `{"id", "text"}` with the person's name and e-mail
    (and, `with_license`, the end user's license). `kind` is "end_user" or "staff"."""
    term = request.GET.get("term", "")
    page_text = request.GET.get("page") or "1"
    problem = term_problem(term, page_text)
    if problem:
        return JsonResponse({"error": problem}, status=400)
    search = end_user_search if kind == "end_user" else staff_search
    rows = search(queryset, term) if term.strip() else queryset
    start = (int(page_text) - 1) * PER_PAGE
    found = list(rows.order_by(*ordering, "pk")[start : start + PER_PAGE + 1])
    if kind == "end_user":
        people = end_user_people(obj.pk for obj in found)
        texts = [people[obj.pk].label() for obj in found]
        if with_license:
            texts = [f"{text} ({obj.license.name})" for obj, text in zip(found, texts, strict=True)]
    else:
        texts = [staff_person(obj).label() for obj in found]
    results = [{"id": str(obj.pk), "text": text} for obj, text in zip(found, texts, strict=True)]
    return JsonResponse(
        {"results": results[:PER_PAGE], "pagination": {"more": len(found) > PER_PAGE}}
    )


# --- the admin's widgets ----------------------------------------------------------------------


class PeopleAutocomplete(AutocompleteSelect):
    """The admin's select2 widget asking a people endpoint of our own (`people_json`, at `url`):
    Django's own autocomplete would name end users by their subject and would ask the related
    model's admin, which teachers' and colleagues' users do not have for institution admins."""

    def __init__(self, model_field, url: str, attrs=None):
        super().__init__(model_field, admin.site, attrs)
        self.url = url

    def get_url(self):
        return self.url

    def optgroups(self, name, value, attr=None):
        # The chosen row is looked up by id to show its name: only what can be an id.
        ids = [v for v in value if str(v).isascii() and str(v).isdigit() and len(str(v)) < 19]
        return super().optgroups(name, ids, attr)


class PersonChoiceField(forms.ModelChoiceField):
    """A choice of an end user or a staff user, shown by name and e-mail."""

    def label_from_instance(self, obj):
        if isinstance(obj, EndUser):
            return end_user_person(obj).label()
        return staff_person(obj).label()


def people_field(field: forms.Field, model_field, url: str, queryset: QuerySet) -> forms.Field:
    """`field` (a form's model choice) made a PersonChoiceField over `queryset` with the people
    autocomplete at `url`; its label, help and requiredness are kept."""
    chosen = PersonChoiceField(
        queryset=queryset,
        required=field.required,
        label=field.label,
        help_text=field.help_text or _("Type part of a name or an e-mail address."),
        widget=PeopleAutocomplete(
            model_field, url, attrs={"data-placeholder": _("name or e-mail")}
        ),
    )
    chosen.widget.choices = chosen.choices
    return chosen


class PeopleChangeList(ChangeList):
    """A change list naming the end users of its page in one query: each row gets `_person`
    (a Person, or None) for the end user at `person_id` (an attribute of the row)."""

    person_id = "end_user_id"

    def get_results(self, request):
        super().get_results(request)
        people = end_user_people(getattr(obj, self.person_id) for obj in self.result_list)
        for obj in self.result_list:
            obj._person = people.get(getattr(obj, self.person_id))


def row_person(obj, end_user: EndUser | None) -> Person | None:
    """The person a change list row was named with (PeopleChangeList), else looked up."""
    person = getattr(obj, "_person", None)
    if person is None and end_user is not None:
        person = end_user_person(end_user)
    return person
