"""Time zones a person may choose (an institution's, docs/admin-guide.md): the IANA names this
host's time zone database knows, checked by name before anything opens a file by it (a name
such as `../etc` is never looked up), with the zones of the schools the gateway serves first
listed first."""

from __future__ import annotations

from functools import cache
from zoneinfo import ZoneInfo, available_timezones

UTC_NAME = "UTC"
# Names the database holds that are not zones a person means: the host's own local time (a
# link that differs from host to host) and the "Factory" placeholder.
_NOT_CHOSEN = frozenset({"localtime", "Factory"})
# Listed first in the pickers (the time zones of the schools served first), then all A-Z.
COMMON = (
    "UTC",
    "Europe/Amsterdam",
    "Europe/Berlin",
    "Europe/Brussels",
    "Europe/Copenhagen",
    "Europe/Dublin",
    "Europe/Helsinki",
    "Europe/Lisbon",
    "Europe/London",
    "Europe/Luxembourg",
    "Europe/Madrid",
    "Europe/Oslo",
    "Europe/Paris",
    "Europe/Prague",
    "Europe/Rome",
    "Europe/Stockholm",
    "Europe/Vienna",
    "Europe/Warsaw",
    "Europe/Zurich",
)


@cache
def zone_names() -> frozenset[str]:
    return frozenset(available_timezones() - _NOT_CHOSEN) | {UTC_NAME}


def is_zone(name: object) -> bool:
    """Whether `name` is a zone a person may choose (any other value, of any type: False)."""
    return isinstance(name, str) and name in zone_names()


@cache
def zone_choices() -> tuple[str, ...]:
    """The common zones this host knows, then every other one A-Z."""
    names = zone_names()
    common = tuple(name for name in COMMON if name in names)
    return common + tuple(sorted(names - set(common)))


def zone_or_utc(name: str | None) -> ZoneInfo:
    """The zone of a stored name; UTC for an empty or unknown one (the instants stay exact)."""
    return ZoneInfo(name if isinstance(name, str) and is_zone(name) else UTC_NAME)
