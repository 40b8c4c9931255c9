"""The gateway's environment: every variable it reads, typed and validated, read once.

`get_config()` reads the process environment on its first call (gateway_site.settings makes it,
before anything else) and keeps the result; nothing else in the apps reads `os.environ` for a
setting. A field's name is its variable's name and its description the one-line meaning; the
configuration docs (docs/configuration.md) are checked against these fields by
tests/ops/test_config_docs.py.
Not settings, and so not here: PROMETHEUS_MULTIPROC_DIR (gateway_site.metrics_setup hands it to
prometheus-client and the workers), the inputs of two commands (DJANGO_SUPERUSER_PASSWORD,
configure_connection's named variables) and the OpenTelemetry SDK's own OTEL_* variables.

A bad value stops the process at start with one line per bad variable, all of them together
(`GATEWAY_UPSTREAM_POOL_WAIT: not a number: 'abc'`): `exit_on_bad_environment()` in the entry
points (gateway_site.asgi, gunicorn_conf), manage.py for its commands.

The settings module turns this object into Django's settings once; the request path reads those
(`settings.GATEWAY["X"]`, a plain dict typed by `GatewaySettings`), never this parsing.

Lives in `core` (it imports neither Django's settings nor any app) so that core.metrics and the
server's entry points, which run before Django is set up, read the same object.
"""

from __future__ import annotations

import functools
import ipaddress
import ssl
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from pydantic import BeforeValidator, Field, ValidationError, field_validator
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

BASE_DIR = Path(__file__).resolve().parent.parent
KiB = 1024
MiB = 1024 * KiB
# GATEWAY_PG_PREPARE_THRESHOLD=auto: the count it prepares after, until a pooler loses one.
AUTO_PREPARE_THRESHOLD = 2


def _empty_is_default(value: Any) -> Any:
    """`VAR=` (set but empty) means the default, as `os.environ.get(VAR) or default` did."""
    if isinstance(value, str) and not value.strip():
        raise PydanticUseDefault()
    return value


def _upper(value: Any) -> Any:
    return value.strip().upper() if isinstance(value, str) else value


