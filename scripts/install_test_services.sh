#!/usr/bin/env bash
# Installs the services the test suite runs for real (promtool, prometheus, alertmanager) and the
# tools it needs (capsh, to enforce file modes on root; gcc and the Python headers, for the mypyc
# build tests/test_compiled_build.py compiles) from Debian when any is missing. Idempotent and quiet: a machine that has them is left untouched.
# Debian names the Alertmanager binary prometheus-alertmanager; the tests accept either name.
set -euo pipefail

have_python_headers() {
  "${PYTHON:-python3}" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
}

have_all() {
  command -v capsh >/dev/null 2>&1 &&
    command -v gcc >/dev/null 2>&1 &&
    have_python_headers &&
    command -v promtool >/dev/null 2>&1 &&
    command -v prometheus >/dev/null 2>&1 &&
    { command -v alertmanager >/dev/null 2>&1 || command -v prometheus-alertmanager >/dev/null 2>&1; }
}

have_all && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_test_services: promtool, prometheus or alertmanager is missing and apt-get is not" \
       "available; install Prometheus and Alertmanager and put them on PATH" >&2
  exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# policy-rc.d keeps the packages' service units from starting daemons on a developer machine or
# CI runner; it is removed again only if this script created it.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
  created_policy=1
fi
status=0
{
  $SUDO apt-get update -qq &&
    $SUDO apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager libcap2-bin \
      gcc python3-dev
} >"$log" 2>&1 || status=$?
if [ "$created_policy" -eq 1 ]; then
  $SUDO rm -f "$policy"
fi
if [ "$status" -ne 0 ]; then
  cat "$log" >&2
  echo "install_test_services: apt-get failed (exit $status)" >&2
  exit "$status"
fi

if ! have_all; then
  echo "install_test_services: capsh, gcc, Python.h, promtool, prometheus or alertmanager is still" \
       "missing after apt-get" >&2
  exit 1
fi
