#!/usr/bin/env bash
# Sets up the package in a venv and runs the main job: the bundled demo workflow, exported live to
# the embedded default (./rulvar-traces.otlp.jsonl plus the span tree on the terminal), or over
# OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set. Extra arguments go to `rulvar-otel demo`.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/_venv.sh
setup_venv .
"$VENV/bin/rulvar-otel" demo "$@"
