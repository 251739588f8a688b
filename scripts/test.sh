#!/usr/bin/env bash
# Sets up everything the tests need on a fresh machine and runs them: a venv with the package and
# its dev extra, Debian's prometheus/promtool/alertmanager when missing, then ruff, mypy (strict)
# and pytest. Re-running reuses the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/_venv.sh
setup_venv '.[dev]'
"$VENV/bin/python" -c 'import pytest, mypy, ruff'
bash scripts/install_test_services.sh

export PATH="$PWD/$VENV/bin:$PATH"
echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy --strict"
mypy
echo "== pytest"
pytest -q -p no:cacheprovider "$@"
