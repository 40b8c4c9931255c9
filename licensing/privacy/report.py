"""The privacy pack's facts (issue 39, docs/privacy.md): one institution's deployment as the
database and the catalog hold it, read once into plain dataclasses that licensing.privacy.document
words and the renderers (Markdown, HTML, PDF) draw. Reads only: no row is written, and nothing
here decides anything the gateway does; where a fact is the gateway's own behaviour (the routes,
the moderation call) it is asked of the code that behaves so (licensing.access.reach over
catalog.routing).

Every text read from the database is made printable here (`printable`): NUL and lone surrogates
become U+FFFD, so no renderer meets them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q

from catalog.registry import PROVIDER_KINDS
from catalog.routing import Catalog, ConnectionInfo, load_catalog_snapshot
from core import clock
from core.config import get_config
from core.text import UNSTORABLE

from ..access.reach import ModelAccess, models_reached, unknown_model_access
from ..ledger.record import LEDGER_COLUMNS
from ..models import (
    AdminProfile,
    ApiKey,
    AuditEvent,
    Course,
    EndUser,
    Institution,
    LicenseType,
    LtiIdentity,
    SafeguardingAlert,
    SafeguardingSettings,
    ScimUser,
    SsoIdentity,
    Transaction,
)
from ..models.safeguarding import CATEGORIES, DEFAULT_RETENTION_DAYS
from ..rules.policy import Policy, PolicyDocumentError, compile_policy

# The provider the moderation guardrail calls (inference.moderation.MODERATION_PROVIDER, which
# licensing may not import; tests/privacy checks that they agree).
MODERATION_PROVIDER = "direct"
# A ledger row's columns that say who made the request: what the retention job
# (`apply_retention`, Institution.ledger_identity_days) takes away, and an erasure pseudonymises.
IDENTITY_COLUMNS = ("end_user", "api_key", "metadata")
ROLES = ("admin", "reviewer", "teacher", "safeguarding")


def printable(text: object) -> str:
    """The text with what no renderer or column takes (NUL, lone surrogates) as U+FFFD."""
    return UNSTORABLE.sub("\ufffd", str(text))


@dataclass(frozen=True)
class Place:
    """A connection a request may reach: a provider's, or the gateway itself (`host` empty)."""

    provider: str
    kind: str  # the provider kind's label, in English (catalog.registry; translated on show)
    connection: str
    host: str
    tags: tuple[str, ...]
    region: str

    @property
    def in_eu(self) -> bool:
        """Tagged `eu` by the operator (a tag is their statement, not a check of the host)."""
        return "eu" in self.tags

    @property
    def on_gateway(self) -> bool:
        return not self.host


@dataclass(frozen=True)
class ModelReach:
    model: str
    services: tuple[str, ...]


@dataclass(frozen=True)
class LicenseTypeFacts:
    name: str
    shared: bool  # the operator's (no institution), used by the institution's licenses
    active: bool
    licenses: int
    people: int  # end users on its licenses
    policy_broken: bool  # the document does not compile: every request is a 503
    services: tuple[str, ...]  # the services the policy enables
    providers: tuple[tuple[str, tuple[str, ...] | None], ...]  # per service; None = any
    required_tags: tuple[str, ...]
    models: tuple[ModelReach, ...]
    any_model: tuple[str, ...]  # services that take a model the catalog does not know
    places: tuple[Place, ...]
    input_moderation: bool
    output_moderation: bool
    input_patterns: int
    output_patterns: int
    moderation_place: Place | None  # where moderated texts go (None: nowhere usable)


@dataclass(frozen=True)
class Stored:
    """What the gateway holds about the institution's people, and for how long."""

    ledger_rows: int
    ledger_columns: tuple[str, ...]
    identity_columns: tuple[str, ...]
    ledger_identity_days: int | None  # None: kept
    # Licenses with a lifetime budget per person: their wallets never close, so they keep
    # naming whose rows they hold past the period (docs/decisions/retention.md).
    lifetime_per_person: tuple[str, ...]
    audit_rows: int
    audit_log_days: int | None  # None: kept
    alerts_on: bool
    alert_days: int
    alert_categories: tuple[str, ...]
    alerts_held: int
    session_days: float
    keys_active: int
    keys_total: int
    end_users: int
    sso_identities: int
    lti_identities: int
    scim_users: int
    courses: int
    courses_with_instructions: int


@dataclass(frozen=True)
class RoleCount:
    role: str  # an AdminProfile role, "student" (end users) or "operator" (superusers)
    people: int


