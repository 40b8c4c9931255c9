"""Django's settings, from the environment read once into `core.config.Config` (every variable,
its type, default and meaning are there; docs/configuration.md)."""

import os
from typing import Any, cast

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from core.config import BASE_DIR, GatewaySettings, get_config

# Raises core.config.ConfigError, one line per bad value (manage.py and the server's entry
# points print them and exit before they get here).
CONFIG = get_config()

DEBUG = CONFIG.DEBUG
# A fixed fallback keeps a first run working; production must set SECRET_KEY.
SECRET_KEY = CONFIG.SECRET_KEY
ALLOWED_HOSTS = CONFIG.ALLOWED_HOSTS

INSTALLED_APPS = [
    "gateway_site.apps.GatewayAdminConfig",  # django.contrib.admin with our site
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
    # After the user is known: their own language is stored on their profile (docs/languages.md).
    "gateway_site.languages.LanguageMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "gateway_site.urls"
ASGI_APPLICATION = "gateway_site.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The admin's base_site.html with "My API token" in the user tools (apps come after
        # django.contrib.admin, so an app's template could not override it).
        "DIRS": [BASE_DIR / "gateway_site" / "templates"],
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


def _database(url: str) -> dict[str, Any]:
    try:
        parsed = dj_database_url.parse(url, conn_max_age=None, conn_health_checks=True)
        return cast(dict[str, Any], parsed)  # a TypedDict, extended below with Django's keys
    except ValueError as exc:  # unknown scheme, bad port...: one clear line (see manage.py)
        raise ImproperlyConfigured(f"DATABASE_URL is not a usable database URL: {exc}") from None


DATABASES = {"default": _database(CONFIG.DATABASE_URL)}
# The CSV export reads the ledger through a server-side cursor (WITH HOLD: it outlives its
# transaction), which a PgBouncer in transaction mode cannot keep on one server connection;
# "off" reads the rows client-side instead (docs/deployment.md, "PgBouncer").
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = not CONFIG.GATEWAY_PG_SERVER_SIDE_CURSORS
if "postgresql" in DATABASES["default"]["ENGINE"] and CONFIG.GATEWAY_PG_ORM_POOL:
    # (manage.py's commands turn the pool off: one short session each.)
    # The ORM's connections of a process come from one bounded pool (Django's psycopg pool):
    # the API's worker threads return theirs after each block of work (core.db), the
    # admin's, the management API's and the live feed's at the end of each request or check.
    # Persistent per-thread connections grew with every thread that ever ran ORM code
    # (50 per worker seen). Per worker: GATEWAY_PG_POOL_SIZE (the hot path's own pool) +
    # GATEWAY_PG_ORM_POOL_SIZE (docs/deployment.md, "PostgreSQL connections").
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django's pool takes no persistent connections
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": CONFIG.GATEWAY_PG_ORM_POOL_SIZE,
        # As the hot path's pool: a wait only lasts when no connection can be made (the database
        # is down: the 503 then comes after this long) or every one is busy.
        "timeout": CONFIG.GATEWAY_PG_POOL_TIMEOUT,
        # Back within seconds of the database, whatever the outage's length (core.pgpool).
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

AUTH_PASSWORD_VALIDATORS: list[dict[str, Any]] = []
# The pages' languages (docs/languages.md): every language with a complete catalogue in
# locale/, one catalogue each; a person's choice, their browser or their institution picks one
# (gateway_site.languages, on the admin stack only: /v1 activates none and answers in English).
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("de", "Deutsch")]
LOCALE_PATHS = [BASE_DIR / "locale"]
# The menu's choice, kept a year (Django's default ends with the browser) and read by no script.
LANGUAGE_COOKIE_AGE = 365 * 24 * 3600
LANGUAGE_COOKIE_HTTPONLY = True
LANGUAGE_COOKIE_SAMESITE = "Lax"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = CONFIG.STATIC_ROOT
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
GATEWAY_MAX_BODY_BYTES = CONFIG.GATEWAY_MAX_BODY_BYTES
# Deleted by `manage.py apply_retention` (licensing.privacy.retention).
GATEWAY_AUDIT_LOG_DAYS = CONFIG.GATEWAY_AUDIT_LOG_DAYS
DATA_UPLOAD_MAX_MEMORY_SIZE = GATEWAY_MAX_BODY_BYTES

