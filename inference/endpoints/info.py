"""GET /v1/health, /v1/models, /v1/models/{id} and /v1/license. Models and license run checks 1,
3 and 4 only."""

from dataclasses import replace

from django.conf import settings
from django.db import connection
from ninja import Router
from pydantic import BaseModel

from catalog.routing import Catalog, ModelEntry, ProviderPin
from core.db import run_db
from core.errors import NotFound
from core.jsonio import json_response
from licensing.access import frontend
from licensing.access.credentials import LicenseInfo
from licensing.courses.selectors import course_rules_async, course_summary
from licensing.ledger.budget import budget_usage
from licensing.ledger.spool import note_database_down, note_database_up
from licensing.ledger.spool import probe as spool_probe
from licensing.rules.policy import SERVICES

from ..headers import parse_service_headers
from ..model_access import model_not_found, usable_models
from ..pipeline import current_catalog, require_principal
from ..schemas.common import error_responses

router = Router(tags=["info"])


class HealthBody(BaseModel):
    status: str
    database: str
    spool: str
    redis: str | None = None  # only when REDIS_URL is set


class ModelEntryOut(BaseModel):
    id: str
    object: str
    created: int
    owned_by: str
    supported_features: list[str]
    input_modality: dict[str, bool]
    output_modality: dict[str, bool]
    cost: dict


class ModelList(BaseModel):
    object: str
    data: list[ModelEntryOut]


class BudgetOut(BaseModel):
    unit: str
    strategy: str
    period: str
    window_start: str | None
    limit: int | None
    used: int
    remaining: int | None


class LicenseTypeOut(BaseModel):
    name: str


class CourseLevelOut(BaseModel):
    period: str
    window_start: str
    limit: int | None
    used: int
    remaining: int | None


class CourseOut(BaseModel):
    id: int
    code: str
    name: str
    exam_mode: bool
    open: bool
    allowance: CourseLevelOut
    pool: CourseLevelOut | None


class LicenseOut(BaseModel):
    object: str
    name: str
    institution: str
    license_type: LicenseTypeOut
    services: list[str]
    budget: BudgetOut
    course: CourseOut | None = None  # only for a course credential (docs/api.md)


def _database_answers() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return cursor.fetchone() == (1,)


@router.get("/health", auth=None, response={200: HealthBody, 503: HealthBody, **error_responses()})
async def health(request):
    """503 `error` when the database does not answer (the spec's). A spool that cannot take a
    ledger entry is `degraded` with 200: the worker serves while the database is up (a load
    balancer must not drop it), but would refuse provider calls during an outage."""
    try:
        ok = await run_db(_database_answers)
    except Exception:
        ok = False
    # What the health check saw is as good as a failed ledger write (licensing.ledger.spool).
    if ok:
        note_database_up()
    else:
        note_database_down()
    spool = "ok" if spool_probe.writable() else "unwritable"
    body = {"status": "ok", "database": "ok", "spool": spool}
    if settings.REDIS_URL:
        body["redis"] = "ok" if await _redis_answers(settings.REDIS_URL) else "unreachable"
    if not ok:
        return json_response({**body, "status": "error", "database": "unreachable"}, status=503)
    if spool != "ok" or body.get("redis", "ok") != "ok":
        # Redis down: the worker serves (fair use admits, circuits act closed, caches expire after
        # the TTL: docs/deployment.md, "Redis"), not as configured; 200, a balancer keeps it.
        body["status"] = "degraded"
    return json_response(body)


async def _redis_answers(url: str) -> bool:
    import redis.asyncio as redis

    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        return bool(await client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        await client.aclose()


async def _usable_models(request) -> dict[str, ModelEntry]:
    """Checks 1, 3 and 4, then the catalog entries this caller can use (inference.model_access)."""
    principal = require_principal(request)
    pin, _ = parse_service_headers(request)
    catalog = await current_catalog()
    license = principal.license
    if principal.course_id is not None:
        return await _course_models(catalog, pin, license, principal.course_id)
    usable = usable_models(catalog, license.policy, pin, license_id=license.id)
    if not principal.front_end:
        return usable
    # A front-end key for every course of its license: also `<code> · <model>` for each course
    # (licensing.access.frontend), the same list whoever the request names.
    usable = dict(usable)
    for course_id, code in await frontend.license_courses_async(license.id):
        for model_id, entry in (await _course_models(catalog, pin, license, course_id)).items():
            name = frontend.alias(code, model_id)
            usable[name] = replace(entry, model_id=name)
    return usable


async def _course_models(
    catalog: Catalog, pin: ProviderPin | None, license: LicenseInfo, course_id: int
) -> dict[str, ModelEntry]:
    """What a course's overlay allows (the snapshot's compiled policy; the license type's when
    the course has no overlay; nothing when it cannot be evaluated)."""
    rules = await course_rules_async(course_id)
    policy = license.policy
    if rules is None or rules.policy_broken:
        policy = None
    elif rules.policy is not None:
        policy = rules.policy
    return usable_models(catalog, policy, pin, license_id=license.id, course_id=course_id)


@router.get("/models", response={200: ModelList, **error_responses(400, 401, 503)})
async def models(request):
    usable = await _usable_models(request)
    return json_response(
        {"object": "list", "data": [entry.client_fields() for entry in usable.values()]}
    )


# `path:`: ids such as `openai/gpt-4o-mini` hold a slash (the openai SDK sends it as %2F).
@router.get(
    "/models/{path:model}", response={200: ModelEntryOut, **error_responses(400, 401, 404, 503)}
)
async def model(request, model: str):
    entry = (await _usable_models(request)).get(model)
    if entry is None:
        raise NotFound(model_not_found(model))
    return json_response(entry.client_fields())


@router.get("/license", response={200: LicenseOut, **error_responses(400, 401, 500, 503)})
async def license_info(request):
    principal = require_principal(request)
    if principal.front_end:  # the budget of the person it names, if it names one
        principal = await frontend.acting_for(principal, request.headers, required=False)
    parse_service_headers(request)
    license = principal.license
    policy = license.policy
    services = [s for s in SERVICES if policy is not None and s in policy.services]
    budget = await run_db(
        budget_usage, license_id=license.id, config=license.budget, holder=principal.holder
    )
    body = {
        "object": "license",
        "name": license.name,
        "institution": license.institution,
        "license_type": {"name": license.type_name},
        "services": services,
        "budget": budget,
    }
    if principal.course_id is not None:
        body["course"] = await run_db(
            course_summary,
            principal.course_id,
            end_user_id=principal.end_user_id,
            license_id=license.id,
            holder=principal.holder,
        )
    return json_response(body)
