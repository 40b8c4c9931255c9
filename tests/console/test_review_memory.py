"""Exporting 200,000 ledger rows as CSV keeps the process's memory growth under 50 MB, in the
admin (Django's sync path) and in /manage/v1/transactions?format=csv under ASGI (the async
iterator uvicorn is served): rows come through a server-side cursor and go out piece by piece,
while the CSV itself is larger than the limit. Measured twice: the process's peak resident
memory (VmHWM, which also sees libpq's) on 200,000 rows, and Python's allocations (tracemalloc's
peak, ~7 MB) on a quarter of them against a quarter of the limit (the same ratio: a 20 MB CSV in
25 pieces of 2,000 rows; tracemalloc slows every allocation: 200,000 rows under it took 160 s of
CI's time). Both after a small first export (code loaded, allocator warm).
PostgreSQL only: the rows are made by one INSERT ... SELECT FROM generate_series."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import AsyncClient

from .test_admin import make_licensing
from .test_manage_api import user_with

ROWS = 200_000
LIMIT = 50 * 1024 * 1024
# (rows, limit) per measure: tracemalloc's on a quarter of the rows, against a quarter of the limit.
SIZES = {"resident": (ROWS, LIMIT), "tracemalloc": (ROWS // 4, LIMIT // 4)}

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="makes its 200,000 rows with PostgreSQL's generate_series; "
        "the server-side cursor it checks is PostgreSQL's",
    ),
]

FILL = """
INSERT INTO licensing_transaction (
    created_at, request_id, license_id, api_key_id, service, requested_model, billed_model,
    provider, connection, status_code, prompt_tokens, completion_tokens, total_tokens, credits,
    metadata, latency_ms, upstream_id, outcome, error_code, error_message)
SELECT now() - g * interval '1 second', md5(g::text), %(license)s, %(key)s,
       'chat_completions', 'gpt-4o-mini', 'gpt-4o-mini', 'direct', 'default', 200, 100, 50,
       150, 450,
       jsonb_build_object('course', 'CS' || (g %% 40), 'assignment', repeat('essay ', 20)),
       300, 'chatcmpl-' || md5(g::text || 'answer'), 'success', '', ''
FROM generate_series(1, %(rows)s) AS g
"""


@pytest.fixture
def big_ledger(db, measure):
    found = make_licensing("a")
    rows, _ = SIZES[measure]
    with connection.cursor() as cursor:
        cursor.execute(
            FILL, {"license": found["license"].pk, "key": found["api_key"].pk, "rows": rows}
        )
    return found


def _resident() -> tuple[int, int]:
    """(current, peak) resident memory of this process in bytes."""
    status = Path("/proc/self/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return (int(fields[name].split()[0]) * 1024 for name in ("VmRSS", "VmHWM"))


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current VmRSS


def _warm_up(consume) -> None:
    """A first export of the newest 5,000 rows loads the code and warms the allocator (~38 MB
    resident, 15-20 MB traced, the first time in a process); it is too small to leave room for
    the whole export held at once."""
    consume({"since": (datetime.now(UTC) - timedelta(seconds=5000)).isoformat()})


def _traced_peak(consume) -> tuple[int, int, int]:
    """(lines, bytes, tracemalloc's peak) of consuming one export: Python's allocations."""
    _warm_up(consume)
    tracemalloc.start()
    try:
        lines, size = consume({})
        return lines, size, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _resident_growth(consume) -> tuple[int, int, int]:
    """(lines, bytes, peak resident growth) of consuming one export: every allocation, libpq's
    included (measured without tracemalloc, whose own bookkeeping is resident too)."""
    _warm_up(consume)
    _reset_peak()
    before, _ = _resident()
    lines, size = consume({})
    _, peak = _resident()
    return lines, size, peak - before


MEASURES = {"tracemalloc": _traced_peak, "resident": _resident_growth}


def _admin_export(client):
    def consume(params):
        response = client.get("/admin/licensing/transaction/export/", params)
        assert response.status_code == 200 and response.streaming
        lines = size = 0
        for chunk in response.streaming_content:
            lines += chunk.count(b"\n")
            size += len(chunk)
        return lines, size

    return consume


def _api_export_under_asgi(user):
    async def fetch(params):
        client = AsyncClient()
        await client.aforce_login(user)
        response = await client.get("/manage/v1/transactions", {**params, "format": "csv"})
        assert response.status_code == 200 and response.is_async
        lines = size = 0
        async for chunk in response.streaming_content:
            lines += chunk.count(b"\n")
            size += len(chunk)
        return lines, size

    return async_to_sync(fetch)


@pytest.mark.parametrize("measure", sorted(MEASURES))
def test_admin_export_of_200000_rows_in_constant_memory(big_ledger, admin_client, measure):
    rows, limit = SIZES[measure]
    lines, size, growth = MEASURES[measure](_admin_export(admin_client))
    assert lines == rows + 3 + 1  # make_licensing's three rows and the header
    assert size > limit, "the CSV is larger than the limit: holding it would fail the test"
    assert growth < limit, f"{measure}: {growth / 2**20:.1f} MB"


@pytest.mark.parametrize("measure", sorted(MEASURES))
def test_api_csv_of_200000_rows_under_asgi_in_constant_memory(big_ledger, measure):
    rows, limit = SIZES[measure]
    user = user_with("reviewer", big_ledger["institution"])
    lines, size, growth = MEASURES[measure](_api_export_under_asgi(user))
    assert lines == rows + 3 + 1
    assert size > limit
    assert growth < limit, f"{measure}: {growth / 2**20:.1f} MB"