REDIS_URL = CONFIG.REDIS_URL

# The live feed of ledger rows (licensing.ledger.feed, licensing.console.consumers): through
# Redis when REDIS_URL is set, so every worker on every host feeds one page, else in this
# process's memory (one process, as scripts/run.sh runs it). A viewer that does not keep up
# loses messages instead of buffering them: both layers drop a message for a full channel in
# group_send, and a message waiting longer than `expiry` seconds is discarded. A message holds
# at most licensing.ledger.feed.ROWS_PER_MESSAGE rows.
_LIVE_LAYER: dict[str, Any] = {"capacity": 100, "expiry": 10}
if REDIS_URL:
    CHANNEL_LAYERS: dict[str, Any] = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": "gateway:live", **_LIVE_LAYER},
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": _LIVE_LAYER}
    }


# What the request path reads, per request: a plain dict built once here (its keys and types:
# core.config.GatewaySettings; their meanings: the Config fields GATEWAY_<key>). Tests replace
# it whole (`settings.GATEWAY = {**settings.GATEWAY, "X": ...}`).
GATEWAY: GatewaySettings = CONFIG.gateway()

# GET /metrics (gateway_site.metrics): the networks that may scrape it (checked at start-up) and
# a bearer token that opens it from anywhere else ("" = none).
GATEWAY_METRICS_ALLOW = CONFIG.GATEWAY_METRICS_ALLOW
GATEWAY_METRICS_TOKEN = CONFIG.GATEWAY_METRICS_TOKEN


# Every line JSON (one object per line) or readable text, with the request id (gateway_site.logs);
# JSON unless DEBUG (scripts/run.sh, a development tool, asks for text).
LOG_FORMAT = CONFIG.log_format
_CONSOLE = {"handlers": ["console"], "propagate": False}


