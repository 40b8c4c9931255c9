#!/usr/bin/env bash
# Sets up and runs the gateway on its embedded default (SQLite), with the default catalog and a
# demo license; prints a demo API key and a curl line.
#
# Without provider credentials it starts the local OpenAI simulator (fake_upstreams, a
# development tool that is NOT a real provider) beside the gateway, so the curl line answers.
# With OPENAI_API_KEY set, the same command talks to the real OpenAI API.
source "$(dirname "$0")/_env.sh"
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-8000}"
SIM_PORT="${SIMULATOR_PORT:-9100}"

# DATABASE_URL (if set) picks the database, as everywhere; default: db.sqlite3 here.
python manage.py migrate --verbosity 0
# Static files (admin, /v1/docs) into var/static, served by WhiteNoise (compressed copies).
python manage.py collectstatic --noinput --verbosity 0
python manage.py load_catalog
DJANGO_SETTINGS_MODULE=gateway_site.settings python - <<'PY'
import secrets

import django

django.setup()
from django.contrib.auth import get_user_model

from licensing.models import License
from licensing.services import license_create

if not License.objects.filter(name="demo").exists():
    license_create(name="demo", institution="Demo school")
    print("License 'demo' created (unlimited budget, every service)")
User = get_user_model()
if not User.objects.filter(username="admin").exists():
    password = secrets.token_urlsafe(12)
    User.objects.create_superuser("admin", "admin@localhost", password)
    print(f"Admin user created: admin / {password}  (shown once)")
PY

SIM_PID=""
cleanup() { [ -n "$SIM_PID" ] && kill "$SIM_PID" 2>/dev/null || true; }
trap cleanup EXIT INT TERM

if [ -n "${OPENAI_API_KEY:-}" ]; then
    python manage.py configure_connection direct --base-url "${OPENAI_BASE_URL:-https://api.openai.com/v1}" --api-key "$OPENAI_API_KEY"
    PROVIDER_NOTE="direct -> the real OpenAI API (OPENAI_API_KEY is set)"
else
    SIM_KEY="sk-simulator-local"
    python -m fake_upstreams openai --port "$SIM_PORT" --api-key "$SIM_KEY" &
    SIM_PID=$!
    python manage.py configure_connection direct --base-url "http://127.0.0.1:$SIM_PORT/v1" --api-key "$SIM_KEY"
    PROVIDER_NOTE="direct -> LOCAL SIMULATOR on 127.0.0.1:$SIM_PORT (no OPENAI_API_KEY set; answers are synthetic)"
fi
if [ -n "${OPENROUTER_API_KEY:-}" ]; then
    python manage.py configure_connection aggregator --base-url "https://openrouter.ai/api/v1" --api-key "$OPENROUTER_API_KEY"
fi

KEY="$(python manage.py create_api_key demo --name "run.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)")"
cat <<EOT

Inference gateway on http://$HOST:$PORT   (admin: http://$HOST:$PORT/admin/)
Provider: $PROVIDER_NOTE
Demo API key (shown once): $KEY

Try it:
  curl -s http://$HOST:$PORT/v1/embeddings -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d '{"model": "text-embedding-3-small", "input": "hello"}'

EOT
python -m uvicorn gateway_site.asgi:application --host "$HOST" --port "$PORT" --no-access-log \
    --lifespan off
