"""The transactions review page on a ledger of a million rows (PostgreSQL), before and after
the review indexes (licensing migration 0008).

    .venv/bin/python bench/review.py [--rows 1000000] [--repeat 5] [--keep] [--no-explain]

Creates a throwaway database, migrates it to licensing 0007 (the ledger without the review
indexes) and fills it with one INSERT ... SELECT FROM generate_series: 5 institutions, 20
licenses, 100 API keys, 1,000 end users, 90 days, rows in time order as the gateway appends
them, plus a small school with 500 rows over the same days, then VACUUM ANALYZE. For each
case it loads the transactions admin page as a superuser (Django's test client, in this
process), takes the totals query and the page query the page made, times each (median of
--repeat runs) and prints its EXPLAIN (ANALYZE, BUFFERS); then the time of the whole page and
of the CSV export. Then it migrates to 0008 (timing the index builds), runs VACUUM ANALYZE and
does it all again, and ends with a table of both. The cost of the indexes on the hot path is
measured as the buffers an INSERT of 10,000 ledger rows touches and dirties per row, before
and after (rolled back). Figures: bench/README.md ("The review page")."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

import psycopg

ROOT = Path(__file__).resolve().parent.parent
PG = "postgres://postgres@127.0.0.1:5432"
INSTITUTIONS = 5
LICENSES_PER_INSTITUTION = 4
KEYS = 100  # 5 per license
USERS_PER_KEY = 10  # end users, by the key's license
DAYS = 90


def pg_admin(sql: str) -> None:
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(sql)


def setup_django(db: str) -> None:
    os.environ["DATABASE_URL"] = f"{PG}/{db}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_site.settings")
    os.environ.setdefault("GATEWAY_ACCESS_LOG_LEVEL", "WARNING")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def migrate(target: str) -> float:
    from django.core.management import call_command

    started = time.perf_counter()
    call_command("migrate", "licensing", target, verbosity=0)
    return time.perf_counter() - started


def make_world():
    """Institutions, licenses, keys and end users; returns the arrays the fill draws from."""
    from licensing.access.credentials import api_key_create
    from licensing.access.services import license_create
    from licensing.models import EndUser, JwtIssuer

    keys, key_license, users = [], [], []
    for i in range(1, INSTITUTIONS + 1):
        issuer = None
        for j in range(1, LICENSES_PER_INSTITUTION + 1):
            lic = license_create(
                name=f"bench-{i}-{j}", institution=f"Bench institution {i}", limit=None
            )
            if issuer is None:
                issuer = JwtIssuer.objects.create(
                    institution=lic.institution,
                    license=lic,
                    issuer=f"https://idp-{i}.bench",
                    audience="gateway",
                    algorithms=["HS256"],
                    hs256_secret="x" * 32,
                )
            for k in range(KEYS // (INSTITUTIONS * LICENSES_PER_INSTITUTION)):
                row, _ = api_key_create(license=lic, name=f"key {k}")
                keys.append(row.pk)
                key_license.append(lic.pk)
                for u in range(USERS_PER_KEY):
                    user = EndUser.objects.create(
                        license=lic, issuer=issuer, subject=f"student-{i}-{j}-{k}-{u}"
                    )
                    users.append(user.pk)
    return keys, key_license, users


def _array(values) -> str:
    return "ARRAY[" + ",".join(str(v) for v in values) + "]::bigint[]"


FILL_SQL = """
INSERT INTO licensing_transaction (
    created_at, request_id, license_id, api_key_id, end_user_id, wallet_id, service,
    requested_model, billed_model, provider, connection, status_code, prompt_tokens,
    completion_tokens, total_tokens, images, megapixels, units, credits, metadata, latency_ms,
    upstream_id, outcome, error_code, error_message)