def _split(value: Any) -> Any:
    """A comma-separated list; blanks between commas are dropped."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class _Named(ValueError):
    """A problem whose message names the bad part of the value itself."""


def _cidrs(value: str) -> str:
    """Checked at start so that a typo stops the server instead of failing every request."""
    for part in filter(None, (p.strip() for p in value.split(","))):
        try:
            ipaddress.ip_network(part)
        except ValueError:
            raise _Named(f"not a CIDR network: {part!r}") from None
    return value


def _ports(value: frozenset[int]) -> frozenset[int]:
    bad = sorted(p for p in value if not 1 <= p <= 65535)
    if bad:
        raise _Named(f"not a TCP port: {bad[0]}")
    return value


EmptyIsDefault = BeforeValidator(_empty_is_default)
CommaList = Annotated[list[str], NoDecode, BeforeValidator(_split)]
PortSet = Annotated[frozenset[int], NoDecode, BeforeValidator(_split)]
# Whole numbers are bounded too: `2**64` from a typo would pass `ge` alone and overflow where
# the value goes (a PostgreSQL bigint, a C int in a pool or a socket library, a timedelta).
INT_MAX = 2**31 - 1
Bytes = Annotated[int, Field(ge=0, le=2**63 - 1)]  # what a 64-bit signed integer holds
# A duration is finite and at most a year: `1e400` reads as infinity, and a timedelta, a lease's
# end in milliseconds or a deadline built from a larger one overflows on the request path.
YEAR = 366 * 24 * 3600
Seconds = Annotated[float, Field(ge=0, le=YEAR, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=1, le=INT_MAX)]
DAYS_MAX = 36_500  # a century; timedelta(days=...) overflows past 999,999,999


class Config(BaseSettings):
    """One field per environment variable (docs/configuration.md)."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", frozen=True)

    # --- Django -----------------------------------------------------------------------------
    DATABASE_URL: Annotated[str, EmptyIsDefault] = Field(
        f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
        description="the database, e.g. postgres://user@host:5432/gateway (psycopg 3)",
    )
    SECRET_KEY: str = Field(
        "insecure-dev-key-set-SECRET_KEY-in-production",
        description="Django's secret key; a fixed development fallback (check --deploy errs)",
    )
    DEBUG: Annotated[bool, EmptyIsDefault] = Field(False, description="Django debug pages")
    ALLOWED_HOSTS: CommaList = Field(["*"], description="host names served, comma-separated")
    REDIS_URL: Annotated[str | None, EmptyIsDefault] = Field(
        None, description="Redis for cache invalidation, fair-use counters and the live feed"
    )
    LOG_FORMAT: Annotated[Literal["json", "text"] | None, EmptyIsDefault] = Field(
        None, description="json or text log lines (unset: json, text with DEBUG)"
    )
    STATIC_ROOT: Annotated[Path, EmptyIsDefault] = Field(
        BASE_DIR / "var" / "static", description="where collectstatic puts the static files"
    )
    SESSION_COOKIE_SECURE: Annotated[bool, EmptyIsDefault] = Field(
        False, description="the admin's session cookie only over HTTPS"
    )
    CSRF_COOKIE_SECURE: Annotated[bool, EmptyIsDefault] = Field(
        False, description="the admin's CSRF cookie only over HTTPS"
    )
    SECURE_SSL_REDIRECT: Annotated[bool, EmptyIsDefault] = Field(
        False, description="the admin redirects plain http to https"
    )
    SECURE_HSTS_SECONDS: Annotated[int, Field(ge=0, le=INT_MAX)] = Field(
        0, description="HSTS max-age on the admin's answers"
    )
    SECURE_HSTS_INCLUDE_SUBDOMAINS: Annotated[bool, EmptyIsDefault] = Field(
        False, description="HSTS includeSubDomains"
    )
    SECURE_HSTS_PRELOAD: Annotated[bool, EmptyIsDefault] = Field(False, description="HSTS preload")
    SECURE_PROXY_SSL_HEADER: Annotated[str | None, EmptyIsDefault] = Field(
        None, description="the header a TLS proxy sets to https, e.g. X-Forwarded-Proto"
    )
    CSRF_TRUSTED_ORIGINS: CommaList = Field([], description="origins trusted for CSRF")
    EMAIL_BACKEND: str = Field(
        "django.core.mail.backends.console.EmailBackend", description="Django's email backend"
    )
    EMAIL_HOST: str = Field("localhost", description="SMTP server")
    EMAIL_PORT: Annotated[int, Field(ge=1, le=65535)] = Field(25, description="SMTP port")
    EMAIL_HOST_USER: str = Field("", description="SMTP login")
    EMAIL_HOST_PASSWORD: str = Field("", description="SMTP password")
    EMAIL_USE_TLS: Annotated[bool, EmptyIsDefault] = Field(False, description="SMTP STARTTLS")
    EMAIL_USE_SSL: Annotated[bool, EmptyIsDefault] = Field(False, description="SMTP over TLS")
    DEFAULT_FROM_EMAIL: str = Field("gateway@localhost", description="sender of budget alerts")

    # --- The gateway --------------------------------------------------------------------------
    GATEWAY_CACHE_TTL: Seconds = Field(5.0, description="seconds an in-process cache entry lives")
    GATEWAY_INVALIDATION_FILE: Annotated[Path, EmptyIsDefault] = Field(
        BASE_DIR / "var" / "cache-generation",
        description="without REDIS_URL: the file through which one host's processes invalidate",
    )
    GATEWAY_ENCRYPTION_KEYS: CommaList = Field(
        [], description="Fernet keys of the stored secrets: the first encrypts, all decrypt"
    )
    GATEWAY_ADMIN_LOGIN_FAILURES: Count = Field(
        5, description="failed admin logins of one username from one address before a lock"
    )
    GATEWAY_ADMIN_LOCKOUT_MINUTES: Seconds = Field(15.0, description="how long that lock lasts")
    GATEWAY_MAX_BODY_BYTES: Bytes = Field(8 * MiB, description="largest API request body")
    GATEWAY_AUDIT_LOG_DAYS: Annotated[int | None, Field(ge=1, le=DAYS_MAX), EmptyIsDefault] = Field(
        730, description="days the gateway-wide audit rows (no institution) are kept"
    )
    GATEWAY_ACCESS_LOG_LEVEL: Annotated[
        Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(_upper)
    ] = Field("INFO", description="level of the per-request access log (WARNING silences it)")
    GATEWAY_UPSTREAM_CONNECT_TIMEOUT: Seconds = Field(5.0, description="upstream connect time-out")
    GATEWAY_UPSTREAM_TIMEOUT: Seconds = Field(120.0, description="upstream time-out")
    GATEWAY_UPSTREAM_MAX_CONNECTIONS: Count = Field(
        100, description="connections per provider connection row and process"
    )
    GATEWAY_UPSTREAM_KEEPALIVE: Seconds = Field(4.0, description="seconds an idle one is kept")
    GATEWAY_UPSTREAM_POOL_WAIT: Seconds = Field(
        10.0, description="seconds a call may wait for a pool connection before the 503"
    )
    GATEWAY_UPSTREAM_LICENSE_SHARE: Annotated[float, Field(gt=0, le=1)] = Field(
        0.5, description="share of a pool's connections one license may hold at once"
    )
    GATEWAY_ANSWER_MAX_BYTES_EMBEDDINGS: Bytes = Field(192 * KiB, description="per input")
    GATEWAY_ANSWER_MAX_BYTES_IMAGES: Bytes = Field(32 * MiB, description="per image")
    GATEWAY_ANSWER_MAX_BYTES_CHAT: Bytes = Field(64 * MiB, description="a non-streamed answer")
    GATEWAY_ANSWER_MAX_BYTES_STREAM: Bytes = Field(256 * MiB, description="a stream in all")
    GATEWAY_ANSWER_MAX_BYTES_EVENT: Bytes = Field(16 * MiB, description="one stream event")
    GATEWAY_ANSWER_MAX_BYTES_DEFAULT: Bytes = Field(16 * MiB, description="any other answer")
    GATEWAY_STREAM_USAGE_GRACE: Seconds = Field(
        2.0, description="seconds a left stream's upstream is still read for its usage event"
    )
    GATEWAY_FAILOVER_ATTEMPTS: Count = Field(
        3, description="provider calls one request may make (the first and its failovers)"
    )
    GATEWAY_FAILOVER_BUDGET: Seconds = Field(
        30.0, description="seconds after which no further failover attempt is started"
    )
    GATEWAY_BUDGET_RESERVATION_SECONDS: Seconds = Field(
        900.0, description="seconds a request's budget reservation outlives a worker that died"
    )
    GATEWAY_BUDGET_LEASE_SECONDS: Seconds = Field(
        0.5, description="seconds a busy wallet's lease admits requests for (0: no leases)"
    )
    GATEWAY_CRASH_POINTS: CommaList = Field(
        [], description="tests only: the points of the money path where the process kills itself"
    )
    GATEWAY_CIRCUIT_FAILURES: Count = Field(
        5, description="consecutive retryable failures that open a connection's circuit"
    )
    GATEWAY_CIRCUIT_COOLDOWN: Seconds = Field(
        30.0, description="seconds an open circuit skips its connection before one probe"
    )
    GATEWAY_CURRENCY: Annotated[str, Field(pattern=r"^[A-Z]{3}$"), EmptyIsDefault] = Field(
        "USD", description="ISO 4217 code of the money shown beside micro-credits"
    )
    GATEWAY_CREDITS_PER_CURRENCY_UNIT: Count = Field(
        1_000_000,
        description="micro-credits worth one unit of GATEWAY_CURRENCY (the catalog's list "
        "prices: 1 USD = 1,000,000); an institution may set its own",
    )
    GATEWAY_GC_THRESHOLD: str = Field(
        "20000,20,50",
        description="the cyclic collector's thresholds in a server process; default: Python's",
    )
    GATEWAY_PG_POOL_SIZE: Count = Field(8, description="hot-path PostgreSQL connections")
    GATEWAY_PG_ORM_POOL_SIZE: Count = Field(6, description="ORM PostgreSQL connections")
    GATEWAY_PG_ORM_POOL: Annotated[bool, EmptyIsDefault] = Field(
        True, description="the ORM's connection pool (manage.py turns it off for its commands)"
    )
    GATEWAY_PG_POOL_TIMEOUT: Seconds = Field(2.0, description="seconds to wait for one")
    GATEWAY_PG_PREPARE_THRESHOLD: str = Field(
        "auto",
        description="executions before a statement is prepared; none: never; auto: 2, and "
        "never once a transaction pooler lost one",
    )
    GATEWAY_PG_SERVER_SIDE_CURSORS: Annotated[bool, EmptyIsDefault] = Field(
        True, description="off behind a PgBouncer in transaction mode"
    )
    GATEWAY_LEDGER_SPOOL_DIR: Annotated[Path, EmptyIsDefault] = Field(
        BASE_DIR / "var" / "ledger-spool", description="where ledger rows wait for the database"
    )
    GATEWAY_LEDGER_SPOOL_MIN_FREE_BYTES: Bytes = Field(
        64 * MiB, description="free space the spool needs for a call during an outage"
    )
    GATEWAY_LEDGER_SPOOL_PROBE_SECONDS: Seconds = Field(
        1.0, description="how long that answer is kept"
    )
    GATEWAY_FETCH_ALLOW_PRIVATE: str = Field(
        "", description="/v1/fetch: CIDR networks let through although not public"
    )
    GATEWAY_FETCH_ALLOWED_PORTS: PortSet = Field(
        frozenset({80, 443}), description="/v1/fetch: ports it may connect to"
    )
    GATEWAY_FETCH_TIMEOUT: Seconds = Field(15.0, description="/v1/fetch: seconds per URL")
    GATEWAY_FETCH_MAX_BYTES: Bytes = Field(5 * MiB, description="/v1/fetch: body per URL")
    GATEWAY_FETCH_MAX_TOTAL_BYTES: Bytes = Field(
        20 * MiB, description="/v1/fetch: bodies of one request at once"
    )
    GATEWAY_FETCH_MAX_PDF_PAGES: Annotated[int, Field(ge=0, le=INT_MAX)] = Field(
        1000, description="/v1/fetch: pages of a PDF"
    )
    GATEWAY_OUTBOUND_ALLOW: str = Field(
        "", description="admin-set URLs: CIDR networks they may reach although not public"
    )
    GATEWAY_OUTBOUND_ALLOWED_PORTS: PortSet = Field(
        frozenset({443}), description="admin-set URLs: ports they may name"
    )
    GATEWAY_EXTRA_CA_CERTS: Annotated[Path | None, EmptyIsDefault] = Field(
        None, description="admin-set URLs: a PEM file of CA certificates trusted besides certifi's"
    )
    GATEWAY_PUBLIC_URL: Annotated[
        str, Field(pattern=r"^https?://[A-Za-z0-9.\-\[\]:]+(/[!-~]*)?$"), EmptyIsDefault
    ] = Field(
        "http://127.0.0.1:8000",
        description="the gateway's URL as browsers reach it (SSO redirect URIs are built on it)",
    )
    GATEWAY_XMLSEC1: Annotated[str, EmptyIsDefault] = Field(
        "/usr/bin/xmlsec1",
        description="the xmlsec1 program SAML sign-in checks signatures with (docs/saml.md)",
    )
    GATEWAY_METRICS: Annotated[bool, EmptyIsDefault] = Field(
        True, description="off: nothing recorded, /metrics answers 404"
    )
    GATEWAY_METRICS_FLUSH_SECONDS: Seconds = Field(
        1.0, description="seconds a worker's metrics wait in memory before its files are written"
    )
    GATEWAY_METRICS_ALLOW: str = Field(
        "127.0.0.0/8,::1/128", description="CIDR networks that may scrape /metrics"
    )
    GATEWAY_METRICS_TOKEN: str = Field("", description="bearer token that opens /metrics")
    GATEWAY_WORKERS: Annotated[int | None, Field(ge=1, le=1024), EmptyIsDefault] = Field(
        None, description="gunicorn worker processes (unset: one per core)"
    )
    FORWARDED_ALLOW_IPS: str = Field(
        "", description="the proxies whose X-Forwarded-* headers are believed (gunicorn, uvicorn)"
    )
    # OpenTelemetry's SDK reads its own OTEL_* variables; these two decide whether it is loaded.
    OTEL_EXPORTER_OTLP_ENDPOINT: str = Field("", description="the OTLP/HTTP collector: tracing on")
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: str = Field(
        "", description="the full traces URL instead: tracing on"
    )
    OTEL_SERVICE_NAME: Annotated[str, EmptyIsDefault] = Field(
        "inference-gateway", description="the traces' service.name"
    )

    _cidr_fields = field_validator(
        "GATEWAY_FETCH_ALLOW_PRIVATE", "GATEWAY_OUTBOUND_ALLOW", "GATEWAY_METRICS_ALLOW"
    )(_cidrs)
    _port_fields = field_validator("GATEWAY_FETCH_ALLOWED_PORTS", "GATEWAY_OUTBOUND_ALLOWED_PORTS")(
        _ports
    )

    @field_validator("GATEWAY_EXTRA_CA_CERTS")
    @classmethod
    def _extra_ca_certs(cls, value: Path | None) -> Path | None:
        """Loaded once at start so that a wrong path or a file holding no certificate stops the
        server, instead of every sign-in failing later with a TLS error."""
        if value is None:
            return None
        try:
            context = ssl.create_default_context(cafile=str(value))
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise _Named(
                f"not a readable PEM file of CA certificates: {str(value)!r} ({exc})"
            ) from None
        if not context.get_ca_certs():
            raise _Named(f"holds no CA certificate: {str(value)!r}")
        return value.resolve()

    @field_validator("GATEWAY_GC_THRESHOLD")
    @classmethod
    def _gc_threshold(cls, value: str) -> str:
        value = value.strip()
        if value.lower() in ("", "default"):
            return "default"
        try:
            thresholds = [int(part) for part in value.split(",")]
        except ValueError:
            thresholds = []
        if not 1 <= len(thresholds) <= 3 or min(thresholds) < 1:
            raise ValueError("not 1 to 3 positive integers or 'default'")
        return value

    @field_validator("GATEWAY_PG_PREPARE_THRESHOLD")
    @classmethod
    def _prepare_threshold(cls, value: str) -> str:
        value = value.strip().lower()
        if value in ("", "auto"):
            return "auto"
        if value == "none" or value.isdigit():
            return value
        raise ValueError("not a count, 'none' or 'auto'")

    # --- Derived values, so that their readers parse nothing -----------------------------------
    @property
    def log_format(self) -> Literal["json", "text"]:
        return self.LOG_FORMAT or ("text" if self.DEBUG else "json")

    @property
    def tracing_configured(self) -> bool:
        return bool(
            self.OTEL_EXPORTER_OTLP_ENDPOINT.strip()
            or self.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT.strip()
        )

    @property
    def gc_thresholds(self) -> tuple[int, ...] | None:
        """None: leave Python's own."""
        if self.GATEWAY_GC_THRESHOLD == "default":
            return None
        return tuple(int(part) for part in self.GATEWAY_GC_THRESHOLD.split(","))

    @property
    def pg_prepare_threshold(self) -> int | None:
        value = self.GATEWAY_PG_PREPARE_THRESHOLD
        if value == "auto":
            return AUTO_PREPARE_THRESHOLD
        return None if value == "none" else int(value)

    @property
    def pg_prepare_auto(self) -> bool:
        """Preparing stops for the process at the first statement a pooler lost (pgpool)."""
        return self.GATEWAY_PG_PREPARE_THRESHOLD == "auto"

    def gateway(self) -> GatewaySettings:
        """`settings.GATEWAY`: what the request path reads, built once."""
        return {
            "CACHE_TTL": self.GATEWAY_CACHE_TTL,
            "UPSTREAM_CONNECT_TIMEOUT": self.GATEWAY_UPSTREAM_CONNECT_TIMEOUT,
            "UPSTREAM_TIMEOUT": self.GATEWAY_UPSTREAM_TIMEOUT,
            "UPSTREAM_MAX_CONNECTIONS": self.GATEWAY_UPSTREAM_MAX_CONNECTIONS,
            "UPSTREAM_KEEPALIVE": self.GATEWAY_UPSTREAM_KEEPALIVE,
            "UPSTREAM_POOL_WAIT": self.GATEWAY_UPSTREAM_POOL_WAIT,
            "UPSTREAM_LICENSE_SHARE": self.GATEWAY_UPSTREAM_LICENSE_SHARE,
            "ANSWER_MAX_BYTES": {
                "embeddings": self.GATEWAY_ANSWER_MAX_BYTES_EMBEDDINGS,
                "images": self.GATEWAY_ANSWER_MAX_BYTES_IMAGES,
                "chat": self.GATEWAY_ANSWER_MAX_BYTES_CHAT,
                "stream": self.GATEWAY_ANSWER_MAX_BYTES_STREAM,
                "event": self.GATEWAY_ANSWER_MAX_BYTES_EVENT,
                "default": self.GATEWAY_ANSWER_MAX_BYTES_DEFAULT,
            },
            "LEDGER_SPOOL_DIR": str(self.GATEWAY_LEDGER_SPOOL_DIR),
            "LEDGER_SPOOL_MIN_FREE_BYTES": self.GATEWAY_LEDGER_SPOOL_MIN_FREE_BYTES,
            "LEDGER_SPOOL_PROBE_SECONDS": self.GATEWAY_LEDGER_SPOOL_PROBE_SECONDS,
            "FETCH_ALLOW_PRIVATE": self.GATEWAY_FETCH_ALLOW_PRIVATE,
            "FETCH_ALLOWED_PORTS": self.GATEWAY_FETCH_ALLOWED_PORTS,
            "FETCH_TIMEOUT": self.GATEWAY_FETCH_TIMEOUT,
            "FETCH_MAX_BYTES": self.GATEWAY_FETCH_MAX_BYTES,
            "FETCH_MAX_TOTAL_BYTES": self.GATEWAY_FETCH_MAX_TOTAL_BYTES,
            "FETCH_MAX_PDF_PAGES": self.GATEWAY_FETCH_MAX_PDF_PAGES,
            "STREAM_USAGE_GRACE": self.GATEWAY_STREAM_USAGE_GRACE,
            "FAILOVER_ATTEMPTS": self.GATEWAY_FAILOVER_ATTEMPTS,
            "BUDGET_RESERVATION_SECONDS": self.GATEWAY_BUDGET_RESERVATION_SECONDS,
            "BUDGET_LEASE_SECONDS": self.GATEWAY_BUDGET_LEASE_SECONDS,
            "FAILOVER_BUDGET": self.GATEWAY_FAILOVER_BUDGET,
            "CIRCUIT_FAILURES": self.GATEWAY_CIRCUIT_FAILURES,
            "CIRCUIT_COOLDOWN": self.GATEWAY_CIRCUIT_COOLDOWN,
            "CURRENCY": self.GATEWAY_CURRENCY,
            "CREDITS_PER_CURRENCY_UNIT": self.GATEWAY_CREDITS_PER_CURRENCY_UNIT,
            "OUTBOUND_ALLOW": self.GATEWAY_OUTBOUND_ALLOW,
            "OUTBOUND_ALLOWED_PORTS": self.GATEWAY_OUTBOUND_ALLOWED_PORTS,
            "EXTRA_CA_CERTS": str(self.GATEWAY_EXTRA_CA_CERTS or "") or None,
        }


