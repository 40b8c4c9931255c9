#!/usr/bin/env bash
# Installs a hash-pinned lock (scripts/lock.sh writes them) and then the project itself:
#   bash scripts/install_locked.sh LOCK [PYTHON]    (PYTHON: default `python`)
# The installer is uv, itself hash-pinned in scripts/lock-tools.txt and installed first by the
# interpreter's own pip with --require-hashes. uv then installs every package from LOCK with
# --require-hashes: it refuses one whose file is not the one locked, and one that is not in the
# lock at all (--no-deps: nothing is resolved, so nothing unlisted is fetched). uv rather than
# pip for the lock: the same checks in ~15 s instead of ~150 s (it fetches and unpacks in
# parallel), which is CI's time on every fresh clone (docs/testing.md, "CI's time").
# Hash checking cannot cover an editable install (no single file to hash), so the project is
# installed after, on its own, with --no-deps and without build isolation: its build backend
# (setuptools) is the lock's too. `pip check` (the lock's pip) then fails if the lock misses a
# dependency of what it installed.
set -euo pipefail
LOCK="$1"
PY="${2:-python}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
"$PY" -m pip install --quiet --require-hashes --no-deps -r scripts/lock-tools.txt
UV="$("$PY" -c 'import os, sysconfig; print(os.path.join(sysconfig.get_path("scripts"), "uv"))')"
"$UV" pip install --python "$PY" --require-hashes --no-deps --compile-bytecode -r "$LOCK"
"$UV" pip install --python "$PY" --no-deps --no-build-isolation -e .
"$PY" -m pip check