LOGGING: dict[str, Any] = {
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
            "level": CONFIG.GATEWAY_ACCESS_LOG_LEVEL,
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

# The management API (/manage/v1/, licensing.console.manage_api): DRF's own error shapes, not
# /v1's.
REST_FRAMEWORK = {
    # A management token as `Bearer <token>` or `Token <token>`, or the admin's session.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "licensing.console.manage_auth.ManagementTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.CursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # JSON bodies refuse what no column or encoder takes (NUL, lone surrogates, 1e400, 2**64)
    # with a 400 on the field; forms for the browsable API and the admin's session clients.
    "DEFAULT_PARSER_CLASSES": [
        "licensing.console.manage_parsers.StrictJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # DRF's, with Django's own refusals of a body (too large: 413) in DRF's shape.
    "EXCEPTION_HANDLER": "licensing.console.manage_parsers.exception_handler",
}

# --- Secrets at rest, cache invalidation, admin hardening (docs/deployment.md, "Production") ---
# This block is kept apart on purpose: it only appends to the lists above.


INSTALLED_APPS += ["gateway_site.apps.GatewaySiteConfig", "axes"]

# Fernet keys, comma-separated: the first encrypts, all decrypt (core.crypto). Unset: a key
# generated once into GATEWAY_ENCRYPTION_KEY_FILE (`check --deploy` refuses that).
GATEWAY_ENCRYPTION_KEYS = CONFIG.GATEWAY_ENCRYPTION_KEYS
GATEWAY_ENCRYPTION_KEY_FILE = BASE_DIR / "var" / "encryption.key"

# Cache invalidation between worker processes (core.localcache): Redis pub/sub when
# REDIS_URL is set, else a generation file every process on this host polls.
GATEWAY_INVALIDATION_FILE = CONFIG.GATEWAY_INVALIDATION_FILE

# Admin login throttling (django-axes). Only the admin stack runs its middleware; /v1 never
# calls django.contrib.auth.authenticate, so the API does not pay for it.
ADMIN_MIDDLEWARE += ["axes.middleware.AxesMiddleware"]
# Last, around the view only: an institution's staff read times in its time zone
# (docs/admin-guide.md); /v1 never passes here.
ADMIN_MIDDLEWARE += ["licensing.console.local_time.InstitutionTimeZoneMiddleware"]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # Django's ModelBackend, refusing local passwords of --sso-only institutions (docs/sso.md).
    "licensing.signin.backends.GatewayModelBackend",
]
AXES_FAILURE_LIMIT = CONFIG.GATEWAY_ADMIN_LOGIN_FAILURES
AXES_COOLOFF_TIME = CONFIG.GATEWAY_ADMIN_LOCKOUT_MINUTES / 60  # hours
# A user from one address: a guesser cannot lock the real admin out from elsewhere.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True

# HTTPS and cookies (all off by default: a first run is plain http on 127.0.0.1).
SESSION_COOKIE_SECURE = CONFIG.SESSION_COOKIE_SECURE
CSRF_COOKIE_SECURE = CONFIG.CSRF_COOKIE_SECURE
SECURE_SSL_REDIRECT = CONFIG.SECURE_SSL_REDIRECT
SECURE_HSTS_SECONDS = CONFIG.SECURE_HSTS_SECONDS
SECURE_HSTS_INCLUDE_SUBDOMAINS = CONFIG.SECURE_HSTS_INCLUDE_SUBDOMAINS
SECURE_HSTS_PRELOAD = CONFIG.SECURE_HSTS_PRELOAD
CSRF_TRUSTED_ORIGINS = CONFIG.CSRF_TRUSTED_ORIGINS
# Behind a TLS-terminating proxy: the header it sets, e.g. "X-Forwarded-Proto" (value https).
if CONFIG.SECURE_PROXY_SSL_HEADER:
    _proxy_header = CONFIG.SECURE_PROXY_SSL_HEADER.strip().upper().replace("-", "_")
    SECURE_PROXY_SSL_HEADER = (f"HTTP_{_proxy_header}", "https")
# The security, CSRF and clickjacking middlewares (and axes') run in ADMIN_MIDDLEWARE, not
# MIDDLEWARE; gateway_site.checks verifies them there instead.
SILENCED_SYSTEM_CHECKS += ["security.W001", "security.W002", "security.W003", "axes.W002"]
# A refused form (no or an old CSRF token): the site's page saying what to do (gateway_site.errors).
CSRF_FAILURE_VIEW = "gateway_site.errors.csrf_failure"

SPECTACULAR_SETTINGS = {
    "TITLE": "Inference Gateway management API",
    "DESCRIPTION": "For institution admins' scripts and LMS integrations: the licenses, API keys, "
    "end users, usage, ledger, audit log and courses of the caller's institution; for superusers, "
    "the catalog's connections and their circuits.\n\n"
    "**Authentication**: `Authorization: Bearer <token>` with your management token (the "
    'admin\'s "My API token" page, `/admin/my-token/`, or `manage.py create_management_token '
    'USERNAME`); `Authorization: Token <token>` works too. Signed in to the admin, "Try it '
    'out" uses your session. Errors are DRF\'s shapes: `{"detail": ...}`, or field errors by '
    "name.",
    "SWAGGER_UI_SETTINGS": {"deepLinking": True},
    # The one scheme a script uses (Bearer); the admin's session works on the docs page too, as
    # the description says, without a second "Authorize" form for a cookie.
    "AUTHENTICATION_WHITELIST": ["licensing.console.manage_auth.ManagementTokenAuthentication"],
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/manage/v1",
    # Two fields named `kind` (a key's, a course window's): each enum named by its model.
    "ENUM_NAME_OVERRIDES": {
        "ApiKeyKindEnum": "licensing.models.keys.ApiKey.Kind",
        "CourseWindowKindEnum": "licensing.models.courses.CourseWindow.Kind",
    },
}

# Budget alerts and other mail (Django's email framework). The console backend prints the
# message; set EMAIL_BACKEND=django.core.mail.backends.smtp.EmailBackend and EMAIL_HOST etc.
EMAIL_BACKEND = CONFIG.EMAIL_BACKEND
EMAIL_HOST = CONFIG.EMAIL_HOST
EMAIL_PORT = CONFIG.EMAIL_PORT
EMAIL_HOST_USER = CONFIG.EMAIL_HOST_USER
EMAIL_HOST_PASSWORD = CONFIG.EMAIL_HOST_PASSWORD
EMAIL_USE_TLS = CONFIG.EMAIL_USE_TLS
EMAIL_USE_SSL = CONFIG.EMAIL_USE_SSL
EMAIL_TIMEOUT = 30
DEFAULT_FROM_EMAIL = CONFIG.DEFAULT_FROM_EMAIL
