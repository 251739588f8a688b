#!/usr/bin/env bash
# A local pipeline without Docker: the built collector (collector_config/otelcol-agent.yaml),
# Jaeger v2 (collector_config/jaeger/jaeger.yaml, in-memory) and Debian's Prometheus
# (collector_config/prometheus/prometheus-local.yml), all on 127.0.0.1.
#   scripts/stack.sh up       build what is missing, start the three, return once all are healthy,
#                             print OTLP_ENDPOINT=..., JAEGER_URL=..., PROMETHEUS_URL=...
#   scripts/stack.sh status   say what runs (exit 0 when all three do, 1 otherwise)
#   scripts/stack.sh down     stop what `up` started (and nothing else)
#   scripts/stack.sh trace [SERVICE]   print the newest trace of SERVICE (default rulvar) from
#                             Jaeger's API as a span tree
# Ports (env, defaults): RULVAR_STACK_OTLP_GRPC_PORT 4317, RULVAR_STACK_OTLP_HTTP_PORT 4318,
#   RULVAR_STACK_METRICS_PORT 8889 (the collector's Prometheus exporter), RULVAR_STACK_HEALTH_PORT
#   13133, RULVAR_STACK_JAEGER_PORT 16686 (UI and query API), RULVAR_STACK_JAEGER_GRPC_PORT 16685,
#   RULVAR_STACK_JAEGER_OTLP_PORT 14318 (Jaeger's OTLP/HTTP; gRPC on RULVAR_STACK_JAEGER_OTLP_GRPC_PORT
#   14317), RULVAR_STACK_JAEGER_HEALTH_PORT 13134, RULVAR_STACK_PROMETHEUS_PORT 9090.
# State (pids, logs, Prometheus data): RULVAR_STACK_DIR, default ~/.cache/rulvar-otel/stack.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

CACHE="${RULVAR_OTEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rulvar-otel}"
STATE="${RULVAR_STACK_DIR:-$CACHE/stack}"
OTLP_GRPC="${RULVAR_STACK_OTLP_GRPC_PORT:-4317}"
OTLP_HTTP="${RULVAR_STACK_OTLP_HTTP_PORT:-4318}"
METRICS="${RULVAR_STACK_METRICS_PORT:-8889}"
HEALTH="${RULVAR_STACK_HEALTH_PORT:-13133}"
JAEGER_UI="${RULVAR_STACK_JAEGER_PORT:-16686}"
JAEGER_GRPC="${RULVAR_STACK_JAEGER_GRPC_PORT:-16685}"
JAEGER_OTLP="${RULVAR_STACK_JAEGER_OTLP_PORT:-14318}"
JAEGER_OTLP_GRPC="${RULVAR_STACK_JAEGER_OTLP_GRPC_PORT:-14317}"
JAEGER_HEALTH="${RULVAR_STACK_JAEGER_HEALTH_PORT:-13134}"
PROMETHEUS="${RULVAR_STACK_PROMETHEUS_PORT:-9090}"
SERVICES=(jaeger otelcol prometheus)

say() { echo "stack: $*" >&2; }
fail() { say "$*"; exit 1; }

# A pid file holds "<pid> <binary>"; a pid counts as ours only while /proc says it still runs
# that binary, so a recycled pid is never signalled.
ours() {
  local file="$STATE/$1.pid" pid binary
  [ -f "$file" ] || return 1
  read -r pid binary <"$file" || return 1
  [ -n "$pid" ] && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$binary" ]
}

pid_of() { cut -d' ' -f1 "$STATE/$1.pid"; }

# Right after the start the child may not have exec'd its binary yet: liveness is enough there.
alive() { [ -f "$STATE/$1.pid" ] && kill -0 "$(pid_of "$1")" 2>/dev/null; }

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

healthy() {
  case "$1" in
    otelcol) curl -fs -o /dev/null "http://127.0.0.1:$HEALTH/" ;;
    jaeger) curl -fs -o /dev/null "http://127.0.0.1:$JAEGER_UI/api/services" ;;
    prometheus) curl -fs -o /dev/null "http://127.0.0.1:$PROMETHEUS/-/ready" ;;
  esac
}

print_endpoints() {
  echo "OTLP_ENDPOINT=http://127.0.0.1:$OTLP_GRPC"
  echo "OTLP_HTTP_ENDPOINT=http://127.0.0.1:$OTLP_HTTP"
  echo "JAEGER_URL=http://127.0.0.1:$JAEGER_UI"
  echo "PROMETHEUS_URL=http://127.0.0.1:$PROMETHEUS"
}

start() { # name binary args...
  local name="$1" binary="$2"
  shift 2
  setsid "$binary" "$@" >"$STATE/$name.log" 2>&1 </dev/null &
  echo "$! $(readlink -f "$binary")" >"$STATE/$name.pid"
}

stop_one() { # returns once the process is gone: TERM, up to 20 s to shut down, then KILL
  local name="$1" pid
  if ours "$name"; then
    pid="$(pid_of "$name")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 200); do
      ours "$name" || break
      sleep 0.1
    done
    if ours "$name"; then
      say "$name (pid $pid) did not stop in 20 s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do
        ours "$name" || break # an exited process (even one not yet reaped) has no exe
        sleep 0.1
      done
    fi
    say "stopped $name (pid $pid)"
  fi
  rm -f "$STATE/$name.pid"
}

