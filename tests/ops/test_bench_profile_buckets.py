"""bench/profile_buckets.py: each py-spy sample goes to the work it was done for."""

from __future__ import annotations

from collections import Counter

from bench import profile_buckets

SITE = "/work/.venv/lib/python3.11/site-packages"
LOOP = ["asyncio_run (uvicorn/_compat.py:30)", "Runner.run (asyncio/runners.py:118)"]
HANDLER = [
    "GatewayASGIHandler._handle_api (gateway_site/handler.py:52)",
    "ASGIHandler.run_get_response (django/core/handlers/asgi.py:245)",
    "AsyncOperation.run (ninja/operation.py:498)",
    "run (inference/pipeline.py:150)",
]


def test_a_statement_counts_for_the_step_that_sent_it():
    stack = [
        *LOOP,
        *HANDLER,
        "_admit (inference/pipeline.py:197)",
        "budget_check_async (licensing/ledger/budget.py:173)",
        "AsyncConnection.execute (psycopg/connection_async.py:308)",
        "wait_async (psycopg/waiting.py:187)",
    ]
    assert profile_buckets.bucket(stack) == "budget read (statement, psycopg)"


def test_a_framework_claims_its_own_work():
    stack = [*LOOP, *HANDLER[:3], "BaseModel.model_validate (pydantic/main.py:700)"]
    assert profile_buckets.bucket(stack) == "validation: JSON, django-ninja, pydantic"
    stack = [
        *LOOP,
        HANDLER[0],
        HANDLER[1],
        "ASGIRequest.__init__ (django/core/handlers/asgi.py:80)",
    ]
    assert profile_buckets.bucket(stack) == "Django's handler (request, response, URL)"


def test_a_library_callback_under_the_server_is_the_librarys():
    stack = [*LOOP, "ResponseHandler.data_received (aiohttp/client_proto.py:359)"]
    assert profile_buckets.bucket(stack) == "provider call (aiohttp, httpx response)"
    assert profile_buckets.bucket(LOOP) == "event loop (asyncio, uvloop)"
    assert profile_buckets.bucket(["main (x.py:1)"]) == "other"


def test_the_api_module_splits_by_function_and_site_packages_are_not_ours():
    auth = [*LOOP, *HANDLER[:3], "BearerAuth.__call__ (inference/api.py:60)"]
    assert profile_buckets.bucket(auth) == "authentication"
    vendored = [*LOOP, f"helper ({SITE}/inference/thing.py:1)"]
    assert profile_buckets.bucket(vendored) == "event loop (asyncio, uvloop)"


def test_the_table_scales_shares_to_the_cpu_per_request():
    text = profile_buckets.table(Counter({"a": 3, "b": 1}), 2.0, "title")
    lines = text.splitlines()
    assert lines[0] == "title"
    assert lines[2].split()[-2:] == ["75.0%", "1.500"]
    assert lines[3].split()[-2:] == ["25.0%", "0.500"]
    assert lines[-1].split()[-2:] == ["100%", "2.000"]


def test_a_statement_sent_through_the_pool_counts_for_its_step():
    """core/pgpool.py sends the budget read's and the ledger's statements: it is see-through,
    not the handler's own work."""
    pool = [
        "fetch (core/pgpool.py:85)",
        "_fetch (core/pgpool.py:99)",
        "AsyncConnection.execute (psycopg/connection_async.py:308)",
        "wait_async (psycopg/waiting.py:187)",
    ]
    read = ["WalletReads._run (licensing/ledger/budget.py:471)", *pool]
    assert profile_buckets.bucket([*LOOP, *read]) == "budget read (statement, psycopg)"
    commit = [
        "GroupCommit._drain (licensing/ledger/group_commit.py:96)",
        "commit_batch_async (licensing/ledger/store.py:253)",
        *pool,
    ]
    assert profile_buckets.bucket([*LOOP, *commit]) == "ledger: group commit (statement, psycopg)"
    upkeep = ["AsyncConnectionPool._run_maintenance (psycopg_pool/pool_async.py:600)"]
    assert (
        profile_buckets.bucket([*LOOP, *upkeep]) == "psycopg outside a request (the pool's upkeep)"
    )
