#!/usr/bin/env bash
# Sets up and runs the gateway on DATABASE_URL (default: the embedded SQLite file), with the
# default catalog and a demo license; prints a demo API key and curl lines to try (embeddings,
# web search, a chat tool call and a chat structured output).
#
# Without provider credentials it starts the local OpenAI, Brave and OpenAlex simulators
# (fake_upstreams, development tools that are NOT real providers) beside the gateway, so the
# curl lines answer.
# With OPENAI_API_KEY set, the same command talks to the real OpenAI API.
#
# It also starts a development identity provider and an LMS simulator (fake_upstreams: NOT for
# real use, anyone who opens them signs in as anyone they list) and gives the demo school its
# people and a course, so that a student, a teacher and an admin can sign in (it prints how).
# Never when DEV_SIGN_IN=off, nor where real ones are configured (licensing/management/demo.py,
# docs/decisions/dev-tools.md).
source "$(dirname "$0")/_env.sh"
HOST="${HOST:-127.0.0.1}"
# A terminal on a developer's machine: readable log lines (production's default is JSON).
export LOG_FORMAT="${LOG_FORMAT:-text}"
PORT="${PORT:-8000}"
SIM_PORT="${SIMULATOR_PORT:-9100}"
IDP_PORT="$((SIM_PORT + 3))"  # the development identity provider
LMS_PORT="$((SIM_PORT + 4))"  # the LMS simulator
DEV_SIGN_IN="${DEV_SIGN_IN:-on}"
# Where the two tools listen: this computer only. docker-compose.yml's `local` says 0.0.0.0
# inside its container, whose ports it publishes on the host's loopback only; anywhere else
# 0.0.0.0 would let anyone on the network sign in as anyone the tools list.
DEV_TOOLS_HOST="${DEV_TOOLS_HOST:-127.0.0.1}"
case "${DEV_SIGN_IN,,}" in off | 0 | false | no) DEV_SIGN_IN=off ;; esac
# The address this computer's browser and curl use (every address: this computer's loopback),
# and the one browsers come back to from the identity provider (SSO redirect URIs and LTI's
# launch URL are built on GATEWAY_PUBLIC_URL): open the gateway there, not at another name.
case "$HOST" in
    0.0.0.0 | ::) SITE="http://127.0.0.1:$PORT" ;;
    *:*) SITE="http://[$HOST]:$PORT" ;;
    *) SITE="http://$HOST:$PORT" ;;
esac
export GATEWAY_PUBLIC_URL="${GATEWAY_PUBLIC_URL:-$SITE}"

# DATABASE_URL (if set) picks the database, as everywhere; default: db.sqlite3 here.
# The ports first: on a busy port nothing may be touched (the database, the connection another
# running instance uses).
SIM_PORTS=()  # the simulators', which answer before the gateway starts
if [ -z "${OPENAI_API_KEY:-}" ]; then SIM_PORTS+=("$SIM_PORT"); fi
if [ -z "${BRAVE_API_KEY:-}" ]; then SIM_PORTS+=("$((SIM_PORT + 1))"); fi
if [ -z "${OPENALEX_API_KEY:-}${OPENALEX_MAILTO:-}" ]; then SIM_PORTS+=("$((SIM_PORT + 2))"); fi
PORTS=("$PORT" "${SIM_PORTS[@]}")
if [ "$DEV_SIGN_IN" != off ]; then PORTS+=("$IDP_PORT" "$LMS_PORT"); fi
python - "$HOST" "${PORTS[@]}" <<'PY'
import socket
import sys

host, ports = sys.argv[1], sys.argv[2:]
for port in ports:
    if not port.isdigit() or not 0 < int(port) < 65536:
        sys.exit(f"run.sh: {port!r} is not a port number (PORT / SIMULATOR_PORT)")
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
        except OSError as exc:
            sys.exit(
                f"run.sh: port {port} on {host} is not free ({exc.strerror}); "
                "stop what uses it or set PORT / SIMULATOR_PORT"
            )
PY

# Secrets at rest (provider keys, the identity provider's client secret): without
# GATEWAY_ENCRYPTION_KEYS the gateway generates a key into var/encryption.key and warns, in
# each process. The same key is given to every process here, so nothing warns, and the final
# lines say it once.
ENCRYPTION_NOTE=""
if [ -z "${GATEWAY_ENCRYPTION_KEYS:-}" ]; then
    GATEWAY_ENCRYPTION_KEYS="$(python - <<'PY'
import os
from pathlib import Path

from cryptography.fernet import Fernet

