"""An export of the ledger as CSV is streamed: the process's memory does not grow with the
number of rows, in the admin (Django's sync path) and in /manage/v1/transactions?format=csv under
ASGI (the async iterator uvicorn is served). Rows come through a server-side cursor and go out
piece by piece. Measured twice, each after a small first export (code loaded, allocator warm):
- resident: the process's peak resident memory (VmHWM, which also sees libpq's, so a client-side
  cursor fetching every row would show) grows by less than 50 MB while exporting 32,000 rows
  whose CSV is larger than that (each row carries ~1,800 bytes of metadata: fewer, larger rows
  prove the same in a fraction of 200,000 small rows' time);
- tracemalloc: Python's allocations peak no higher exporting 10,000 rows than exporting 5,000,
  give or take a quarter of the larger CSV (holding it, or the rows, would add the second 5,000
  rows' half of it, twice the bound; 5,000 rows are enough for the peak of a streamed export,
  2,500 are not). A streamed export's growth is 40-75 KB against the bound's ~1 MB; 20,000 rows
  showed the same at twice the time under tracemalloc, the slowest part of the module.
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

LIMIT = 50 * 1024 * 1024  # the resident measure's bound
SMALL = 5_000  # rows of the first, warming export (and of the tracemalloc's smaller one)
# (rows, bytes of metadata per row) per measure.
SIZES = {"resident": (32_000, 1_800), "tracemalloc": (10_000, 120)}

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
       jsonb_build_object('course', 'CS' || (g %% 40), 'assignment', repeat('essay ', %(words)s)),
       300, 'chatcmpl-' || md5(g::text || 'answer'), 'success', '', ''
FROM generate_series(1, %(rows)s) AS g
"""


@pytest.fixture
def big_ledger(db, measure):
    found = make_licensing("a")
    rows, metadata = SIZES[measure]
    with connection.cursor() as cursor:
        cursor.execute(
            FILL,
            {
                "license": found["license"].pk,
                "key": found["api_key"].pk,
                "rows": rows,
                "words": metadata // len("essay "),
            },
        )
    return found


def _resident() -> tuple[int, int]:
    """(current, peak) resident memory of this process in bytes."""
    status = Path("/proc/self/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return (int(fields[name].split()[0]) * 1024 for name in ("VmRSS", "VmHWM"))


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current VmRSS


def _newest(rows: int) -> dict:
    """The export's query for the newest `rows` rows (one a second, the newest now)."""
    return {"since": (datetime.now(UTC) - timedelta(seconds=rows)).isoformat()}


def _warm_up(consume) -> None:
    """A first export of the newest rows loads the code and warms the allocator (~38 MB
    resident, 15-20 MB traced, the first time in a process)."""
    consume(_newest(SMALL))


def _traced(consume, params) -> tuple[int, int, int]:
    """(lines, bytes, tracemalloc's peak) of consuming one export: Python's allocations."""
    tracemalloc.start()
    try:
        lines, size = consume(params)
        return lines, size, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _traced_growth(consume) -> tuple[int, int, int, int]:
    """(lines, bytes, growth, bound): Python's peak exporting every row less its peak exporting
    the newest SMALL; the bound is a quarter of the whole CSV."""
    _warm_up(consume)
    small = _traced(consume, _newest(SMALL))[2]
    lines, size, peak = _traced(consume, {})
    return lines, size, peak - small, size // 4


def _resident_growth(consume) -> tuple[int, int, int, int]:
    """(lines, bytes, growth, bound) of consuming one export: the peak resident growth, every
    allocation, libpq's included (measured without tracemalloc, whose own bookkeeping is
    resident too), against LIMIT."""
    _warm_up(consume)
    _reset_peak()
    before, _ = _resident()
    lines, size = consume({})
    _, peak = _resident()
    return lines, size, peak - before, LIMIT


MEASURES = {"tracemalloc": _traced_growth, "resident": _resident_growth}


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
def test_admin_export_streams_in_constant_memory(big_ledger, admin_client, measure):
    rows, _ = SIZES[measure]
    lines, size, growth, bound = MEASURES[measure](_admin_export(admin_client))
    assert lines == rows + 3 + 1  # make_licensing's three rows and the header
    assert size > bound, "the CSV is larger than the bound: holding it would fail the test"
    assert growth < bound, f"{measure}: {growth / 2**20:.1f} MB"


@pytest.mark.parametrize("measure", sorted(MEASURES))
def test_api_csv_under_asgi_streams_in_constant_memory(big_ledger, measure):
    rows, _ = SIZES[measure]
    user = user_with("reviewer", big_ledger["institution"])
    lines, size, growth, bound = MEASURES[measure](_api_export_under_asgi(user))
    assert lines == rows + 3 + 1
    assert size > bound
    assert growth < bound, f"{measure}: {growth / 2**20:.1f} MB"
