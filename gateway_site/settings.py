"""Settings come from the environment (see README, "Configuration")."""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


DEBUG = _env_bool("DEBUG", False)
# A fixed fallback keeps a first run working; production must set SECRET_KEY.
SECRET_KEY = os.environ.get("SECRET_KEY", "insecure-dev-key-set-SECRET_KEY-in-production")
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "*").split(",") if h.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "ninja",
    "catalog",
    "licensing",
    "inference",
]

# The /v1 API bypasses the session/auth/CSRF stack (see gateway_site.middleware.AdminStack):
# Django's sync middlewares would cost a thread hop each on every API request.
MIDDLEWARE = [
    "gateway_site.middleware.RequestContextMiddleware",
    "gateway_site.middleware.AdminStack",
]
ADMIN_MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "gateway_site.staticfiles.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "gateway_site.urls"
ASGI_APPLICATION = "gateway_site.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _database(url: str) -> dict:
    try:
        return dj_database_url.parse(url, conn_max_age=None, conn_health_checks=True)
    except ValueError as exc:  # unknown scheme, bad port...: one clear line (see manage.py)
        raise ImproperlyConfigured(f"DATABASE_URL is not a usable database URL: {exc}") from None


DATABASES = {
    "default": _database(os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}")
}
# The CSV export reads the ledger through a server-side cursor (WITH HOLD: it outlives its
# transaction), which a PgBouncer in transaction mode cannot keep on one server connection;
# "off" reads the rows client-side instead (docs/deployment.md, "PgBouncer").
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = os.environ.get(
    "GATEWAY_PG_SERVER_SIDE_CURSORS", "on"
).strip().lower() in {"off", "0", "false", "no"}
_ORM_POOL = os.environ.get("GATEWAY_PG_ORM_POOL", "on").strip().lower() not in {"off", "0", "no"}
if "postgresql" in DATABASES["default"]["ENGINE"] and _ORM_POOL:
    # (manage.py's commands turn the pool off: one short session each.)
    # The ORM's connections of a process come from one bounded pool (Django's psycopg pool):
    # the API's worker threads return theirs after each block of work (gateway_site.db), the
    # admin's, the management API's and the live feed's at the end of each request or check.
    # Persistent per-thread connections grew with every thread that ever ran ORM code
    # (50 per worker seen). Per worker: GATEWAY_PG_POOL_SIZE (the hot path's own pool) +
    # GATEWAY_PG_ORM_POOL_SIZE (docs/deployment.md, "PostgreSQL connections").
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django's pool takes no persistent connections
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": int(os.environ.get("GATEWAY_PG_ORM_POOL_SIZE", "6")),
        # As the hot path's pool: a wait only lasts when no connection can be made (the database
        # is down: the 503 then comes after this long) or every one is busy.
        "timeout": float(os.environ.get("GATEWAY_PG_POOL_TIMEOUT", "2")),
        # Back within seconds of the database, whatever the outage's length (gateway_site.pgpool).
        "reconnect_timeout": 5.0,
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL and a busy timeout let the API's worker threads write concurrently on a first run.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
    # The tests' live server answers from other threads: give them a file, not shared memory.
    (BASE_DIR / "var").mkdir(exist_ok=True)
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "var" / f"test-{os.getpid()}.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT") or BASE_DIR / "var" / "static")
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# WhiteNoise serves /static/ (gateway_site.staticfiles, on the admin stack only, never on /v1):
# from STATIC_ROOT after `collectstatic` (gzip/brotli variants made there), and from the apps'
# own folders as well, so a run without collectstatic still renders the admin and /v1/docs.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# Request bodies: embeddings batches are large, but an unbounded body is a denial of service.
# /v1 bodies over the limit are refused by gateway_site.bodylimit before Django reads them.
GATEWAY_MAX_BODY_BYTES = int(os.environ.get("GATEWAY_MAX_BODY_BYTES", str(8 * 1024 * 1024)))
DATA_UPLOAD_MAX_MEMORY_SIZE = GATEWAY_MAX_BODY_BYTES

REDIS_URL = os.environ.get("REDIS_URL") or None

