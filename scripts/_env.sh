# Sourced by the scripts: a virtualenv in .venv with the pinned dependencies, reinstalled only
# when pyproject.toml or constraints.txt change.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "Python 3.11 or newer is needed (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
STAMP="$VENV/.installed-$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
    echo "Installing the pinned dependencies into .venv (log: .venv/pip.log) ..."
    if ! { "$VENV/bin/python" -m pip install --upgrade pip \
            && "$VENV/bin/python" -m pip install -c constraints.txt -e ".[dev,server,clients]"; } \
            > "$VENV/pip.log" 2>&1; then
        cat "$VENV/pip.log" >&2
        exit 1
    fi
    rm -f "$VENV"/.installed-*
    touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