AnswerKind = Literal["embeddings", "images", "chat", "stream", "event", "default"]


class AnswerMaxBytes(TypedDict):
    embeddings: int
    images: int
    chat: int
    stream: int
    event: int
    default: int


class GatewaySettings(TypedDict):
    """`settings.GATEWAY`, key by key (the meanings: the Config fields `GATEWAY_<key>`)."""

    CACHE_TTL: float
    UPSTREAM_CONNECT_TIMEOUT: float
    UPSTREAM_TIMEOUT: float
    UPSTREAM_MAX_CONNECTIONS: int
    UPSTREAM_KEEPALIVE: float
    UPSTREAM_POOL_WAIT: float
    UPSTREAM_LICENSE_SHARE: float
    ANSWER_MAX_BYTES: AnswerMaxBytes
    LEDGER_SPOOL_DIR: str
    LEDGER_SPOOL_MIN_FREE_BYTES: int
    LEDGER_SPOOL_PROBE_SECONDS: float
    FETCH_ALLOW_PRIVATE: str
    FETCH_ALLOWED_PORTS: frozenset[int]
    FETCH_TIMEOUT: float
    FETCH_MAX_BYTES: int
    FETCH_MAX_TOTAL_BYTES: int
    FETCH_MAX_PDF_PAGES: int
    STREAM_USAGE_GRACE: float
    BUDGET_RESERVATION_SECONDS: float
    BUDGET_LEASE_SECONDS: float
    FAILOVER_ATTEMPTS: int
    FAILOVER_BUDGET: float
    CIRCUIT_FAILURES: int
    CIRCUIT_COOLDOWN: float
    CURRENCY: str
    CREDITS_PER_CURRENCY_UNIT: int
    OUTBOUND_ALLOW: str
    OUTBOUND_ALLOWED_PORTS: frozenset[int]
    EXTRA_CA_CERTS: str | None