# The live feed of ledger rows (licensing.live, licensing.consumers): through Redis when
# REDIS_URL is set, so every worker on every host feeds one page, else in this process's memory
# (one process, as scripts/run.sh runs it). A viewer that does not keep up loses messages
# instead of buffering them: both layers drop a message for a full channel in group_send, and
# a message waiting longer than `expiry` seconds is discarded. A message holds at most
# licensing.live.ROWS_PER_MESSAGE rows.
_LIVE_LAYER = {"capacity": 100, "expiry": 10}
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": "gateway:live", **_LIVE_LAYER},
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": _LIVE_LAYER}
    }


def _cidr_list(value: str) -> str:
    """Checked at start-up so that a typo stops the server instead of failing every fetch."""
    import ipaddress

    for part in filter(None, (p.strip() for p in value.split(","))):
        ipaddress.ip_network(part)  # ValueError: not a CIDR network
    return value


GATEWAY = {
    # Seconds an in-process cache entry (keys, licenses, catalog) may live before it is re-read.
    # Saves in this process invalidate at once; other worker processes see changes within this.
    "CACHE_TTL": float(os.environ.get("GATEWAY_CACHE_TTL", "5")),
    # Upstream time-outs in seconds.
    "UPSTREAM_CONNECT_TIMEOUT": float(os.environ.get("GATEWAY_UPSTREAM_CONNECT_TIMEOUT", "5")),
    "UPSTREAM_TIMEOUT": float(os.environ.get("GATEWAY_UPSTREAM_TIMEOUT", "120")),
    # Connections per provider connection row and process, and how long an idle one is kept
    # (below the upstream's own idle time-out, so it is not reused just as the upstream drops it).
    "UPSTREAM_MAX_CONNECTIONS": int(os.environ.get("GATEWAY_UPSTREAM_MAX_CONNECTIONS", "100")),
    "UPSTREAM_KEEPALIVE": float(os.environ.get("GATEWAY_UPSTREAM_KEEPALIVE", "4")),
    # Seconds a call may wait for a connection of that pool (its license's share, a free slot,
    # the connect itself) before the spec's 503; and the share of a pool's connections one
    # license may hold at once (README, Decisions: "Upstream bounds").
    "UPSTREAM_POOL_WAIT": float(os.environ.get("GATEWAY_UPSTREAM_POOL_WAIT", "10")),
    "UPSTREAM_LICENSE_SHARE": float(os.environ.get("GATEWAY_UPSTREAM_LICENSE_SHARE", "0.5")),
    # The most bytes read of a provider's answer, counted as they arrive (503 past it):
    # embeddings per input, images per image, chat/responses per non-streamed answer, a stream
    # in all, one event of a stream, and every other call (search, moderation).
    "ANSWER_MAX_BYTES": {
        kind: int(os.environ.get(f"GATEWAY_ANSWER_MAX_BYTES_{kind.upper()}", str(default)))
        for kind, default in (
            ("embeddings", 192 * 1024),
            ("images", 32 * 1024 * 1024),
            ("chat", 64 * 1024 * 1024),
            ("stream", 256 * 1024 * 1024),
            ("event", 16 * 1024 * 1024),
            ("default", 16 * 1024 * 1024),
        )
    },
    # Ledger entries the database could not take (outage) wait here, fsync'ed, until replayed.
    # Local disk of the host; keep it across restarts (see README, "Reliability").
    "LEDGER_SPOOL_DIR": os.environ.get("GATEWAY_LEDGER_SPOOL_DIR")
    or str(BASE_DIR / "var" / "ledger-spool"),
    # While the database is down, a provider call is made only if its row could be spooled: the
    # spool must open for append with at least this much free space (bytes), probed at most
    # once per LEDGER_SPOOL_PROBE_SECONDS (README, "Reliability").
    "LEDGER_SPOOL_MIN_FREE_BYTES": int(
        os.environ.get("GATEWAY_LEDGER_SPOOL_MIN_FREE_BYTES", str(64 * 1024 * 1024))
    ),
    "LEDGER_SPOOL_PROBE_SECONDS": float(os.environ.get("GATEWAY_LEDGER_SPOOL_PROBE_SECONDS", "1")),
    # POST /v1/fetch: networks the SSRF guard lets through although they are not public (CIDR
    # list; empty = none), the ports it may connect to, seconds per URL (redirects included),
    # the largest body it reads per URL, the most the bodies of one request hold at once (all
    # its URLs together) and the PDF pages it reads per URL (issue 22: bounded fetches).
    "FETCH_ALLOW_PRIVATE": _cidr_list(os.environ.get("GATEWAY_FETCH_ALLOW_PRIVATE", "")),
    "FETCH_ALLOWED_PORTS": frozenset(
        int(p) for p in os.environ.get("GATEWAY_FETCH_ALLOWED_PORTS", "80,443").split(",") if p
    ),
    "FETCH_TIMEOUT": float(os.environ.get("GATEWAY_FETCH_TIMEOUT", "15")),
    "FETCH_MAX_BYTES": int(os.environ.get("GATEWAY_FETCH_MAX_BYTES", str(5 * 1024 * 1024))),
    "FETCH_MAX_TOTAL_BYTES": int(
        os.environ.get("GATEWAY_FETCH_MAX_TOTAL_BYTES", str(20 * 1024 * 1024))
    ),
    "FETCH_MAX_PDF_PAGES": int(os.environ.get("GATEWAY_FETCH_MAX_PDF_PAGES", "1000")),
    # Seconds the upstream of a stream the client left is still read (not sent), waiting for
    # the provider's usage event; without it the 499 is billed on the gateway's own count.
    "STREAM_USAGE_GRACE": float(os.environ.get("GATEWAY_STREAM_USAGE_GRACE", "2")),
    # URLs an institution admin sets (JWKS of JWT issuers; OIDC and LTI next: core/outbound.py):
    # networks they may reach although not public, and over plain http (CIDR list; empty =
    # none: https to public addresses only), and the ports they may name.
    "OUTBOUND_ALLOW": _cidr_list(os.environ.get("GATEWAY_OUTBOUND_ALLOW", "")),
    "OUTBOUND_ALLOWED_PORTS": frozenset(
        int(p) for p in os.environ.get("GATEWAY_OUTBOUND_ALLOWED_PORTS", "443").split(",") if p
    ),
}

