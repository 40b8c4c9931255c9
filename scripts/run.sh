#!/usr/bin/env bash
# Sets up and runs the gateway on DATABASE_URL (default: the embedded SQLite file), with the
# default catalog and a demo license; prints a demo API key and curl lines to try (embeddings,
# web search, a chat tool call and a chat structured output).
#
# Without provider credentials it starts the local OpenAI, Brave and OpenAlex simulators
# (fake_upstreams, development tools that are NOT real providers) beside the gateway, so the
# curl lines answer.
# With OPENAI_API_KEY set, the same command talks to the real OpenAI API.
source "$(dirname "$0")/_env.sh"
HOST="${HOST:-127.0.0.1}"
# A terminal on a developer's machine: readable log lines (production's default is JSON).
export LOG_FORMAT="${LOG_FORMAT:-text}"
PORT="${PORT:-8000}"
SIM_PORT="${SIMULATOR_PORT:-9100}"

# DATABASE_URL (if set) picks the database, as everywhere; default: db.sqlite3 here.
# The ports first: on a busy port nothing may be touched (the database, the connection another
# running instance uses).
PORTS=("$PORT")
if [ -z "${OPENAI_API_KEY:-}" ]; then PORTS+=("$SIM_PORT"); fi
if [ -z "${BRAVE_API_KEY:-}" ]; then PORTS+=("$((SIM_PORT + 1))"); fi
if [ -z "${OPENALEX_API_KEY:-}${OPENALEX_MAILTO:-}" ]; then PORTS+=("$((SIM_PORT + 2))"); fi
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

# The setup, in one process (each manage.py command is ~2 s of Django's start-up): migrate (a
# bad DATABASE_URL or an unreachable database stops here with one line, see manage.py), the
# static files (admin, /v1/docs) into var/static, served by WhiteNoise, the catalog, the demo
# license and admin user, the connections above, and a new API key: its last line.
SETUP+=(--key-name "run.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)")
SET_UP="$(python manage.py setup_demo "${SETUP[@]}")"
if [[ "$SET_UP" == *$'\n'* ]]; then printf '%s\n' "${SET_UP%$'\n'*}"; fi
KEY="${SET_UP##*$'\n'}"

SIM_PIDS=()
cleanup() { for pid in "${SIM_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
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
# ...and answer before the gateway does: its first request must not find one still starting.
for port in "${PORTS[@]:1}"; do
    for _ in $(seq 1 300); do
        (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
done
cat <<EOT

Inference gateway on http://$HOST:$PORT   (admin: http://$HOST:$PORT/admin/)
Provider: $PROVIDER_NOTE
Search:   $SEARCH_NOTE
Demo API key (shown once): $KEY

Try it:
  curl -s http://$HOST:$PORT/v1/embeddings -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d '{"model": "text-embedding-3-small", "input": "hello"}'
  curl -s http://$HOST:$PORT/v1/web-search -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d '{"query": "photosynthesis", "num_results": 3}'
A tool call (the answer's tool_calls), then a structured output (a JSON document in the schema):
  curl -s http://$HOST:$PORT/v1/chat/completions -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}}]}'
  curl -s http://$HOST:$PORT/v1/chat/completions -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Alice and Bob go to the science fair on Friday."}], "response_format": {"type": "json_schema", "json_schema": {"name": "event", "strict": true, "schema": {"type": "object", "properties": {"name": {"type": "string"}, "day": {"type": "string"}, "participants": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "day", "participants"], "additionalProperties": false}}}}'

EOT
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