@dataclass(frozen=True)
class PrivacyReport:
    institution_id: int
    institution: str
    site_url: str
    generated_at: datetime
    license_types: tuple[LicenseTypeFacts, ...]
    sub_processors: tuple[Place, ...]
    stored: Stored
    roles: tuple[RoleCount, ...]
    retention_last_run: datetime | None

    @property
    def possible_transfers(self) -> tuple[Place, ...]:
        """Sub-processors reached outside the gateway without an `eu` tag."""
        return tuple(p for p in self.sub_processors if not p.on_gateway and not p.in_eu)


def privacy_report(institution: Institution, catalog: Catalog | None = None) -> PrivacyReport:
    """The institution's privacy pack, as configured now."""
    catalog = catalog or load_catalog_snapshot()
    types = tuple(_license_type_facts(t, institution, catalog) for t in _license_types(institution))
    return PrivacyReport(
        institution_id=institution.pk,
        institution=printable(institution.name),
        site_url=printable(get_config().GATEWAY_PUBLIC_URL),
        generated_at=clock.utcnow(),
        license_types=types,
        sub_processors=_sub_processors(types),
        stored=_stored(institution),
        roles=_roles(institution),
        retention_last_run=_retention_last_run(institution),
    )


def _license_types(institution: Institution) -> list[LicenseType]:
    """Its own license types and the shared ones its licenses use."""
    return list(
        LicenseType.objects.filter(
            Q(institution=institution) | Q(licenses__institution=institution)
        )
        .distinct()
        .order_by("name", "pk")
    )


def _policy(license_type: LicenseType) -> Policy | None:
    try:
        return compile_policy(license_type.policy)
    except PolicyDocumentError:
        return None


def _license_type_facts(
    license_type: LicenseType, institution: Institution, catalog: Catalog
) -> LicenseTypeFacts:
    policy = _policy(license_type)
    licenses = license_type.licenses.filter(institution=institution)
    reach = _reach(catalog, policy)
    guardrails = license_type.guardrails if isinstance(license_type.guardrails, dict) else {}
    moderated = _moderated(guardrails)
    tags = tuple(sorted(policy.connection_tags)) if policy else ()
    return LicenseTypeFacts(
        name=printable(license_type.name),
        shared=license_type.institution_id is None,
        active=license_type.active,
        licenses=licenses.count(),
        people=EndUser.objects.filter(license__in=licenses).count(),
        policy_broken=policy is None,
        services=tuple(policy.services) if policy else (),
        providers=_providers(policy),
        required_tags=tags,
        models=tuple(ModelReach(printable(m.model_id), tuple(m.services)) for m in reach[0]),
        any_model=tuple(reach[1].services),
        places=_places(catalog, [*reach[0], reach[1]]),
        input_moderation="input" in moderated,
        output_moderation="output" in moderated,
        input_patterns=_pattern_count(guardrails, "input"),
        output_patterns=_pattern_count(guardrails, "output"),
        moderation_place=_moderation_place(catalog, frozenset(tags)) if moderated else None,
    )


def _reach(catalog: Catalog, policy: Policy | None) -> tuple[list[ModelAccess], ModelAccess]:
    """Every catalog model the policy allows (listed or not: a client may name an unlisted
    one), and the requests for models the catalog does not know."""
    if policy is None:
        return [], ModelAccess(model_id="")
    return models_reached(catalog, policy, listed_only=False), unknown_model_access(catalog, policy)


def _providers(policy: Policy | None) -> tuple[tuple[str, tuple[str, ...] | None], ...]:
    if policy is None:
        return ()
    return tuple(
        (name, tuple(sorted(service.providers)) if service.providers is not None else None)
        for name, service in policy.services.items()
    )


def _moderated(guardrails: dict) -> set[str]:
    return {
        stage
        for stage in ("input", "output")
        if isinstance(guardrails.get(stage), dict) and guardrails[stage].get("moderation") is True
    }


def _pattern_count(guardrails: dict, stage: str) -> int:
    config = guardrails.get(stage)
    patterns = config.get("patterns") if isinstance(config, dict) else None
    return len(patterns) if isinstance(patterns, list) else 0


def _place(catalog: Catalog, provider: str, connection: ConnectionInfo) -> Place:
    info = catalog.providers[provider]
    kind = PROVIDER_KINDS.get(info.kind)
    return Place(
        provider=printable(provider),
        kind=str(kind.label) if kind else printable(info.kind),
        connection=printable(connection.name),
        host=printable(urlsplit(connection.base_url).hostname or "") if connection.base_url else "",
        tags=tuple(printable(tag) for tag in sorted(connection.tags)),
        region=printable(connection.region),
    )


