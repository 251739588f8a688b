#!/usr/bin/env bash
# Sets up everything the tests need on a fresh machine and runs them: a venv with the package and
# its dev extra, Debian's prometheus/promtool/alertmanager when missing, then ruff, mypy (strict)
# and pytest. Re-running reuses the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# pip's "Location ... is ignored" notes about this machine's local indexes are noise here.
quiet_pip() { "$VENV/bin/python" -m pip "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }; }
quiet_pip install --quiet --upgrade pip
quiet_pip install --quiet -e '.[dev]'
"$VENV/bin/python" -c 'import rulvar_otel, pytest, mypy, ruff' # fail here, clearly, if the install did
bash scripts/install_test_services.sh

export PATH="$PWD/$VENV/bin:$PATH"
echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy --strict"
mypy
echo "== pytest"
pytest -q -p no:cacheprovider "$@"
