"""Who may see and change what: superusers everything; a staff user with an `AdminProfile`
only the rows of its institution, by role. The admin and the management API both ask here.

Roles:
- `admin` (institution admin): manages its licenses, license types, API keys, end users and
  JWT issuers; reads its wallets, transactions and budget alerts, its audit log, and the
  catalog; manages its colleagues (licensing.access.colleagues).
- `reviewer`: reads its licenses, wallets and transactions.
- `teacher`: runs the courses they teach (and nothing else of the institution): settings,
  windows, members; in the admin and through the management API. Reads and handles the
  safeguarding alerts of those courses.
- `safeguarding` (safeguarding contact): reads and handles the institution's safeguarding
  alerts, and nothing else. Institution admins manage the safeguarding settings but read no
  alert (docs/safeguarding.md).
Anyone else (not staff, inactive, or staff without a profile) sees no licensing row at all.
Shared license types (no institution) are visible to institution admins, read-only.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Model, Q, QuerySet

from ..models import (
    AdminProfile,
    ApiKey,
    AuditEvent,
    BudgetAlert,
    Course,
    CourseMember,
    CourseTeacher,
    CourseWindow,
    EndUser,
    Institution,
    JwtIssuer,
    License,
    LicenseType,
    LtiIdentity,
    LtiLaunchState,
    LtiPlatform,
    SafeguardingAlert,
    SafeguardingSettings,
    ScimGroup,
    ScimToken,
    ScimUser,
    Transaction,
    Wallet,
)

ADMIN = AdminProfile.Role.ADMIN.value
REVIEWER = AdminProfile.Role.REVIEWER.value
TEACHER = AdminProfile.Role.TEACHER.value
SAFEGUARDING = AdminProfile.Role.SAFEGUARDING.value
ALL = frozenset({"view", "add", "change", "delete"})
VIEW = frozenset({"view"})

# The lookup from each licensing model to its institution's id.
INSTITUTION_PATHS: dict[type[Model], str] = {
    Institution: "pk",
    LicenseType: "institution",
    License: "institution",
    ApiKey: "license__institution",
    JwtIssuer: "institution",
    EndUser: "license__institution",
    Wallet: "license__institution",
    Transaction: "license__institution",
    BudgetAlert: "license__institution",
    AuditEvent: "institution",
    Course: "institution",
    CourseWindow: "course__institution",
    CourseMember: "course__institution",
    CourseTeacher: "course__institution",
    LtiPlatform: "institution",
    LtiIdentity: "platform__institution",
    LtiLaunchState: "platform__institution",
    ScimToken: "institution",
    ScimUser: "institution",
    ScimGroup: "institution",
    SafeguardingSettings: "institution",
    SafeguardingAlert: "institution",
}

# What each role may do, per model; anything not listed is refused.
ROLE_PERMISSIONS: dict[str, dict[type[Model], frozenset[str]]] = {
    ADMIN: {
        # Their own institution's time zone, language, terms and key limit (its name and money
        # rate are the operator's: licensing.console.admin.licenses.InstitutionAdmin).
        Institution: frozenset({"view", "change"}),
        LicenseType: ALL,
        License: ALL,
        ApiKey: ALL,
        JwtIssuer: ALL,
        EndUser: frozenset({"view", "delete"}),
        Wallet: VIEW,
        Transaction: VIEW,
        BudgetAlert: VIEW,
        AuditEvent: VIEW,
        Course: ALL,
        CourseWindow: ALL,
        CourseMember: ALL,
        CourseTeacher: ALL,
        LtiPlatform: ALL,
        LtiIdentity: VIEW,
        LtiLaunchState: VIEW,
        # SCIM: a token made and revoked here (never edited or deleted), the pushed rows read.
        ScimToken: frozenset({"view", "add", "change"}),
        ScimUser: VIEW,
        ScimGroup: VIEW,
        SafeguardingSettings: frozenset({"view", "add", "change"}),
    },
    REVIEWER: {License: VIEW, Wallet: VIEW, Transaction: VIEW},
    # Their own courses only (TEACHER_PATHS below narrows the rows): settings, windows, members
    # (pauses, top-ups, and the roster: an LMS's sync through the management API with the
    # teacher's token). Teachers are added by launches, the admins and the operator commands.
    TEACHER: {
        Course: frozenset({"view", "change"}),
        CourseWindow: ALL,
        CourseMember: ALL,
        CourseTeacher: VIEW,
        # Read and handled (acknowledge, escalate, close): never added or deleted by hand.
        SafeguardingAlert: frozenset({"view", "change"}),
    },
    SAFEGUARDING: {SafeguardingAlert: frozenset({"view", "change"})},
}

# A teacher's rows: those of the courses they teach (besides their institution's).
TEACHER_PATHS: dict[type[Model], str] = {
    Course: "teachers__user",
    CourseWindow: "course__teachers__user",
    CourseMember: "course__teachers__user",
    CourseTeacher: "course__teachers__user",
    SafeguardingAlert: "course__teachers__user",
}


@dataclass(frozen=True)
class Scope:
    superuser: bool
    institution_id: int | None = None
    role: str | None = None
    user_id: int | None = None  # whose courses a teacher's scope holds
    timezone: str = "UTC"  # the institution's (its staff read its pages in it)

    def allows(self, model: type[Model], action: str) -> bool:
        if self.superuser:
            return True
        return action in ROLE_PERMISSIONS.get(self.role or "", {}).get(model, frozenset())

    @property
    def is_institution_admin(self) -> bool:
        return self.superuser or self.role == ADMIN


NOBODY = Scope(superuser=False)


def scope_of(user) -> Scope:
    """The user's scope, remembered on the user object for the rest of the request."""
    cached = getattr(user, "_gateway_scope", None)
    if cached is not None:
        return cached
    if not getattr(user, "is_authenticated", False) or not user.is_active or not user.is_staff:
        scope = NOBODY
    elif user.is_superuser:
        scope = Scope(superuser=True)
    else:
        # The person's language and their institution's in the same query as the time zone,
        # for the pages' language (licensing.access.languages): one query a page for all.
        profile = AdminProfile.objects.filter(user_id=user.pk).values_list(
            "institution_id", "role", "institution__timezone", "language", "institution__language"
        )
        row = profile.first()
        scope = (
            Scope(
                superuser=False,
                institution_id=row[0],
                role=row[1],
                user_id=user.pk,
                timezone=row[2] or "UTC",
            )
            if row
            else NOBODY
        )
        user._gateway_languages = (row[3], row[4]) if row else ("", "")
    user._gateway_scope = scope
    return scope


