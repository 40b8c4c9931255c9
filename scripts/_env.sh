# Sourced by the scripts: a virtualenv in .venv with the locked dependencies (constraints.txt:
# every package pinned with its sha256, installed with --require-hashes by
# scripts/install_locked.sh), reinstalled only when pyproject.toml or constraints.txt change;
# none with NO_VENV=1.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "Python 3.11 or newer is needed (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
# NO_VENV=1: the dependencies are installed already (the image: docker-compose.yml's `local`).
if [ "${NO_VENV:-}" = 1 ]; then
    return 0
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
STAMP="$VENV/.installed-$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
    echo "Installing the pinned dependencies into .venv (log: .venv/pip.log) ..."
    # Every extra (".[dev,server,clients,vendors]") is in constraints.txt: scripts/lock.sh writes it.
    if ! bash scripts/install_locked.sh constraints.txt "$VENV/bin/python" \
            > "$VENV/pip.log" 2>&1; then
        cat "$VENV/pip.log" >&2
        exit 1
    fi
    rm -f "$VENV"/.installed-*
    touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
