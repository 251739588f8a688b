#!/usr/bin/env bash
# Installs the services the test suite runs for real (promtool, prometheus, alertmanager) from
# Debian when any is missing. Idempotent and quiet: a machine that has them is left untouched.
set -euo pipefail

missing=0
for tool in promtool prometheus alertmanager; do
  command -v "$tool" >/dev/null 2>&1 || missing=1
done
[ "$missing" -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_test_services: promtool/prometheus/alertmanager are missing and apt-get is not available;" \
       "install Prometheus and Alertmanager and put them on PATH" >&2
  exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
# --no-install-recommends keeps the node exporter and web assets out; policy-rc.d stops the
# packages' service units from starting daemons on a developer machine or CI runner.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
  created_policy=1
fi
$SUDO apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager >/dev/null
if [ "$created_policy" -eq 1 ]; then
  $SUDO rm -f "$policy"
fi

for tool in promtool prometheus alertmanager; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    if [ -x "/usr/bin/prometheus-$tool" ]; then
      continue
    fi
    echo "install_test_services: $tool is still missing after apt-get install" >&2
    exit 1
  fi
done