SELECT
    %(start)s::timestamptz + (g::float8 / %(rows)s) * interval '{days} days',
    md5(g::text || 'request'),
    lic[k + 1],
    CASE WHEN by_user THEN NULL ELSE key[k + 1] END,
    CASE WHEN by_user THEN usr[k * {users_per_key} + g %% {users_per_key} + 1] END,
    NULL,
    svc,
    model,
    CASE WHEN outcome = 'denied' THEN '' ELSE model END,
    CASE WHEN outcome = 'denied' AND g %% 2 = 0 THEN ''
         WHEN g %% 5 = 0 THEN 'aggregator' ELSE 'direct' END,
    'default',
    CASE outcome WHEN 'success' THEN 200 WHEN 'client_error' THEN 400
                 WHEN 'denied' THEN 403 ELSE 503 END,
    CASE WHEN outcome = 'success' AND svc <> 'image_generation' THEN 20 + g %% 500 END,
    CASE WHEN outcome = 'success' AND svc IN ('chat_completions', 'responses')
         THEN g %% 300 WHEN outcome = 'success' AND svc = 'embeddings' THEN 0 END,
    CASE WHEN outcome = 'success' AND svc IN ('chat_completions', 'responses')
         THEN 20 + g %% 500 + g %% 300
         WHEN outcome = 'success' AND svc = 'embeddings' THEN 20 + g %% 500 END,
    CASE WHEN outcome = 'success' AND svc = 'image_generation' THEN 1 END,
    CASE WHEN outcome = 'success' AND svc = 'image_generation' THEN 1.0486 END,
    NULL,
    CASE WHEN outcome <> 'success' THEN 0
         WHEN svc = 'image_generation' THEN 40000 ELSE (20 + g %% 800) * 3 END,
    CASE WHEN g %% 2 = 0
         THEN jsonb_build_object('course', 'CS' || (100 + g %% 40), 'section', g %% 7)
         ELSE '{{}}'::jsonb END,
    100 + g %% 900,
    CASE WHEN outcome <> 'success' THEN ''
         WHEN svc = 'chat_completions' THEN 'chatcmpl-' || md5(g::text || 'answer')
         WHEN svc = 'responses' THEN 'resp_' || md5(g::text || 'answer') ELSE '' END,
    outcome,
    CASE outcome WHEN 'client_error' THEN 'provider_rejected' WHEN 'denied' THEN 'policy_denied'
                 WHEN 'failure' THEN 'provider_unavailable' ELSE '' END,
    CASE outcome WHEN 'client_error' THEN 'Invalid value for ''temperature'''
                 WHEN 'denied' THEN '''max_tokens'' must be <= 500'
                 WHEN 'failure' THEN 'Service temporarily unavailable' ELSE '' END
FROM (
    SELECT g, k, by_user,
           CASE WHEN r_svc < 0.60 THEN 'chat_completions' WHEN r_svc < 0.85 THEN 'embeddings'
                WHEN r_svc < 0.95 THEN 'responses' ELSE 'image_generation' END AS svc,
           CASE WHEN r_svc < 0.60 THEN (ARRAY['gpt-4o-mini', 'gpt-4o', 'gpt-4.1-mini'])[g %% 3 + 1]
                WHEN r_svc < 0.85 THEN 'text-embedding-3-small'
                WHEN r_svc < 0.95 THEN 'gpt-4.1' ELSE 'gpt-image-1' END AS model,
           CASE WHEN r_out < 0.94 THEN 'success' WHEN r_out < 0.97 THEN 'client_error'
                WHEN r_out < 0.99 THEN 'denied' ELSE 'failure' END AS outcome,
           lic, key, usr
    FROM (
        SELECT g, floor(random() * {keys})::int AS k, random() < 0.3 AS by_user,
               random() AS r_svc, random() AS r_out
        FROM generate_series(1, %(rows)s) AS g
    ) AS drawn,
    (SELECT {lic} AS lic, {key} AS key, {usr} AS usr) AS ids
) AS rows
"""


def fill(rows: int, world, end: datetime) -> float:
    from django.db import connection

    keys, key_license, users = world
    sql = FILL_SQL.format(
        days=DAYS,
        users_per_key=USERS_PER_KEY,
        keys=len(keys),
        lic=_array(key_license),
        key=_array(keys),
        usr=_array(users),
    )
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SELECT setseed(0.42)")
        cursor.execute(sql, {"start": end - timedelta(days=DAYS), "rows": rows})
    return time.perf_counter() - started


SMALL_SQL = """
INSERT INTO licensing_transaction (
    created_at, request_id, license_id, api_key_id, service, requested_model, billed_model,
    provider, connection, status_code, total_tokens, credits, metadata, latency_ms, upstream_id,
    outcome, error_code, error_message)
SELECT %(end)s::timestamptz - (g::float8 / %(rows)s) * interval '{days} days',
       md5(g::text || 'small'), %(license)s, %(key)s, 'chat_completions', 'gpt-4o-mini',
       'gpt-4o-mini', 'direct', 'default', 200, 100, 300, '{{}}'::jsonb, 100,
       'chatcmpl-' || md5(g::text || 'small'), 'success', '', ''
FROM generate_series(1, %(rows)s) AS g
"""


def fill_small(end: datetime, rows: int = 500) -> None:
    """A small school among the big ones: its newest rows are far apart in time."""
    from django.db import connection

    from licensing.access.credentials import api_key_create
    from licensing.access.services import license_create

    lic = license_create(name="bench-small", institution="Bench small school", limit=None)
    key, _ = api_key_create(license=lic, name="small")
    with connection.cursor() as cursor:
        cursor.execute(
            SMALL_SQL.format(days=DAYS),
            {"end": end, "rows": rows, "license": lic.pk, "key": key.pk},
        )


def vacuum() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE licensing_transaction")


def cases(end: datetime) -> list[tuple[str, dict]]:
    from licensing.models import Institution, License, Transaction

    institution = Institution.objects.get(name="Bench institution 1")
    small = Institution.objects.get(name="Bench small school")
    lic = License.objects.get(name="bench-1-1")
    answer = Transaction.objects.filter(upstream_id__startswith="chatcmpl-").first().upstream_id
    request_id = Transaction.objects.order_by("-id").first().request_id
    day = (end - timedelta(days=10)).replace(hour=0, minute=0, second=0, microsecond=0)
    return [
        ("no filter", {}),
        (
            "institution + 30 days",
            {
                "institution": institution.pk,
                "since": (end - timedelta(days=30)).strftime("%Y-%m-%dT%H:%M"),
                "until": end.strftime("%Y-%m-%dT%H:%M"),
            },
        ),
        (
            "license + 1 day",
            {
                "license": lic.pk,
                "since": day.strftime("%Y-%m-%d"),
                "until": (day + timedelta(days=1)).strftime("%Y-%m-%d"),
            },
        ),
        ("answer-id prefix", {"q": answer[:13]}),
        ("request-id prefix", {"q": request_id[:6]}),
        ("metadata course=CS120", {"q": "course=CS120"}),
        ("institution, all time", {"institution": institution.pk}),
        ("small institution (500 rows)", {"institution": small.pk}),
    ]


def _median_ms(sql: str, repeat: int) -> float:
    from django.db import connection

    times = []
    with connection.cursor() as cursor:
        for _ in range(repeat):
            started = time.perf_counter()
            cursor.execute(sql)
            cursor.fetchall()
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _explain(sql: str) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
        return "\n".join("    " + row[0] for row in cursor.fetchall())


def page_queries(client, params: dict) -> tuple[list[dict], float]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    url = "/admin/licensing/transaction/?" + urlencode(params)
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        response = client.get(url)
        elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code == 200, response.content[:500]
    return captured.captured_queries, elapsed


def export_ms(client, params: dict) -> tuple[float, int]:
    started = time.perf_counter()
    response = client.get("/admin/licensing/transaction/export/?" + urlencode(params))
    lines = sum(chunk.count(b"\n") for chunk in response.streaming_content)
    return (time.perf_counter() - started) * 1000, lines - 1


def _is_page_query(sql: str) -> bool:
    """The rows of the page (a short set is read without LIMIT)."""
    return (
        sql.startswith('SELECT "licensing_transaction"."id"')
        and "ORDER BY" in sql
        and "DATE_TRUNC" not in sql.upper()
    )


def measure(label: str, client, end: datetime, args) -> dict:
    results = {}
    for name, params in cases(end):
        queries, _ = page_queries(client, params)
        totals = next(q["sql"] for q in queries if "SUM(" in q["sql"])
        page = next(q["sql"] for q in queries if _is_page_query(q["sql"]))
        pages = [page_queries(client, params)[1] for _ in range(3)]
        result = {
            "totals": _median_ms(totals, args.repeat),
            "page": _median_ms(page, args.repeat),
            "whole": statistics.median(pages),
            "queries": len(queries),
            "slowest": max(float(q["time"]) * 1000 for q in queries),
        }
        if name in ("institution + 30 days", "license + 1 day"):
            result["export"], result["export_rows"] = export_ms(client, params)
        results[name] = result
        print(
            f"[{label}] {name}: totals {result['totals']:.1f} ms, page query "
            f"{result['page']:.1f} ms, whole page {result['whole']:.0f} ms "
            f"({result['queries']} queries)",
            flush=True,
        )
        if not args.no_explain:
            print(f"  totals: {totals}\n{_explain(totals)}")
            print(f"  page: {page}\n{_explain(page)}", flush=True)
    return results


INSERT_SQL = """
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
INSERT INTO licensing_transaction (
    created_at, request_id, license_id, service, requested_model, billed_model, provider,
    connection, status_code, total_tokens, credits, metadata, latency_ms, upstream_id, outcome,
    error_code, error_message)
SELECT now(), md5(random()::text), (%(licenses)s::bigint[])[1 + g %% 20], 'chat_completions',
       'gpt-4o-mini', 'gpt-4o-mini', 'direct', 'default', 200, 100, 300,
       jsonb_build_object('course', 'CS' || (100 + g %% 40)), 100,
       'chatcmpl-' || md5(random()::text), 'success', '', ''
FROM generate_series(1, %(rows)s) AS g
"""


def insert_cost(rows: int = 10_000, repeat: int = 3) -> dict:
    """The index work of writing ledger rows: shared buffers touched and dirtied per row and
    the server's time per row (median), for one INSERT of `rows` rows, rolled back."""
    from django.db import connection, transaction

    from licensing.models import License

    licenses = list(License.objects.order_by("pk").values_list("pk", flat=True)[:20])
    runs = []
    for _ in range(repeat):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(INSERT_SQL, {"licenses": licenses, "rows": rows})
            plan = cursor.fetchone()[0][0]
            transaction.set_rollback(True)
        top = plan["Plan"]
        runs.append(
            (
                top["Shared Hit Blocks"] + top["Shared Read Blocks"],
                top["Shared Dirtied Blocks"],
                plan["Execution Time"],
            )
        )
    touched, dirtied, ms = (statistics.median(values) for values in zip(*runs, strict=True))
    return {"touched": touched / rows, "dirtied": dirtied / rows, "us": ms * 1000 / rows}


def report(before: dict, after: dict, build: float, writes: tuple[dict, dict]) -> None:
    print(
        "\n| case | totals before | totals after | page query before | page query after "
        "| whole page before | whole page after |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in after:
        b, a = before[name], after[name]
        print(
            f"| {name} | {b['totals']:.1f} ms | {a['totals']:.1f} ms | {b['page']:.1f} ms "
            f"| {a['page']:.1f} ms | {b['whole']:.0f} ms | {a['whole']:.0f} ms |"
        )
    for name, a in after.items():
        if "export" in a:
            rate = a["export_rows"] / (a["export"] / 1000)
            print(
                f"export {name}: {a['export_rows']:,} rows in {a['export']:.0f} ms "
                f"({rate:,.0f} rows/s; before: {before[name]['export']:.0f} ms)"
            )
    print(f"migration 0008 (index builds) on this table: {build:.1f} s")
    for label, cost in zip(("before", "after"), writes, strict=True):
        print(
            f"ledger insert {label}: {cost['touched']:.1f} buffers touched and "
            f"{cost['dirtied']:.2f} dirtied per row, {cost['us']:.1f} us per row (server)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--no-explain", action="store_true")
    args = parser.parse_args()
    db = f"gw_bench_review_{uuid.uuid4().hex[:8]}"
    pg_admin(f'CREATE DATABASE "{db}"')
    try:
        setup_django(db)
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.test import Client

        call_command("migrate", verbosity=0)
        migrate("0007")
        end = datetime.now(UTC).replace(microsecond=0)
        world = make_world()
        print(f"database {db}: filling {args.rows:,} rows ...", flush=True)
        print(f"filled in {fill(args.rows, world, end):.1f} s", flush=True)
        fill_small(end)
        vacuum()
        user = get_user_model().objects.create_superuser("bench", "bench@example.test", "x")
        client = Client()
        client.force_login(user)
        before = measure("before", client, end, args)
        writes_before = insert_cost()
        build = migrate("0008")
        vacuum()
        after = measure("after", client, end, args)
        writes_after = insert_cost()
        report(before, after, build, (writes_before, writes_after))
    finally:
        from django.db import connections

        connections.close_all()
        if args.keep:
            print(f"kept database {db}")
        else:
            pg_admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
