"""The staff pages in their institution's time zone (issue 37): an institution's admins,
reviewers and teachers read every time of the admin (lists, the review page and its filters,
the usage page's days) in the zone its budgets and courses run in; a superuser, who sees every
institution, reads UTC. The portal sets its students' zone itself (licensing.portal.views).

The middleware is the last of settings.ADMIN_MIDDLEWARE: never on /v1's path.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo

from asgiref.sync import markcoroutinefunction, sync_to_async
from django.utils import timezone

from core.zones import zone_or_utc

from ..access.scoping import scope_of


def staff_zone(user) -> ZoneInfo | None:
    """The zone of a staff user's institution (read with their role: no query of its own);
    None for a superuser or anyone else."""
    scope = scope_of(user)
    if scope.superuser or scope.institution_id is None:
        return None
    return zone_or_utc(scope.timezone)


class InstitutionTimeZoneMiddleware:
    """Activates the signed-in staff user's institution's zone for the view and its page."""

    async_capable = True
    sync_capable = False

    def __init__(self, get_response):
        self.get_response = get_response
        markcoroutinefunction(self)

    async def __call__(self, request):
        # request.user is read from the database on first use: on a thread, as the views do.
        zone = await sync_to_async(staff_zone)(request.user)
        if zone is None:
            return await self.get_response(request)
        with timezone.override(zone):
            return await self.get_response(request)
