#!/usr/bin/env bash
# Installs a hash-pinned lock (scripts/lock.sh writes them) and then the project itself:
#   bash scripts/install_locked.sh LOCK [PYTHON]    (PYTHON: default `python`)
# Every package comes from LOCK with --require-hashes: pip refuses one whose file is not the one
# locked, and one that is not in the lock at all (--no-deps: nothing is resolved, so nothing
# unlisted is fetched). Hash checking cannot cover an editable install (no single file to hash),
# so the project is installed after, on its own, with --no-deps and without build isolation:
# its build backend (setuptools) is the lock's too. `pip check` then fails if the lock misses a
# dependency of what it installed.
set -euo pipefail
LOCK="$1"
PY="${2:-python}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# pip itself first (the lock's, hash-checked): a venv's bundled pip may be years older.
"$PY" -m pip install --require-hashes --no-deps -r <(sed -n '/^pip==/,/[^\\]$/p' "$LOCK")
"$PY" -m pip install --require-hashes --no-deps -r "$LOCK"
"$PY" -m pip install --no-deps --no-build-isolation -e .
"$PY" -m pip check
