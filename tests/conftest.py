"""Shared fixtures: the gateway served by uvicorn on 127.0.0.1, fake upstreams that speak the
real wire protocols, and the catalog and licenses the tests act on."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from http.cookiejar import DefaultCookiePolicy
from pathlib import Path

import httpx
import pytest
import uvicorn
from django.db import connection

# The shared kit (helpers and fixtures every area uses): tests/kit.py.
pytest_plugins = [
    "tests.kit",
    "tests.fixtures_bridge",
    "tests.fixtures_gemini",
    "tests.fixtures_anthropic",
    "tests.fixtures_bedrock",
    "tests.fixtures_compat",
    "tests.pgbouncer",
]

UPSTREAM_KEY = "sk-upstream-test"

# Fixtures through which a test reaches the pass's database (pytest-django's, and the live
# gateway's, which every end-to-end fixture depends on).
DATABASE_FIXTURES = frozenset(
    {
        "db",
        "transactional_db",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
        "live_server",
        "live_gateway",
    }
)


# CI's SQLite pass (`--sqlite-differences`) runs what can differ between the two databases, not
# the whole suite again (docs/testing.md, "The SQLite pass"): the database tests of the money
# (the ledger's two writers, PostgreSQL's pool and the ORM, the wallets' reads and the spool),
# and the modules (or tests) marked `both_databases`, whose subject is a query or a write that
# differs by database: the admin's, the review's, the usage page's and the management API's
# queries (PostgreSQL-only SQL functions among them), the portal's, settings, run.sh's first
# run and the operator commands. A new test in tests/money is on both passes by itself.
SQLITE_AREAS = frozenset({"money"})
TESTS = Path(__file__).resolve().parent


def pytest_addoption(parser):
    parser.addoption(
        "--sqlite-differences",
        action="store_true",
        help="CI's SQLite pass: only the tests that use the database in the areas where the two "
        "databases differ (SQLITE_AREAS in tests/conftest.py) or marked both_databases; every "
        "other test gives the same result on either database and runs on the PostgreSQL pass",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "both_databases: a database test outside SQLITE_AREAS that CI's SQLite pass runs too",
    )
    _flush_by_delete()
    _flush_keeps_content_types_and_permissions()
    _one_default_tls_context()
    _frames_of_no_file_have_no_module()


# Django's default hasher costs ~0.23 s of CPU a password (PBKDF2, 1,000,000+ rounds), paid by
# every `admin_user` and every user a test makes: MD5 in this process is Django's own advice
# for tests (docs/testing.md). PBKDF2 stays second, so a hash written by a server process the
# suite starts (run.sh's users, gunicorn's workers) still checks here, and what this process
# writes is only ever checked here.
FAST_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]


@pytest.fixture(scope="session", autouse=True)
def _fast_password_hashing():
    from django.test import override_settings

    with override_settings(PASSWORD_HASHERS=FAST_HASHERS):
        yield


def uses_database(item) -> bool:
    if item.get_closest_marker("django_db") is not None:
        return True
    return not DATABASE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def on_the_sqlite_pass(item) -> bool:
    if not uses_database(item):
        return False
    if item.get_closest_marker("both_databases") is not None:
        return True
    return item.path.relative_to(TESTS).parts[0] in SQLITE_AREAS


def _flush_by_delete() -> None:
    """Empty PostgreSQL's tables with DELETE, not TRUNCATE, when a test's data is flushed (every
    test on the live gateway uses `transactional_db`, flushed after it). TRUNCATE takes an
    exclusive lock on each of the ~40 tables and gives each new files, for tables holding a few
    rows: tests/money took 90 s with it, 60 s without (docs/testing.md, CI's time). The tables
    are emptied all the same: Django's foreign keys are checked at commit (DEFERRABLE INITIALLY
    DEFERRED), when every table is empty. Resetting sequences still truncates."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences:
            return truncate(self, style, tables, reset_sequences=True, allow_cascade=allow_cascade)
        delete = f"{style.SQL_KEYWORD('DELETE')} {style.SQL_KEYWORD('FROM')}"
        return [f"{delete} {style.SQL_FIELD(self.quote_name(table))};" for table in tables]

    DatabaseOperations.sql_flush = sql_flush


