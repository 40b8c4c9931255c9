# The gateway behind gunicorn with uvicorn workers (docs/deployment.md), from the hash-pinned
# lock of the base and `server` (constraints-server.txt), without the development extras.
# Written and checked without a container runtime (none was available): see docs/deployment.md,
# "Containers".
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    DJANGO_SETTINGS_MODULE=gateway_site.settings

# xmlsec1: pysaml2 signs and checks SAML's XML signatures with it (docs/saml.md).
# fonts-dejavu-core: the privacy pack's PDF embeds DejaVu Sans for text in any script
# (licensing/privacy/pdf.py; without it, Latin-1 only).
RUN apt-get update && apt-get install -y --no-install-recommends xmlsec1 fonts-dejavu-core \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 gateway \
    && useradd --system --uid 10001 --gid gateway --home-dir /app --shell /usr/sbin/nologin gateway

WORKDIR /app
COPY --chown=gateway:gateway . /app

# Every package from the lock with --require-hashes (a file that is not the one locked, or a
# package not in the lock, is refused), then the project itself, editable (the settings keep var/
# beside the source, BASE_DIR, so the code must run from /app), without resolving anything.
RUN bash scripts/install_locked.sh constraints-server.txt python

# Static files for the admin and /v1/docs, compressed, served by WhiteNoise from var/static.
# Settings need no secret or database for this (SECRET_KEY has a development fallback that
# only this build step sees).
RUN python manage.py collectstatic --noinput --verbosity 0 \
    && mkdir -p /app/var /data/ledger-spool \
    && chown -R gateway:gateway /app/var /data

USER gateway

# The ledger spool must outlive the container: docker-compose.yml mounts a volume here.
ENV GATEWAY_LEDGER_SPOOL_DIR=/data/ledger-spool
VOLUME ["/data/ledger-spool"]

EXPOSE 8000

# /v1/health runs SELECT 1: a gateway without its database is unhealthy too.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/v1/health', timeout=4).status != 200)"]

# Workers: GATEWAY_WORKERS (default: one per core this container may use). Proxy trust:
# FORWARDED_ALLOW_IPS, gunicorn's own variable (docs/deployment.md, "TLS and the proxy").
CMD ["gunicorn", "-c", "python:gateway_site.gunicorn_conf", "--bind", "0.0.0.0:8000", "gateway_site.asgi:application"]
