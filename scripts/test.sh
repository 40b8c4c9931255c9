#!/usr/bin/env bash
# Runs the whole test suite. DATABASE_URL picks the database (default: SQLite in var/).
source "$(dirname "$0")/_env.sh"
# Compiled modules are written and read again (__pycache__, ignored by git): with
# PYTHONDONTWRITEBYTECODE set, as some environments set it, every process the tests start (a
# worker, gunicorn, run.sh, a manage.py command: several hundred a run) compiled the gateway's
# modules from source again, ~0.7 s of each start, and pytest rewrote every test module's
# asserts on every collection, ~15 s a full one (docs/testing.md, "CI's time").
unset PYTHONDONTWRITEBYTECODE
exec python -m pytest "$@"
