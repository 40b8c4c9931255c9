#!/usr/bin/env bash
# Installs the Open WebUI of tests/clients/open_webui/requirements.txt (hash-pinned:
# scripts/lock_open_webui.sh) into a virtualenv of its own, once per lock, and prints its folder:
#   ${OPEN_WEBUI_HOME:-var}/open-webui-<version>-<first 12 hex digits of the lock's sha256>/
# tests/clients/test_open_webui.py runs it; .ci/run points OPEN_WEBUI_HOME at a folder of the
# machine outside the clone and starts this in the background while the lanes run, so a second
# CI run on the same machine installs nothing (docs/testing.md, "Open WebUI").
#
# uv installs the lock (--require-hashes --no-deps: nothing unlisted, nothing not the file
# locked; uv is scripts/lock-tools.txt's, hash-pinned), then one import of Open WebUI writes
# the bytecode of what it loads (its start takes about half the CPU then). The folder counts as
# installed only once `.installed` is in it, written last; a second caller waits on a lock file
# beside it meanwhile (flock), so the lanes' fixture and CI's background install never install
# twice, and an interrupted install is started again from nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
LOCK="$ROOT/tests/clients/open_webui/requirements.txt"
HOME_DIR="${OPEN_WEBUI_HOME:-$ROOT/var}"
VERSION="$(sed -n 's/^open-webui==\([^ ]*\).*/\1/p' "$LOCK")"
TARGET="$HOME_DIR/open-webui-$VERSION-$(sha256sum "$LOCK" | cut -c1-12)"
mkdir -p "$HOME_DIR"
exec 9>"$TARGET.lock"
flock 9
if [ -f "$TARGET/.installed" ]; then
    echo "$TARGET"
    exit 0
fi
began=$SECONDS
rm -rf "$TARGET"
TOOLS="$HOME_DIR/lock-tools-$(sha256sum "$ROOT/scripts/lock-tools.txt" | cut -c1-12)"
if [ ! -x "$TOOLS/bin/uv" ]; then
    rm -rf "$TOOLS"
    "$PYTHON" -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install --quiet --require-hashes --no-deps \
        -r "$ROOT/scripts/lock-tools.txt" >&2
fi
"$PYTHON" -m venv "$TARGET"
FIND_LINKS="${PIP_FIND_LINKS:-/opt/wheels}"  # torch's CPU build (requirements.in)
"$TOOLS/bin/uv" pip install --python "$TARGET/bin/python" --require-hashes --no-deps \
    --no-cache --find-links "$FIND_LINKS" --quiet -r "$LOCK" >&2
"$TOOLS/bin/uv" pip check --python "$TARGET/bin/python" --quiet >&2
installed=$((SECONDS - began))
# The bytecode of what Open WebUI's start imports (its own start would write it, unless the
# environment says PYTHONDONTWRITEBYTECODE; without it each start compiles ~14,000 modules).
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
(cd "$SCRATCH" && env -u PYTHONDONTWRITEBYTECODE DATA_DIR="$SCRATCH/data" \
    STATIC_DIR="$SCRATCH/static" FROM_INIT_PY=true OFFLINE_MODE=true HF_HUB_OFFLINE=1 \
    RAG_EMBEDDING_ENGINE=openai WEBUI_SECRET_KEY=warm-up ENABLE_OLLAMA_API=false \
    "$TARGET/bin/python" -c 'import open_webui.main' >"$SCRATCH/warm-up.log" 2>&1) ||
    { cat "$SCRATCH/warm-up.log" >&2; exit 1; }
touch "$TARGET/.installed"
echo "Open WebUI $VERSION installed in $installed s, bytecode in $((SECONDS - began - installed)) s:" \
    "$(du -sh "$TARGET" | cut -f1) in $TARGET" >&2
echo "$TARGET"