# GET /metrics (gateway_site.metrics): the networks that may scrape it (checked at start-up) and
# a bearer token that opens it from anywhere else ("" = none).
GATEWAY_METRICS_ALLOW = os.environ.get("GATEWAY_METRICS_ALLOW", "127.0.0.0/8,::1/128")
_cidr_list(GATEWAY_METRICS_ALLOW)
GATEWAY_METRICS_TOKEN = os.environ.get("GATEWAY_METRICS_TOKEN", "")


# Every line JSON (one object per line) or readable text, with the request id (gateway_site.logs);
# JSON unless DEBUG (scripts/run.sh, a development tool, asks for text).
LOG_FORMAT = os.environ.get("LOG_FORMAT") or ("text" if DEBUG else "json")
if LOG_FORMAT not in ("json", "text"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be json or text, not {LOG_FORMAT!r}")
_CONSOLE = {"handlers": ["console"], "propagate": False}


LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "gateway_site.logs.RequestIdFilter"}},
    "formatters": {
        "json": {"()": "gateway_site.logs.JsonFormatter"},
        "text": {"()": "gateway_site.logs.TextFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "gateway.access": {
            **_CONSOLE,
            "level": os.environ.get("GATEWAY_ACCESS_LOG_LEVEL", "INFO"),
        },
        "gateway": {**_CONSOLE, "level": "INFO"},
        "gateway.ledger": {**_CONSOLE, "level": "INFO"},
        # 4xx answers are in the access log already; Django's own lines from ERROR up.
        "django": {**_CONSOLE, "level": "WARNING"},
        "django.request": {**_CONSOLE, "level": "ERROR"},
        "django.server": {**_CONSOLE, "level": "ERROR"},
        # uvicorn's start/stop lines and errors in the same format (configured when the
        # application is loaded, before the server says it started).
        "uvicorn": {**_CONSOLE, "level": "INFO"},
        "uvicorn.error": {"level": "INFO"},
        # gateway.access is the access line. uvicorn's own would repeat it per request, and its
        # --no-access-log cannot help: it empties this logger before this config fills it again.
        "uvicorn.access": {**_CONSOLE, "level": "WARNING"},
    },
}