wait_healthy() {
  local name="$1" deadline=$((SECONDS + 90))
  until healthy "$name"; do
    if ! alive "$name"; then
      say "$name exited during start"
      tail -n 30 "$STATE/$name.log" >&2 || true
      return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      say "$name is not healthy after 90 s"
      tail -n 30 "$STATE/$name.log" >&2 || true
      return 1
    fi
    sleep 0.25
  done
}

up() {
  mkdir -p "$STATE"
  local running=0 name
  for name in "${SERVICES[@]}"; do
    if ours "$name"; then running=$((running + 1)); fi
  done
  if [ "$running" -eq "${#SERVICES[@]}" ]; then
    say "already up (state in $STATE)"
    print_endpoints
    return
  fi
  if [ "$running" -gt 0 ]; then
    fail "partly up; run 'scripts/stack.sh down' first"
  fi
  local port
  for port in "$OTLP_GRPC" "$OTLP_HTTP" "$METRICS" "$HEALTH" "$JAEGER_UI" "$JAEGER_GRPC" "$JAEGER_OTLP" \
    "$JAEGER_OTLP_GRPC" "$JAEGER_HEALTH" "$PROMETHEUS"; do
    if port_busy "$port"; then
      fail "port $port on 127.0.0.1 is in use; choose others with the RULVAR_STACK_*_PORT variables" \
        "(see the top of scripts/stack.sh)"
    fi
  done
  command -v curl >/dev/null 2>&1 || fail "curl is needed for the health checks"
  local built otelcol jaeger prometheus
  built="$(bash scripts/build_pipeline.sh)" || fail "could not build the collector and Jaeger"
  otelcol="$(sed -n 's/^OTELCOL_BIN=//p' <<<"$built")"
  jaeger="$(sed -n 's/^JAEGER_BIN=//p' <<<"$built")"
  bash scripts/install_test_services.sh || fail "could not install Prometheus"
  prometheus="$(command -v prometheus)"

  sed -e "s/127\.0\.0\.1:8889/127.0.0.1:$METRICS/" \
    -e "s#^  - alerts\.yml#  - $ROOT/collector_config/prometheus/alerts.yml#" \
    "$ROOT/collector_config/prometheus/prometheus-local.yml" >"$STATE/prometheus.yml"

  trap 'say "start failed; stopping what was started"; for n in "${SERVICES[@]}"; do stop_one "$n"; done' ERR
  JAEGER_HEALTH_ENDPOINT="127.0.0.1:$JAEGER_HEALTH" \
    JAEGER_QUERY_ENDPOINT="127.0.0.1:$JAEGER_UI" \
    JAEGER_QUERY_GRPC_ENDPOINT="127.0.0.1:$JAEGER_GRPC" \
    JAEGER_OTLP_GRPC_ENDPOINT="127.0.0.1:$JAEGER_OTLP_GRPC" \
    JAEGER_OTLP_HTTP_ENDPOINT="127.0.0.1:$JAEGER_OTLP" \
    start jaeger "$jaeger" --config="$ROOT/collector_config/jaeger/jaeger.yaml"
  wait_healthy jaeger
  # The shipped agent config, moved to loopback; Tempo is not part of this stack.
  start otelcol "$otelcol" --config="$ROOT/collector_config/otelcol-agent.yaml" \
    --set="receivers.otlp.protocols.grpc.endpoint=127.0.0.1:$OTLP_GRPC" \
    --set="receivers.otlp.protocols.http.endpoint=127.0.0.1:$OTLP_HTTP" \
    --set="exporters.otlp_http/jaeger.endpoint=http://127.0.0.1:$JAEGER_OTLP" \
    --set="service.pipelines.traces.exporters=[otlp_http/jaeger, span_metrics]" \
    --set="exporters.prometheus.endpoint=127.0.0.1:$METRICS" \
    --set="extensions.health_check.endpoint=127.0.0.1:$HEALTH" \
    --set="service.telemetry.metrics.level=none"
  wait_healthy otelcol
  start prometheus "$prometheus" --config.file="$STATE/prometheus.yml" \
    --storage.tsdb.path="$STATE/prometheus-data" --web.listen-address="127.0.0.1:$PROMETHEUS" \
    --enable-feature=exemplar-storage
  wait_healthy prometheus
  trap - ERR
  # The CLI takes http/protobuf for any port but 4317: name the protocol, so any chosen port works.
  say "up; logs and pids in $STATE. See a trace: $(demo_hint)"
  print_endpoints
}

# The demo command that reaches this stack's collector: OTLP/gRPC on the chosen port, said outright.
demo_hint() {
  echo "rulvar-otel demo --endpoint http://127.0.0.1:$OTLP_GRPC --protocol grpc --metrics-endpoint http://127.0.0.1:$OTLP_GRPC"
}

status() {
  local name running=0
  for name in "${SERVICES[@]}"; do
    if ours "$name"; then
      if healthy "$name"; then
        echo "$name: running (pid $(pid_of "$name")), healthy"
      else
        echo "$name: running (pid $(pid_of "$name")), not healthy"
      fi
      running=$((running + 1))
    else
      echo "$name: stopped"
    fi
  done
  if [ "$running" -eq "${#SERVICES[@]}" ]; then
    print_endpoints
    return 0
  fi
  return 1
}

down() {
  local name
  for name in prometheus otelcol jaeger; do
    stop_one "$name"
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  trace) python3 "$ROOT/scripts/jaeger_trace.py" "http://127.0.0.1:$JAEGER_UI" "${@:2}" ;;
  *)
    echo "usage: scripts/stack.sh up|down|status|trace [SERVICE]" >&2
    exit 2
    ;;
esac
