#!/usr/bin/env bash
# Sets up everything the tests need on a fresh machine and runs them: a venv with the package and
# its dev extra, Debian's prometheus/promtool/alertmanager when missing, the collector and Jaeger
# built from their Go modules (cached in ~/.cache/rulvar-otel/bin; needs Go 1.26), then ruff,
# mypy (strict) and pytest. Re-running reuses the venv and the built binaries.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/_venv.sh
setup_venv '.[dev]'
"$VENV/bin/python" -c 'import pytest, mypy, ruff'
bash scripts/install_test_services.sh
bash scripts/build_pipeline.sh >/dev/null

export PATH="$PWD/$VENV/bin:$PATH"
echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy --strict"
mypy
echo "== pytest"
pytest -q -p no:cacheprovider "$@"
