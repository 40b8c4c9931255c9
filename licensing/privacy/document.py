"""The privacy pack in words (docs/privacy.md): the facts of licensing.privacy.report as titled
sections of paragraphs, lists and tables, in the active language. The Markdown, the admin's page
and the PDF all draw this one document, so they never say different things. Pure: no query."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import formats
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from catalog.registry import SERVICE_BY_NAME

from .report import LicenseTypeFacts, Place, PrivacyReport, Stored


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Section:
    title: str
    paragraphs: tuple[str, ...] = ()
    items: tuple[str, ...] = ()
    table: Table | None = None
    level: int = 2  # 2: a numbered part of the pack; 3: a part of one


@dataclass(frozen=True)
class Document:
    title: str
    sections: tuple[Section, ...]


def document(report: PrivacyReport) -> Document:
    sections = [
        _controller(report),
        Section(_("2. What each license type can reach")),
        *(part for facts in report.license_types for part in _license_type(facts)),
        _sub_processors(report),
        _stored(report.stored),
        _roles(report),
        _safeguards(report),
        Section(_("7. Records of processing activities (GDPR Art. 30)")),
        *_records(report),
        Section(_("8. Draft data protection impact assessment (GDPR Art. 35)")),
        *_dpia(report),
    ]
    title = _("Privacy pack: %(institution)s") % {"institution": report.institution}
    return Document(title=title, sections=tuple(sections))


def _when(moment: datetime | None) -> str:
    if moment is None:
        return _("never")
    return formats.date_format(moment, "DATETIME_FORMAT") + " UTC"


def _days(days: int | float | None) -> str:
    if days is None:
        return _("kept for as long as the institution exists (no period set)")
    shown = int(days) if float(days).is_integer() else round(days, 1)
    return ngettext("%(days)s day", "%(days)s days", int(days)) % {"days": shown}


def _on(flag: bool) -> str:
    return _("on") if flag else _("off")


def _service(name: str) -> str:
    service = SERVICE_BY_NAME.get(name)
    return str(service.label) if service and service.label else name


def _list(values, empty: str) -> str:
    values = list(values)
    return ", ".join(values) if values else empty


def _controller(report: PrivacyReport) -> Section:
    return Section(
        _("1. Controller and this report"),
        paragraphs=(
            _(
                "Draft for the data-protection officer to complete; this report describes the "
                "configuration, it is not a statement of compliance."
            ),
        ),
        items=(
            _("Controller: %(name)s") % {"name": report.institution},
            _("Deployment: %(url)s") % {"url": report.site_url or _("not set")},
            _("Generated: %(when)s") % {"when": _when(report.generated_at)},
        ),
    )


def _license_type(facts: LicenseTypeFacts) -> list[Section]:
    title = _("License type “%(name)s”") % {"name": facts.name}
    if facts.policy_broken:
        broken = _("Its policy cannot be evaluated: every request is refused (503).")
        return [Section(title, paragraphs=(broken,), items=_type_counts(facts), level=3)]
    items = (
        *_type_counts(facts),
        _("Services: %(services)s")
        % {"services": _list((_service(s) for s in facts.services), _("none"))},
        *_allowed_providers(facts),
        _("Required connection tags: %(tags)s")
        % {"tags": _list(facts.required_tags, _("none (any connection)"))},
        _("Catalog models allowed: %(models)s")
        % {"models": _list((m.model for m in facts.models), _("none"))},
        _("Models the catalog does not know: %(services)s")
        % {"services": _list((_service(s) for s in facts.any_model), _("refused"))},
        *_guardrails(facts),
    )
    table = _places_table(facts.places, transfer=False) if facts.places else None
    where = () if facts.places else (_("Its requests reach no connection."),)
    return [Section(title, paragraphs=where, items=items, table=table, level=3)]


def _type_counts(facts: LicenseTypeFacts) -> tuple[str, ...]:
    state = _("active") if facts.active else _("inactive")
    shared = _("shared (the operator's)") if facts.shared else _("the institution's own")
    return (
        _("State: %(state)s, %(shared)s") % {"state": state, "shared": shared},
        _("Licenses: %(licenses)s; people on them: %(people)s")
        % {"licenses": facts.licenses, "people": facts.people},
    )


def _allowed_providers(facts: LicenseTypeFacts) -> tuple[str, ...]:
    narrowed = [(s, p) for s, p in facts.providers if p is not None]
    if not narrowed:
        return (_("Providers allowed: any in the catalog"),)
    return tuple(
        _("Providers allowed for %(service)s: %(providers)s")
        % {"service": _service(service), "providers": _list(providers, _("none"))}
        for service, providers in narrowed
    )


def _guardrails(facts: LicenseTypeFacts) -> tuple[str, ...]:
    lines = [
        _("Moderation of the input: %(input)s; of the output: %(output)s")
        % {"input": _on(facts.input_moderation), "output": _on(facts.output_moderation)},
        _("Guardrail patterns: %(input)s on the input, %(output)s on the output")
        % {"input": facts.input_patterns, "output": facts.output_patterns},
    ]
    if facts.input_moderation or facts.output_moderation:
        place = facts.moderation_place
        where = _place_words(place) if place else _("no usable connection: requests refused")
        lines.append(_("Moderated texts go to: %(where)s") % {"where": where})
    return tuple(lines)


def _place_words(place: Place) -> str:
    host = place.host or _("this gateway")
    return f"{place.provider}/{place.connection} ({host})"


def _transfer(place: Place) -> str:
    if place.on_gateway:
        return _("none (this gateway)")
    if place.in_eu:
        return _("tagged eu")
    return _("possible transfer: check")


def _places_table(places, transfer: bool) -> Table:
    headers = [_("Provider"), _("Kind"), _("Connection"), _("Host"), _("Tags"), _("Region")]
    if transfer:
        headers.append(_("Third country"))
    rows = []
    for place in places:
        row = [
            place.provider,
            _(place.kind) if place.kind else "",
            place.connection,
            place.host or _("this gateway"),
            _list(place.tags, "-"),
            place.region or "-",
        ]
        rows.append(tuple(row + ([_transfer(place)] if transfer else [])))
    return Table(tuple(headers), tuple(rows))


def _sub_processors(report: PrivacyReport) -> Section:
    if not report.sub_processors:
        none = _("No license type reaches a connection outside this gateway.")
        return Section(_("3. Sub-processors"), paragraphs=(none,))
    intro = _(
        "Every enabled connection outside this gateway that a license type of the institution "
        "can reach, with the moderation guardrail's. A connection without the eu tag is listed "
        "as a possible transfer to a third country: check the provider's contract."
    )
    return Section(
        _("3. Sub-processors"),
        paragraphs=(intro,),
        table=_places_table(report.sub_processors, transfer=True),
    )


def _lifetime_note(stored: Stored) -> str:
    if not stored.lifetime_per_person or stored.ledger_identity_days is None:
        return ""
    return " " + _(
        "(except through the per-person wallets of licenses with a lifetime budget, which "
        "never close: %(licenses)s)"
    ) % {"licenses": ", ".join(stored.lifetime_per_person)}


def _stored_rows(stored: Stored) -> tuple[tuple[str, str, str], ...]:
    identity = _days(stored.ledger_identity_days)
    return (
        (
            _("Usage records (ledger): %(rows)s") % {"rows": stored.ledger_rows},
            _("no prompt and no answer; the columns: %(columns)s")
            % {"columns": ", ".join(stored.ledger_columns)},
            _("the sums for good; who made the request (%(columns)s): %(identity)s")
            % {"columns": ", ".join(stored.identity_columns), "identity": identity}
            + _lifetime_note(stored),
        ),
        (
            _("Audit log: %(rows)s") % {"rows": stored.audit_rows},
            _("who did what, when, from which address and browser"),
            _days(stored.audit_log_days),
        ),
        _alerts_row(stored),
        (
            _("Sessions"),
            _("a signed-in person's session (the database)"),
            _days(stored.session_days),
        ),
        (
            _("API keys: %(active)s active of %(total)s")
            % {"active": stored.keys_active, "total": stored.keys_total},
            _("a SHA-256 digest and a short prefix, never the key itself"),
            _("until deleted; revoked keys stay for the ledger"),
        ),
        (
            _("People: %(people)s; sign-in identities: %(sso)s SSO, %(lti)s LTI, %(scim)s SCIM")
            % {
                "people": stored.end_users,
                "sso": stored.sso_identities,
                "lti": stored.lti_identities,
                "scim": stored.scim_users,
            },
            _("subject, name, e-mail address, groups at the last sign-in"),
            _("until the person is erased or deprovisioned"),
        ),
        (
            _("Course instructions: %(with)s of %(courses)s courses")
            % {"with": stored.courses_with_instructions, "courses": stored.courses},
            _("the teacher's text, sent before every request of the course's members"),
            _("until the teacher changes it or the course is deleted"),
        ),
    )


def _alerts_row(stored: Stored) -> tuple[str, str, str]:
    what = _("Safeguarding alerts (%(state)s): %(rows)s held") % {
        "state": _on(stored.alerts_on),
        "rows": stored.alerts_held,
    }
    contents = _("the flagged message only, sealed; categories: %(categories)s") % {
        "categories": _list(stored.alert_categories, _("none"))
    }
    return what, contents, _days(stored.alert_days)


def _stored(stored: Stored) -> Section:
    return Section(
        _("4. What is stored and for how long"),
        paragraphs=(
            _(
                "Prompts, answers, files and images are passed to the provider and not stored "
                "by the gateway."
            ),
        ),
        table=Table((_("What"), _("Contents"), _("Kept")), _stored_rows(stored)),
    )


def _role_reads() -> dict[str, tuple[str, str]]:
    return {
        "admin": (_("Institution admin"), _("licenses, keys, people, ledger, audit log; no alert")),
        "reviewer": (_("Reviewer"), _("licenses, wallets and the ledger")),
        "teacher": (_("Teacher"), _("their courses: members' usage, their courses' alerts")),
        "safeguarding": (_("Safeguarding contact"), _("the institution's alerts")),
        "student": (_("Student"), _("their own usage, keys and data (download)")),
        "operator": (_("Operator (superuser)"), _("everything, in every institution")),
    }


def _roles(report: PrivacyReport) -> Section:
    reads = _role_reads()
    rows = tuple((*reads[r.role], str(r.people)) for r in report.roles)
    return Section(
        _("5. Who can read what"),
        table=Table((_("Role"), _("May read"), _("People")), rows),
    )


def _safeguards(report: PrivacyReport) -> Section:
    rows = (
        (_("Transport encryption (TLS)"), _("the operator's proxy in front of the gateway")),
        (_("API keys"), _("stored as digests")),
        (_("Provider credentials"), _("encrypted at rest")),
        (_("Outbound guard"), _("admin-set URLs may not reach private addresses")),
        (_("Access and erasure (GDPR Art. 15, 17)"), _("download in the portal; erasure")),
        (_("Safeguarding alerts' content"), _("every view is audited")),
        (_("Retention job (apply_retention)"), _when(report.retention_last_run)),
    )
    return Section(_("6. Safeguards"), table=Table((_("Safeguard"), _("State")), rows))


def _todo() -> str:
    return _("To be completed by the DPO.")


def _records(report: PrivacyReport) -> list[Section]:
    transfers = [_place_words(p) for p in report.possible_transfers]
    parts = (
        (_("Purposes"), _("Giving students and staff access to AI services within budgets.")),
        (_("Categories of data subjects"), _("Students (possibly minors) and staff.")),
        (
            _("Categories of personal data"),
            _("Identifiers, usage records, audit records; flagged messages if alerts are on."),
        ),
        (
            _("Recipients"),
            _("The roles of part 5 and the sub-processors of part 3 (%(count)s).")
            % {"count": len(report.sub_processors)},
        ),
        (
            _("Transfers to third countries"),
            _("Possible transfer: check: %(places)s") % {"places": ", ".join(transfers)}
            if transfers
            else _("None found in the configuration."),
        ),
        (_("Time limits for erasure"), _("As in part 4.")),
        (_("Security measures"), _("As in part 6.")),
    )
    return [Section(t, paragraphs=(text, _todo()), level=3) for t, text in parts]


def _dpia(report: PrivacyReport) -> list[Section]:
    moderated = any(t.input_moderation or t.output_moderation for t in report.license_types)
    parts = (
        (
            _("Description of the processing"),
            _("%(types)s license types; %(people)s people; %(subs)s sub-processors.")
            % {
                "types": len(report.license_types),
                "people": report.stored.end_users,
                "subs": len(report.sub_processors),
            },
        ),
        (
            _("Necessity and proportionality"),
            _("No prompt or answer is stored; identities are removed after: %(days)s.")
            % {"days": _days(report.stored.ledger_identity_days)},
        ),
        (
            _("Risks"),
            _(
                "Minors' data; profiling from usage records; transfers (%(count)s possible); "
                "moderation: %(moderation)s."
            )
            % {"count": len(report.possible_transfers), "moderation": _on(moderated)},
        ),
        (_("Measures"), _("As in parts 4 and 6.")),
    )
    return [Section(t, paragraphs=(text, _todo()), level=3) for t, text in parts]