# The admin shows a new API key once in a message: keep it server-side, not in a cookie.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

# The admin's middleware is installed, through AdminStack, outside MIDDLEWARE. models.W040:
# the ledger's covering index (INCLUDE) is a plain index on SQLite, knowingly.
SILENCED_SYSTEM_CHECKS = ["admin.E408", "admin.E409", "admin.E410", "models.W040"]

# The management API (/manage/v1/, licensing.manage): DRF's own error shapes, not /v1's.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.CursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# --- Secrets at rest, cache invalidation, admin hardening (README: "Production") -----------
# This block is kept apart on purpose: it only appends to the lists above.


def _env_list(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


INSTALLED_APPS += ["gateway_site.apps.GatewaySiteConfig", "axes"]

# Fernet keys, comma-separated: the first encrypts, all decrypt (core.crypto). Unset: a key
# generated once into GATEWAY_ENCRYPTION_KEY_FILE (`check --deploy` refuses that).
GATEWAY_ENCRYPTION_KEYS = _env_list("GATEWAY_ENCRYPTION_KEYS")
GATEWAY_ENCRYPTION_KEY_FILE = BASE_DIR / "var" / "encryption.key"

# Cache invalidation between worker processes (gateway_site.localcache): Redis pub/sub when
# REDIS_URL is set, else a generation file every process on this host polls.
GATEWAY_INVALIDATION_FILE = Path(
    os.environ.get("GATEWAY_INVALIDATION_FILE") or BASE_DIR / "var" / "cache-generation"
)

# Admin login throttling (django-axes). Only the admin stack runs its middleware; /v1 never
# calls django.contrib.auth.authenticate, so the API does not pay for it.
ADMIN_MIDDLEWARE += ["axes.middleware.AxesMiddleware"]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("GATEWAY_ADMIN_LOGIN_FAILURES", "5"))
AXES_COOLOFF_TIME = float(os.environ.get("GATEWAY_ADMIN_LOCKOUT_MINUTES", "15")) / 60  # hours
# A user from one address: a guesser cannot lock the real admin out from elsewhere.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True

# HTTPS and cookies (all off by default: a first run is plain http on 127.0.0.1).
SESSION_COOKIE_SECURE = _env_bool("SESSION_COOKIE_SECURE")
CSRF_COOKIE_SECURE = _env_bool("CSRF_COOKIE_SECURE")
SECURE_SSL_REDIRECT = _env_bool("SECURE_SSL_REDIRECT")
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "0"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS")
SECURE_HSTS_PRELOAD = _env_bool("SECURE_HSTS_PRELOAD")
CSRF_TRUSTED_ORIGINS = _env_list("CSRF_TRUSTED_ORIGINS")
# Behind a TLS-terminating proxy: the header it sets, e.g. "X-Forwarded-Proto" (value https).
if os.environ.get("SECURE_PROXY_SSL_HEADER"):
    _proxy_header = os.environ["SECURE_PROXY_SSL_HEADER"].strip().upper().replace("-", "_")
    SECURE_PROXY_SSL_HEADER = (f"HTTP_{_proxy_header}", "https")
# The security, CSRF and clickjacking middlewares (and axes') run in ADMIN_MIDDLEWARE, not
# MIDDLEWARE; gateway_site.checks verifies them there instead.
SILENCED_SYSTEM_CHECKS += ["security.W001", "security.W002", "security.W003", "axes.W002"]

SPECTACULAR_SETTINGS = {
    "TITLE": "Inference Gateway management API",
    "DESCRIPTION": "Licenses, API keys, end users and transactions of the caller's institution.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/manage/v1",
}

# Budget alerts and other mail (Django's email framework). The console backend prints the
# message; set EMAIL_BACKEND=django.core.mail.backends.smtp.EmailBackend and EMAIL_HOST etc.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = _env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = _env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = 30
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "gateway@localhost")