path = Path("var/encryption.key")  # the gateway's own (GATEWAY_ENCRYPTION_KEY_FILE)
if not path.exists():
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
        out.write(Fernet.generate_key() + b"\n")
    try:
        os.link(tmp, path)  # never replaces a key another process wrote
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
print(path.read_text().strip())
PY
)"
    export GATEWAY_ENCRYPTION_KEYS
    ENCRYPTION_NOTE="Secrets:  encrypted at rest with the development key in var/encryption.key (GATEWAY_ENCRYPTION_KEYS is not set; set it in production, docs/deployment.md)"
fi

SETUP=()
export SIMULATOR_API_KEY="sk-simulator-local"  # the simulators' own, not a real secret
if [ -n "${OPENAI_API_KEY:-}" ]; then
    # Secrets go through the environment, never the command line (visible in ps).
    SETUP+=(--connection direct "${OPENAI_BASE_URL:-https://api.openai.com/v1}" OPENAI_API_KEY)
    PROVIDER_NOTE="direct -> the real OpenAI API (OPENAI_API_KEY is set)"
else
    SETUP+=(--connection direct "http://127.0.0.1:$SIM_PORT/v1" SIMULATOR_API_KEY)
    PROVIDER_NOTE="direct -> LOCAL SIMULATOR on 127.0.0.1:$SIM_PORT (no OPENAI_API_KEY set; answers are synthetic)"
fi
if [ -n "${OPENROUTER_API_KEY:-}" ]; then
    SETUP+=(--connection aggregator "https://openrouter.ai/api/v1" OPENROUTER_API_KEY)
fi
# Search: the real Brave Search API with BRAVE_API_KEY, the real OpenAlex with OPENALEX_MAILTO
# (or OPENALEX_API_KEY); otherwise local simulators of both.
if [ -n "${BRAVE_API_KEY:-}" ]; then
    SETUP+=(--connection websearch "https://api.search.brave.com" BRAVE_API_KEY)
    SEARCH_NOTE="websearch -> the real Brave Search API"
else
    SETUP+=(--connection websearch "http://127.0.0.1:$((SIM_PORT + 1))" SIMULATOR_API_KEY)
    SEARCH_NOTE="websearch -> LOCAL SIMULATOR on 127.0.0.1:$((SIM_PORT + 1))"
fi
export OPENALEX_KEY="${OPENALEX_API_KEY:-${OPENALEX_MAILTO:-}}"
if [ -n "$OPENALEX_KEY" ]; then
    SETUP+=(--connection academic "https://api.openalex.org" OPENALEX_KEY)
    SEARCH_NOTE="$SEARCH_NOTE; academic -> the real OpenAlex API"
else
    SETUP+=(--connection academic "http://127.0.0.1:$((SIM_PORT + 2))")
    SEARCH_NOTE="$SEARCH_NOTE; academic -> LOCAL SIMULATOR on 127.0.0.1:$((SIM_PORT + 2))"
fi

# The development sign-in tools, on loopback: the gateway fetches the identity provider's
# discovery, keys and tokens and the LMS's keys through its outbound guard, which refuses
# loopback unless told (GATEWAY_OUTBOUND_ALLOW; only these two ports are added).
DEV_OUTBOUND=()
if [ "$DEV_SIGN_IN" != off ]; then
    SETUP+=(--dev-idp "http://127.0.0.1:$IDP_PORT" --dev-lms "http://127.0.0.1:$LMS_PORT")
    DEV_OUTBOUND=(
        "GATEWAY_OUTBOUND_ALLOW=${GATEWAY_OUTBOUND_ALLOW:+$GATEWAY_OUTBOUND_ALLOW,}127.0.0.1/32"
        "GATEWAY_OUTBOUND_ALLOWED_PORTS=${GATEWAY_OUTBOUND_ALLOWED_PORTS:-443},$IDP_PORT,$LMS_PORT"
    )
fi

