#!/usr/bin/env bash
# Runs the whole test suite. DATABASE_URL picks the database (default: SQLite in var/).
source "$(dirname "$0")/_env.sh"
exec python -m pytest "$@"
