"""Instants a person types (a filter's `since`, a body's `expires_at`): what a UTC offset may be.

Python reads any offset under 24 hours (`2020-01-17T03:08:28-22:05`), PostgreSQL refuses any
beyond 15:59 (a `DataError`: a 500 if it got that far), and no time zone in use is further from
UTC than 14 hours (Pacific/Kiritimati, +14:00; the furthest west is -12:00). So an offset beyond
14 hours either way is refused where the text is read, naming the field, on every database
alike (docs/decisions/management-api.md).
"""

from __future__ import annotations

from datetime import datetime, timedelta

MAX_UTC_OFFSET = timedelta(hours=14)
OFFSET_REFUSED = "The UTC offset is beyond ±14:00: no time zone is that far from UTC."


def offset_problem(value: datetime) -> str | None:
    """Why `value`'s offset cannot be taken (None: it can, or it has none)."""
    offset = value.utcoffset()
    if offset is not None and abs(offset) > MAX_UTC_OFFSET:
        return OFFSET_REFUSED
    return None