def _places(catalog: Catalog, reached: list[ModelAccess]) -> tuple[Place, ...]:
    """Every connection the requests reach, once, by provider and connection."""
    found: dict[tuple[str, str], Place] = {}
    for access in reached:
        for destination in access.destinations:
            provider = catalog.providers[destination.provider]
            connection = provider.connections.get(destination.connection)
            if connection is None:  # the implied connection of a kind the gateway serves
                found.setdefault(
                    (destination.provider, destination.connection),
                    _gateway_place(catalog, destination.provider, destination.connection),
                )
                continue
            key = (destination.provider, destination.connection)
            found.setdefault(key, _place(catalog, destination.provider, connection))
    return tuple(found[key] for key in sorted(found))


def _gateway_place(catalog: Catalog, provider: str, connection: str) -> Place:
    kind = PROVIDER_KINDS.get(catalog.providers[provider].kind)
    label = str(kind.label) if kind else ""
    return Place(printable(provider), label, printable(connection), "", (), "")


def _moderation_place(catalog: Catalog, tags: frozenset[str]) -> Place | None:
    """The connection the moderation guardrail calls: the `direct` provider's `default`, or
    with residency tags the first of its connections with a key that carries them (the rule of
    inference.moderation._route)."""
    provider = catalog.providers.get(MODERATION_PROVIDER)
    if provider is None:
        return None
    default = provider.connections.get("default")
    candidates = [default, *provider.connections.values()] if tags else [default]
    for connection in candidates:
        if connection is not None and connection.api_key and tags <= connection.tags:
            return _place(catalog, MODERATION_PROVIDER, connection)
    return None


def _sub_processors(types: tuple[LicenseTypeFacts, ...]) -> tuple[Place, ...]:
    """The connections outside the gateway any license type reaches (moderation included)."""
    found: dict[tuple[str, str], Place] = {}
    for facts in types:
        places = [*facts.places, *([facts.moderation_place] if facts.moderation_place else [])]
        for place in places:
            if not place.on_gateway:
                found.setdefault((place.provider, place.connection), place)
    return tuple(found[key] for key in sorted(found))


def _stored(institution: Institution) -> Stored:
    settings_row = SafeguardingSettings.objects.filter(institution=institution).first()
    keys = ApiKey.objects.filter(license__institution=institution)
    courses = Course.objects.filter(institution=institution)
    return Stored(
        ledger_rows=Transaction.objects.filter(license__institution=institution).count(),
        ledger_columns=tuple(c.path for c in LEDGER_COLUMNS if "__" not in c.path),
        identity_columns=IDENTITY_COLUMNS,
        ledger_identity_days=institution.ledger_identity_days,
        lifetime_per_person=tuple(
            printable(name)
            for name in institution.licenses.filter(
                budget_strategy="per_user", budget_period="lifetime"
            ).values_list("name", flat=True)
        ),
        audit_rows=AuditEvent.objects.filter(institution=institution).count(),
        audit_log_days=institution.audit_log_days,
        alerts_on=bool(settings_row and settings_row.enabled),
        alert_days=settings_row.retention_days if settings_row else DEFAULT_RETENTION_DAYS,
        alert_categories=tuple(
            printable(c) for c in (settings_row.categories if settings_row else CATEGORIES)
        ),
        alerts_held=SafeguardingAlert.objects.filter(institution=institution).count(),
        session_days=settings.SESSION_COOKIE_AGE / 86400,
        keys_active=keys.filter(active=True).count(),
        keys_total=keys.count(),
        end_users=EndUser.objects.filter(license__institution=institution).count(),
        sso_identities=SsoIdentity.objects.filter(provider__institution=institution).count(),
        lti_identities=LtiIdentity.objects.filter(platform__institution=institution).count(),
        scim_users=ScimUser.objects.filter(institution=institution).count(),
        courses=courses.count(),
        courses_with_instructions=courses.exclude(instructions="").count(),
    )


def _roles(institution: Institution) -> tuple[RoleCount, ...]:
    """People per role: the institution's active staff by role, its active end users, and the
    operator's superusers (who read every institution)."""
    staff = AdminProfile.objects.filter(institution=institution, user__is_active=True)
    counts = [RoleCount(role, staff.filter(role=role).count()) for role in ROLES]
    students = EndUser.objects.filter(license__institution=institution, active=True).count()
    operators = get_user_model().objects.filter(is_superuser=True, is_active=True).count()
    return (*counts, RoleCount("student", students), RoleCount("operator", operators))


def _retention_last_run(institution: Institution) -> datetime | None:
    event = (
        AuditEvent.objects.filter(
            institution=institution, action=AuditEvent.Action.RETENTION_APPLIED
        )
        .order_by("-created_at")
        .first()
    )
    return event.created_at if event else None