# The setup, in one process (each manage.py command is ~2 s of Django's start-up): migrate (a
# bad DATABASE_URL or an unreachable database stops here with one line, see manage.py), the
# static files (admin, /v1/docs) into var/static, served by WhiteNoise, the catalog, the demo
# license and admin user, the connections above, the demo school's development sign-in (a
# "dev-tool: oidc|lti URL" line for each tool to start; how to sign in goes to GUIDE), and the
# demo key, kept in DEMO_KEY_FILE (var/demo-api-key; mode 0600, the database holds its hash
# only) and used again while it is a usable key of this database: its last line.
SIM_PIDS=()
GUIDE="$(mktemp)"
cleanup() {
    for pid in "${SIM_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -f "$GUIDE"
}
trap cleanup EXIT INT TERM
DEMO_KEY_FILE="${DEMO_KEY_FILE:-var/demo-api-key}"
SETUP+=(--key-name "run.sh demo key" --key-file "$DEMO_KEY_FILE" --guide "$GUIDE")
SET_UP="$(env "${DEV_OUTBOUND[@]}" python manage.py setup_demo "${SETUP[@]}")"
KEY="${SET_UP##*$'\n'}"
LINES=""
if [[ "$SET_UP" == *$'\n'* ]]; then LINES="${SET_UP%$'\n'*}"; fi
DEV_TOOLS="$(printf '%s\n' "$LINES" | sed -n 's/^dev-tool: //p')"
LINES="$(printf '%s\n' "$LINES" | grep -v '^dev-tool: ' || true)"
if [ -n "$LINES" ]; then printf '%s\n' "$LINES"; fi
if [ -n "$DEV_TOOLS" ]; then export "${DEV_OUTBOUND[@]}"; fi

# The simulators start once the setup is done (a bad database stops run.sh before they print).
if [ -z "${OPENAI_API_KEY:-}" ]; then
    python -m fake_upstreams openai --port "$SIM_PORT" --api-key "$SIMULATOR_API_KEY" &
    SIM_PIDS+=($!)
fi
if [ -z "${BRAVE_API_KEY:-}" ]; then
    python -m fake_upstreams brave --port "$((SIM_PORT + 1))" --api-key "$SIMULATOR_API_KEY" &
    SIM_PIDS+=($!)
fi
if [ -z "$OPENALEX_KEY" ]; then
    python -m fake_upstreams openalex --port "$((SIM_PORT + 2))" &
    SIM_PIDS+=($!)
fi
if [[ "$DEV_TOOLS" == *"oidc "* ]]; then
    python -m fake_upstreams oidc --host "$DEV_TOOLS_HOST" --port "$IDP_PORT" \
        --gateway-url "$GATEWAY_PUBLIC_URL" &
    SIM_PIDS+=($!)
    SIM_PORTS+=("$IDP_PORT")
fi
if [[ "$DEV_TOOLS" == *"lti "* ]]; then
    python -m fake_upstreams lti --host "$DEV_TOOLS_HOST" --port "$LMS_PORT" \
        --gateway-url "$GATEWAY_PUBLIC_URL" &
    SIM_PIDS+=($!)
    SIM_PORTS+=("$LMS_PORT")
fi
# ...and answer before the gateway does: its first request must not find one still starting.
for port in "${SIM_PORTS[@]}"; do
    for _ in $(seq 1 300); do
        (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
done
cat <<EOT

Inference gateway on $SITE   (admin: $SITE/admin/)
Provider: $PROVIDER_NOTE
Search:   $SEARCH_NOTE${ENCRYPTION_NOTE:+
$ENCRYPTION_NOTE}
Demo API key (kept in $DEMO_KEY_FILE; delete the file for a new one): $KEY

Try it (the embedding asks for 8 dimensions, to stay readable):
  curl -s $SITE/v1/embeddings -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d '{"model": "text-embedding-3-small", "input": "hello", "dimensions": 8}'
  curl -s $SITE/v1/web-search -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d '{"query": "photosynthesis", "num_results": 3}'
A tool call (the answer's tool_calls), then a structured output (a JSON document in the schema):
  curl -s $SITE/v1/chat/completions -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}}]}'
  curl -s $SITE/v1/chat/completions -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Alice and Bob go to the science fair on Friday."}], "response_format": {"type": "json_schema", "json_schema": {"name": "event", "strict": true, "schema": {"type": "object", "properties": {"name": {"type": "string"}, "day": {"type": "string"}, "participants": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "day", "participants"], "additionalProperties": false}}}}'

EOT
if [ -s "$GUIDE" ]; then
    cat "$GUIDE"
    echo
fi
# No proxy is trusted unless FORWARDED_ALLOW_IPS names it (gunicorn's own default trusts
# loopback's X-Forwarded-For, so any local process could pose as any client).
export FORWARDED_ALLOW_IPS="${FORWARDED_ALLOW_IPS-}"
# The one way the gateway is served, as in production (docs/deployment.md): gunicorn with uvicorn
# workers and gateway_site/gunicorn_conf.py. One worker unless GATEWAY_WORKERS says more: without
# REDIS_URL the live feed and the caches are shared only inside one process.
export GATEWAY_WORKERS="${GATEWAY_WORKERS:-1}"
BIND="$HOST:$PORT"
if [[ "$HOST" == *:* ]]; then BIND="[$HOST]:$PORT"; fi  # an IPv6 address
gunicorn -c python:gateway_site.gunicorn_conf --bind "$BIND" gateway_site.asgi:application
