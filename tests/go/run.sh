#!/usr/bin/env bash
# Runs the Go SDK suite (official azservicebus and its admin package, see go.mod) against a
# built ferrobus.
#   tests/go/run.sh [none|keys|both] [go test flags...]
# none: no keys (any token accepted), messages in memory; keys: the connection strings' key
# configured on every broker the suite starts, durable storage (FERROBUS_TEST_AUTH and
# FERROBUS_TEST_STORAGE, as tests/python and tests/js). Default: both, none first.
# Builds nothing in Rust: the broker is $FERROBUS_BIN, else <repo>/target/release/ferrobus.
# Without a `go` command it says so and exits 0.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

mode="${1:-both}"
case "$mode" in
  none|keys) modes=("$mode"); shift ;;
  both)
    modes=(none keys)
    if [ $# -gt 0 ]; then shift; fi
    ;;
  -*) modes=(none keys) ;;
  *) echo "usage: $0 [none|keys|both] [go test flags...]" >&2; exit 2 ;;
esac

if ! command -v go >/dev/null 2>&1; then
  echo "tests/go: skipped: no 'go' command on PATH (install Go 1.25 or newer to run the Go SDK suite)"
  exit 0
fi

binary="${FERROBUS_BIN:-$repo/target/release/ferrobus}"
if [ ! -x "$binary" ]; then
  echo "tests/go: no ferrobus binary at $binary: build it (cargo build --release --bins) or set FERROBUS_BIN" >&2
  exit 1
fi
binary="$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")"

cd "$here"
status=0
for auth in "${modes[@]}"; do
  storage=memory
  [ "$auth" = keys ] && storage=durable
  echo "== Go SDK suite (FERROBUS_TEST_AUTH=$auth, storage $storage)"
  started=$(date +%s%N)
  # -count=1: the broker binary is not something go test's cache knows about. -parallel 8:
  # the tests mostly wait (lock expiry, scheduled times, empty receives), each on entities of
  # its own; flags given to this script come after and win.
  if ! FERROBUS_TEST_AUTH="$auth" FERROBUS_TEST_STORAGE="$storage" FERROBUS_BIN="$binary" \
    go test -count=1 -timeout 10m -parallel 8 "$@" ./...; then
    status=1
  fi
  awk -v auth="$auth" -v ns="$(($(date +%s%N) - started))" \
    'BEGIN { printf "tests/go (%s): %.1f s wall\n", auth, ns / 1e9 }'
done
exit "$status"