def _frames_of_no_file_have_no_module() -> None:
    """`inspect.getmodule` of a frame running code of no file (importlib's frozen bootstrap,
    `<string>`) answers None at once, not after matching every loaded module against it.
    scim2-models documents its fields from their source (pydantic's `use_attribute_docstrings`):
    for each generic model it makes (`ListResponse[User]`, ...) pydantic walks the whole stack
    asking `getmodule` of every frame, and each importlib frame scanned the ~5,000 modules a
    collection has loaded: a fifth of a full collection's CPU (py-spy). The answer is the same:
    no module has such a file."""
    import inspect
    import types

    getmodule = inspect.getmodule

    def getmodule_of_a_file(object, _filename=None):
        if isinstance(object, types.FrameType) and object.f_code.co_filename.startswith("<"):
            return None
        return getmodule(object, _filename)

    inspect.getmodule = getmodule_of_a_file


def _one_default_tls_context() -> None:
    """Every httpx client this process makes with the default trust (`verify=True`: each
    `client` fixture, each openai SDK client a test makes) shares one TLS context instead of
    loading certifi's bundle into a new one: ~50 ms of CPU a client on the 2-core machine,
    paid by thousands of tests that speak plain http to 127.0.0.1. The same trust (the cache
    is keyed by what httpx reads: `trust_env`, SSL_CERT_FILE, SSL_CERT_DIR); a context passed
    in, `verify=False` and a client certificate are made as before, and the gateway's own
    clients use contexts of their own (core.outbound)."""
    import os

    from httpx._transports import default

    make = default.create_ssl_context
    made: dict[tuple, object] = {}

    def create_ssl_context(verify=True, cert=None, trust_env=True):
        if verify is not True or cert is not None:
            return make(verify=verify, cert=cert, trust_env=trust_env)
        env = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        key = (trust_env, *env) if trust_env else (False,)
        if key not in made:
            made[key] = make(verify=verify, cert=cert, trust_env=trust_env)
        return made[key]

    default.create_ssl_context = create_ssl_context


# What the post_migrate signal makes (its only receivers: auth's and contenttypes'), left in place
# by the flush after a `transactional_db` test, with the signal sent only when they changed.
KEPT_BY_THE_FLUSH = ("auth_permission", "django_content_type")


def _flush_keeps_content_types_and_permissions() -> None:
    """After each `transactional_db` test Django's flush empties every table, content types and
    permissions too, then sends post_migrate, whose receivers make them again: ~300 rows and
    dozens of queries, 0.11 s of the 0.13 s a flush took (cProfile over tests/api/test_info.py),
    after every test on the live gateway. The flush leaves those two tables alone instead, and
    sends the signal only at the session's first flush and if their rows are no longer those it
    made then (a test changed them): the two tables are then emptied and made again, as
    before. Every other table is
    emptied as before; the rows left are those the next test would have found anyway, under the
    same ids, so ContentType's cache stays right too."""
    from django.core.management.commands import flush
    from django.core.management.sql import emit_post_migrate_signal
    from django.db import connections

    made: dict[str, tuple] = {}

    def rows(connection) -> tuple:
        with connection.cursor() as cursor:
            found = []
            for table in KEPT_BY_THE_FLUSH:
                cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)} ORDER BY id")
                found.append(tuple(cursor.fetchall()))
        return tuple(found)

    def sql_flush(style, connection, reset_sequences=True, allow_cascade=False):
        tables = connection.introspection.django_table_names(
            only_existing=True, include_views=False
        )
        tables = [table for table in tables if table not in KEPT_BY_THE_FLUSH]
        return connection.ops.sql_flush(
            style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
        )

    def emit_if_changed(verbosity, interactive, db, **kwargs):
        connection = connections[db]
        if db in made and rows(connection) == made[db]:
            return
        # The session's first flush, or a test changed them: made again from nothing, as the
        # flush did; what the signal made is what the next flushes compare with.
        with connection.cursor() as cursor:
            for table in KEPT_BY_THE_FLUSH:
                cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")
        emit_post_migrate_signal(verbosity, interactive, db, **kwargs)
        made[db] = rows(connection)

    flush.sql_flush = sql_flush
    flush.emit_post_migrate_signal = emit_if_changed