def scope_filter(model: type[Model], scope: Scope) -> Q | None:
    """The filter that keeps `model`'s rows of the scope; None: no row at all."""
    if scope.superuser:
        return Q()
    if scope.institution_id is None or model not in INSTITUTION_PATHS:
        return None
    q = Q(**{INSTITUTION_PATHS[model]: scope.institution_id})
    if scope.role == TEACHER:
        if model not in TEACHER_PATHS:
            return None
        return q & Q(**{TEACHER_PATHS[model]: scope.user_id})
    if model is LicenseType:
        q |= Q(institution__isnull=True)
    return q


def scoped(queryset: QuerySet, scope: Scope) -> QuerySet:
    condition = scope_filter(queryset.model, scope)
    return queryset.none() if condition is None else queryset.filter(condition)


def institution_id_of(obj: Model) -> int | None:
    """The institution an object belongs to (None: shared, or not a licensing row)."""
    path = INSTITUTION_PATHS.get(type(obj))
    if path is None:
        return None
    if path == "pk":
        return obj.pk
    *hops, last = path.split("__")
    target = obj
    for hop in hops:
        target = getattr(target, hop)
    return getattr(target, f"{last}_id")


def owns(scope: Scope, obj: Model) -> bool:
    """Whether the scope may change or delete `obj` (shared rows belong to superusers; a
    teacher owns the rows of the courses they teach)."""
    if scope.superuser:
        return True
    if scope.institution_id is None or institution_id_of(obj) != scope.institution_id:
        return False
    if scope.role == TEACHER:
        return scoped(type(obj)._default_manager.filter(pk=obj.pk), scope).exists()
    return True
