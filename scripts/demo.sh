#!/usr/bin/env bash
# Sets up the package in a venv and runs the main job: the bundled demo workflow, exported live to
# the embedded default (./rulvar-traces.otlp.jsonl plus the span tree on the terminal), or over
# OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set. Extra arguments go to `rulvar-otel demo`.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
quiet_pip() { "$VENV/bin/python" -m pip "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }; }
quiet_pip install --quiet --upgrade pip
quiet_pip install --quiet -e .
"$VENV/bin/rulvar-otel" demo "$@"