def pytest_ignore_collect(collection_path, config):
    """CI's SQLite pass is spared importing the modules that cannot hold one of its tests:
    collecting the whole tree imports ~270 test modules and what they import (schemathesis,
    Playwright, the vendors' SDKs), for 860 of 4,800 tests (docs/testing.md, "CI's time").
    Outside SQLITE_AREAS, a module whose text never names `both_databases` cannot carry the
    marker: it is only ever written in the test module itself (tests/ops/test_kit.py checks
    that no helper module hands it out), so what is skipped here would all have been
    deselected. Else None: pytest decides."""
    path = collection_path
    if not config.getoption("--sqlite-differences") or not path.name.startswith("test_"):
        return None
    if path.suffix != ".py" or not path.is_relative_to(TESTS):
        return None
    if path.relative_to(TESTS).parts[0] in SQLITE_AREAS:
        return None
    return True if "both_databases" not in path.read_text(encoding="utf-8") else None


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--sqlite-differences"):
        return
    kept, left = [], []
    for item in items:
        (kept if on_the_sqlite_pass(item) else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


class LiveGateway:
    def __init__(self, application=None):
        if application is None:
            from gateway_site.asgi import application

        # IPPROTO_TCP so that asyncio sets TCP_NODELAY (no delayed-ACK stalls on keep-alive).
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            application, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.loop = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        async def serve():
            self.loop = asyncio.get_running_loop()
            await self.server.serve(sockets=[self.sock])

        asyncio.run(serve())

    def start(self):
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("gateway did not start")
            time.sleep(0.01)

    def stop(self):
        self._close_provider_pools()
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def _close_provider_pools(self):
        """Close the adapters' pools on the server's own loop (aiohttp logs unclosed ones)."""
        from inference.providers import close_adapters

        if self.loop is not None and self.loop.is_running():
            asyncio.run_coroutine_threadsafe(close_adapters(), self.loop).result(timeout=10)


def _close_other_connections():
    """The server's worker threads keep their own connections; the test database cannot be
    dropped while they are open."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


@pytest.fixture(scope="session")
def live_gateway(django_db_setup, django_db_blocker):
    live = LiveGateway()
    live.start()
    yield live
    live.stop()
    with django_db_blocker.unblock():
        _close_other_connections()


@pytest.fixture(scope="session")
def openai_upstream():
    from fake_upstreams import OpenAIFake, serve

    with serve(OpenAIFake(api_key=UPSTREAM_KEY)) as fake:
        yield fake


@pytest.fixture(scope="session")
def openrouter_upstream():
    from fake_upstreams import OpenRouterFake, serve

    with serve(OpenRouterFake(api_key=UPSTREAM_KEY)) as fake:
        yield fake


@pytest.fixture
def upstreams(openai_upstream, openrouter_upstream):
    for fake in (openai_upstream, openrouter_upstream):
        fake.reset()
    yield {"direct": openai_upstream, "aggregator": openrouter_upstream}


@pytest.fixture
def catalog(transactional_db, upstreams):
    """The default catalog, with `direct` and `aggregator` connected to the fakes."""
    from catalog.models import Provider
    from core.localcache import clear_all

    key = (connection.vendor, connection.settings_dict["NAME"])
    key += tuple(upstreams[slug].base_url for slug in ("direct", "aggregator"))
    saved = _CATALOG_ROWS.get(key)
    if saved is None or Provider.objects.exists():
        _CATALOG_ROWS[key] = _make_catalog(upstreams)
    else:
        _copy_catalog(saved)
    clear_all()
    return upstreams


# The default catalog's rows as the services made them for the first `catalog` fixture of the
# process (per database and fakes' URLs): every later one gets copies in four INSERTs, not the
# services' ~25 statements and checks (docs/testing.md, "The setups and flushes"). The services
# are tested where they are the subject (tests/providers/test_catalog_commands.py,
# tests/ops/test_commands.py).
_CATALOG_ROWS: dict[tuple, tuple[list, ...]] = {}


def _catalog_tables():
    from catalog.models import Connection, Model, Provider, ProviderModel

    return Provider, Model, Connection, ProviderModel


def _make_catalog(upstreams) -> tuple[list, ...]:
    from catalog.services import catalog_load_defaults, connection_configure

    catalog_load_defaults()
    for slug in ("direct", "aggregator"):
        connection_configure(
            provider_slug=slug, base_url=upstreams[slug].base_url, api_key=UPSTREAM_KEY
        )
    return tuple(list(table.objects.order_by("pk")) for table in _catalog_tables())


def _copy_catalog(saved: tuple[list, ...]) -> None:
    """The saved rows again, each with a new id, as the services would give it (a connection's
    new id and `updated_at` are a new circuit and a new pool, as before)."""
    from django.db import transaction

    tables = _catalog_tables()
    ids: dict[type, dict[int, int]] = {}
    with transaction.atomic():
        for table, rows in zip(tables, saved, strict=True):
            made = table.objects.bulk_create([_fresh(row, ids) for row in rows])
            ids[table] = {old.pk: new.pk for old, new in zip(rows, made, strict=True)}


def _fresh(row, ids: dict[type, dict[int, int]]):
    """A copy of `row` without its id, its foreign keys pointing at the copies made before."""
    values = {}
    for field in row._meta.concrete_fields:
        if field.primary_key:
            continue
        value = getattr(row, field.attname)
        if field.is_relation:
            value = ids[field.related_model][value]
        values[field.attname] = value
    return type(row)(**values)


@pytest.fixture
def make_license(transactional_db):
    from licensing.access.services import license_create

    def make(name="test-license", **kwargs):
        return license_create(name=name, **kwargs)

    return make


@pytest.fixture
def make_key():
    from licensing.access.credentials import api_key_create

    def make(license, **kwargs):
        return api_key_create(license=license, **kwargs)[1]

    return make


@pytest.fixture
def license(make_license):
    return make_license()


@pytest.fixture
def api_key(license, make_key):
    return make_key(license)


@pytest.fixture
def gateway(live_gateway):
    yield live_gateway
    from tests.kit import drain_background_writes  # imported once pytest_plugins rewrote it

    drain_background_writes()  # before the test's database is flushed (and blocked) under them


@pytest.fixture
def client(gateway):
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        yield http


@pytest.fixture(scope="module")
def keep_alive_http():
    """One keep-alive `requests` session for a schemathesis run's few thousand requests (most
    are its coverage phase's; tests/api/test_schemathesis.py, tests/console/
    test_manage_schemathesis.py): without one, each case.call opened (and the live server
    accepted) a connection of its own, and `requests` looked for proxies and .netrc in the
    environment again. The same requests go out: no cookie is kept between them, and no proxy
    is wanted for 127.0.0.1."""
    import requests

    with requests.Session() as session:
        session.trust_env = False
        session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
        yield session


@pytest.fixture
def auth(api_key):
    return {"Authorization": f"Bearer {api_key}"}


# --- image and native-embeddings providers ------------------------------------------------------

AWS_ACCESS_KEY = "AKIDEXAMPLETEST"
AWS_SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_REGION = "us-east-1"


def connect_cloud(fake) -> None:
    """`cloud/default` on the Bedrock fake, in its region, with its credentials."""
    from catalog.services import connection_configure

    connection_configure(
        provider_slug="cloud",
        base_url=fake.base_url,
        region=AWS_REGION,
        aws_access_key_id=AWS_ACCESS_KEY,
        aws_secret_access_key=AWS_SECRET_KEY,
    )


@pytest.fixture(scope="session")
def bedrock_upstream():
    from fake_upstreams import BedrockFake, serve

    with serve(
        BedrockFake(access_key=AWS_ACCESS_KEY, secret_key=AWS_SECRET_KEY, region=AWS_REGION)
    ) as fake:
        yield fake


@pytest.fixture(scope="session")
def gemini_upstream():
    from fake_upstreams import GeminiFake, serve

    with serve(GeminiFake(api_key=UPSTREAM_KEY)) as fake:
        yield fake


@pytest.fixture
def all_upstreams(catalog, bedrock_upstream, gemini_upstream):
    """`catalog`, plus `cloud` and `multimodal` connected to their fakes. Their catalog rows
    stay as the default catalog has them (inactive for images); tests enable what they need."""
    from catalog.services import connection_configure
    from core.localcache import clear_all

    for fake in (bedrock_upstream, gemini_upstream):
        fake.reset()
    connect_cloud(bedrock_upstream)
    connection_configure(
        provider_slug="multimodal", base_url=gemini_upstream.base_url, api_key=UPSTREAM_KEY
    )
    clear_all()
    return {**catalog, "cloud": bedrock_upstream, "multimodal": gemini_upstream}


@pytest.fixture
def activate_rows():
    """Enable the provider rows of the given models (as an operator would in the admin)."""
    from catalog.models import ProviderModel

    def activate(*model_ids):
        for row in ProviderModel.objects.filter(model__model_id__in=model_ids):
            row.active = True
            row.save()

    return activate


# --- search and fetch -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def brave_upstream():
    from fake_upstreams import BraveFake, serve

    with serve(BraveFake(api_key=UPSTREAM_KEY)) as fake:
        yield fake


@pytest.fixture(scope="session")
def openalex_upstream():
    from fake_upstreams import OpenAlexFake, serve

    with serve(OpenAlexFake(api_key=UPSTREAM_KEY)) as fake:
        yield fake


@pytest.fixture
def search_upstreams(catalog, brave_upstream, openalex_upstream):
    """`catalog`, plus `websearch` (Brave, with a key) and `academic` (OpenAlex, keyless)
    connected to their fakes."""
    from catalog.services import connection_configure
    from core.localcache import clear_all

    for fake in (brave_upstream, openalex_upstream):
        fake.reset()
    connection_configure(
        provider_slug="websearch", base_url=brave_upstream.base_url, api_key=UPSTREAM_KEY
    )
    connection_configure(provider_slug="academic", base_url=openalex_upstream.base_url)
    clear_all()
    return {**catalog, "websearch": brave_upstream, "academic": openalex_upstream}


@pytest.fixture(scope="session")
def website_server():
    from fake_upstreams import WebsiteFake, serve

    with serve(WebsiteFake()) as fake:
        yield fake


@pytest.fixture
def website(website_server, settings):
    """A web site on 127.0.0.1 the fetcher may reach: the test switch opens exactly that
    address (127.0.0.1/32) and the site's port, nothing else."""
    website_server.reset()
    port = int(website_server.origin.rsplit(":", 1)[1])
    settings.GATEWAY = {
        **settings.GATEWAY,
        "FETCH_ALLOW_PRIVATE": "127.0.0.1/32",
        "FETCH_ALLOWED_PORTS": frozenset({80, 443, port}),
    }
    return website_server