class ConfigError(Exception):
    """Bad values in the environment: one line per variable, in `lines`."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


# pydantic's error types, in the words of an operator reading a start-up failure.
_PROBLEMS = {
    "float_parsing": "not a number",
    "float_type": "not a number",
    "int_parsing": "not an integer",
    "int_from_float": "not an integer",
    "int_type": "not an integer",
    "bool_parsing": "not true or false (also 1/0, yes/no, on/off)",
    "finite_number": "not a finite number",
}


def _number(bound: float) -> str:
    return str(int(bound)) if bound == int(bound) else f"{bound:g}"


def _line(error: Mapping[str, Any]) -> str:
    name = str(error["loc"][0]) if error["loc"] else "environment"
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind in _PROBLEMS:
        problem = _PROBLEMS[kind]
    elif kind == "value_error":
        problem = str(ctx.get("error", error["msg"]))
    elif kind == "greater_than_equal":
        problem = f"must be at least {_number(ctx['ge'])}"
    elif kind == "greater_than":
        problem = f"must be more than {_number(ctx['gt'])}"
    elif kind == "less_than_equal":
        problem = f"must be at most {_number(ctx['le'])}"
    elif kind == "literal_error":
        problem = f"not one of {ctx['expected']}"
    else:
        problem = str(error["msg"])[:1].lower() + str(error["msg"])[1:]
    shown = error.get("input")
    if isinstance(ctx.get("error"), _Named):
        return f"{name}: {problem}"
    return f"{name}: {problem}: {shown!r}"


def load() -> Config:
    """A Config from the process environment; ConfigError lists every bad value."""
    try:
        return Config()
    except ValidationError as exc:
        raise ConfigError([_line(error) for error in exc.errors()]) from None


@functools.cache
def get_config() -> Config:
    """The process's one Config, read from the environment on the first call."""
    return load()


def exit_on_bad_environment(program: str) -> Config:
    """For an entry point: the Config, or the bad values on stderr and exit status 2."""
    try:
        return get_config()
    except ConfigError as exc:
        for line in exc.lines:
            print(f"{program}: {line}", file=sys.stderr)
        raise SystemExit(2) from None
