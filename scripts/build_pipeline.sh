#!/usr/bin/env bash
# Builds the pipeline's two Go programs once and caches them outside the repo:
#   - otelcol-rulvar: our collector distribution, from collector_config/builder/otelcol-rulvar.yaml
#     with the OpenTelemetry Collector Builder;
#   - jaeger: the Jaeger v2 binary, from the tool module in collector_config/builder/jaeger/.
# Each binary is keyed by a hash of what defines it (manifest or go.mod + go.sum), so an edit
# rebuilds and an unchanged tree reuses the cache. Prints OTELCOL_BIN=<path> and JAEGER_BIN=<path>
# on stdout; progress goes to stderr. Without a Go toolchain of the needed version it fails (exit 1)
# and names that version.
#   usage: scripts/build_pipeline.sh [otelcol|jaeger|all]     (default: all)
#   env:   RULVAR_OTEL_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/rulvar-otel), GO (go binary)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

GO_NEEDED="1.26.0"               # the go directive of the collector v0.161.0 and Jaeger v1.76.0 modules
BUILDER_VERSION="v0.161.0"       # = the collector release every component in the manifest is at
MANIFEST="$ROOT/collector_config/builder/otelcol-rulvar.yaml"
JAEGER_MODULE="$ROOT/collector_config/builder/jaeger"
CACHE="${RULVAR_OTEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rulvar-otel}"
what="${1:-all}"

say() { echo "build_pipeline: $*" >&2; }
fail() { say "$*"; exit 1; }

case "$what" in
  otelcol | jaeger | all) ;;
  *) fail "unknown target '$what' (expected otelcol, jaeger or all)" ;;
esac

find_go() {
  if [ -n "${GO:-}" ]; then
    echo "$GO"
  elif command -v go >/dev/null 2>&1; then
    command -v go
  elif [ -x /usr/local/go/bin/go ]; then
    echo /usr/local/go/bin/go
  fi
}

version_at_least() { # $1 >= $2, both dotted numbers
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

require_go() {
  GO_BIN="$(find_go)"
  [ -n "$GO_BIN" ] && [ -x "$GO_BIN" ] || fail "no Go toolchain found${GO:+ at GO=$GO}: Go $GO_NEEDED or" \
    "newer is needed to build the collector (otelcol-rulvar $BUILDER_VERSION) and Jaeger v1.76.0;" \
    "install it (e.g. to /usr/local/go) or set GO=/path/to/go"
  local have
  have="$("$GO_BIN" env GOVERSION 2>/dev/null | sed 's/^go//')" || have=""
  [ -n "$have" ] || fail "'$GO_BIN env GOVERSION' failed: Go $GO_NEEDED or newer is needed"
  version_at_least "${have%%[!0-9.]*}" "$GO_NEEDED" ||
    fail "Go $have at $GO_BIN is too old: Go $GO_NEEDED or newer is needed"
  PATH="$(dirname "$GO_BIN"):$PATH"
  export PATH
}

hash_of() { cat "$@" | sha256sum | cut -c1-16; }

mkdir -p "$CACHE/bin"
# One build at a time per cache (a test run and scripts/stack.sh may both ask).
exec 9>"$CACHE/.build.lock"
flock 9

build_otelcol() {
  local key bin work builder started
  key="$(printf '%s\n' "$BUILDER_VERSION" | cat - "$MANIFEST" | sha256sum | cut -c1-16)"
  bin="$CACHE/bin/otelcol-rulvar-$key"
  if [ -x "$bin" ]; then
    echo "OTELCOL_BIN=$bin"
    return
  fi
  require_go
  started=$SECONDS
  builder="$CACHE/tools/builder-$BUILDER_VERSION/builder"
  if [ ! -x "$builder" ]; then
    say "installing the OpenTelemetry Collector Builder $BUILDER_VERSION"
    GOBIN="$(dirname "$builder")" nice go install "go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION" >&2 ||
      fail "could not install go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION"
  fi
  work="$CACHE/work/otelcol-$key"
  rm -rf "$work"
  mkdir -p "$work"
  sed "s#^  output_path: .*#  output_path: $work/_build#" "$MANIFEST" >"$work/manifest.yaml"
  say "building otelcol-rulvar ($key) from $MANIFEST; the first build takes several minutes"
  (cd "$work" && nice "$builder" --config manifest.yaml) >"$work/build.log" 2>&1 || {
    tail -n 40 "$work/build.log" >&2
    fail "the collector build failed (full log: $work/build.log)"
  }
  mv "$work/_build/otelcol-rulvar" "$bin.tmp"
  mv "$bin.tmp" "$bin"
  rm -rf "$work"
  say "built otelcol-rulvar in $((SECONDS - started)) s"
  echo "OTELCOL_BIN=$bin"
}

build_jaeger() {
  local key bin started
  key="$(hash_of "$JAEGER_MODULE/go.mod" "$JAEGER_MODULE/go.sum")"
  bin="$CACHE/bin/jaeger-$key"
  if [ -x "$bin" ]; then
    echo "JAEGER_BIN=$bin"
    return
  fi
  require_go
  started=$SECONDS
  say "building jaeger ($key) from $JAEGER_MODULE; the first build takes several minutes"
  (cd "$JAEGER_MODULE" &&
    GOFLAGS=-mod=readonly nice go build -trimpath -ldflags='-s -w' -o "$bin.tmp" \
      github.com/jaegertracing/jaeger/cmd/jaeger) >&2 ||
    fail "the Jaeger build failed"
  mv "$bin.tmp" "$bin"
  say "built jaeger in $((SECONDS - started)) s"
  echo "JAEGER_BIN=$bin"
}

case "$what" in
  otelcol) build_otelcol ;;
  jaeger) build_jaeger ;;
  all)
    build_otelcol
    build_jaeger
    ;;
esac