# --- the browser tests: the README's server and one Chromium page per module -------------------


@pytest.fixture(scope="session")
def readme_server():
    """`bash scripts/run.sh` as the README starts it, once for the session's browser modules
    (each start is ~10 s of CPU: migrations, static files, the demo, three simulators)."""
    from tests.browser import running_server

    with running_server() as run:
        yield run


@pytest.fixture(scope="session")
def readme_lms():
    """The LMS (fake_upstreams/lti.py on 127.0.0.1) of the browser modules that launch from one:
    tests/lti/test_browser_lti.py and tests/portal/test_browser_course.py, each with courses and
    people of its own."""
    from fake_upstreams.lti import LtiFake
    from fake_upstreams.server import FakeServer

    server = FakeServer(LtiFake(client_id="gw-moodle", deployment_id="7"))
    server.start()
    yield server.app
    server.stop()


@pytest.fixture(scope="session")
def lms_readme_server(readme_lms):
    """`bash scripts/run.sh` as the README starts it, with the LMS's address reachable through
    the outbound guard and its platform configured with `manage.py configure_lti`, once for the
    modules that launch from it (a start is ~10 s of CPU). Its `out` is what configure_lti
    printed."""
    from contextlib import ExitStack
    from urllib.parse import urlsplit

    from tests import browser as browser_helpers
    from tests.browser import running_server
    from tests.ports import run_script_ports

    ports = run_script_ports()
    env = {
        "GATEWAY_OUTBOUND_ALLOW": "127.0.0.1/32",
        "GATEWAY_OUTBOUND_ALLOWED_PORTS": f"443,{urlsplit(readme_lms.origin).port}",
        "GATEWAY_PUBLIC_URL": f"http://127.0.0.1:{ports['PORT']}",
    }
    # The ports and the environment are run.sh's at its start only: the patch ends there, so the
    # session's other servers start with their own.
    with ExitStack() as stack:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(browser_helpers, "run_script_ports", lambda: ports)
            for name, value in env.items():
                patch.setenv(name, value)
            run = stack.enter_context(running_server())
            _, out, _ = run.manage_many(  # one process, not one per command
                ("create_license", "Demo courses", "--institution", "Demo school",
                 "--limit", "2000000", "--period", "monthly", "--strategy", "per_user"),
                ("configure_lti", "Demo school", "--issuer", readme_lms.issuer,
                 "--client-id", "gw-moodle", "--deployment-id", "7",
                 "--jwks-url", readme_lms.jwks_url, "--auth-url", readme_lms.auth_url,
                 "--license", "Demo courses", "--allowance", "500000",
                 "--allowance-period", "week"),
                # The school's zone and money, as the course page shows them.
                ("shell", "-c", "from licensing.models import Institution\n"
                 "Institution.objects.filter(name='Demo school').update(\n"
                 "    timezone='Europe/Berlin', currency='EUR',\n"
                 "    micro_credits_per_currency_unit=1_000_000)\n"),
            )  # fmt: skip
            run.configured = out
        yield run


@pytest.fixture(scope="module")
def server(readme_server):
    """The session's README server for one module (its own attributes; its own institution and
    users are the module's to make)."""
    from tests.browser import SharedServer

    return SharedServer(readme_server)


@pytest.fixture(scope="module")
def page(server):
    from tests.browser import browser_page

    with browser_page() as page:
        yield page
