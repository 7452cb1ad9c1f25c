#!/usr/bin/env bash
# Runs the Java SDK compatibility suite (tests/java, Maven + JUnit 5 against the official
# com.azure:azure-messaging-servicebus) against a built ferrobus.
#   tests/java/run.sh [none|keys|both] [extra Maven arguments, e.g. -Dtest=QueueTest]
# none: no keys, --memory storage; keys: the connection strings' key configured, durable
# storage (the same pairing as scripts/test uses for the Python and JS suites); both (the
# default): none, then keys. Uses $FERROBUS_BIN, else <repo>/target/release/ferrobus (build it
# first: cargo build --release --bins). Maven downloads the SDK on its first run.
# Without java or mvn on PATH it prints why and exits 0 (nothing is tested).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

mode="${1:-both}"
[ $# -gt 0 ] && shift
case "$mode" in
  none | keys) modes=("$mode") ;;
  both) modes=(none keys) ;;
  *)
    echo "usage: tests/java/run.sh [none|keys|both] [maven args...]" >&2
    exit 2
    ;;
esac

for tool in java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "Java SDK suite skipped: '$tool' is not installed (needs Java 17+ and Maven 3.8+)"
    exit 0
  fi
done

export FERROBUS_BIN="${FERROBUS_BIN:-$repo/target/release/ferrobus}"
if [ ! -x "$FERROBUS_BIN" ]; then
  echo "ferrobus binary not found at $FERROBUS_BIN: build it with 'cargo build --release --bins' or set FERROBUS_BIN" >&2
  exit 1
fi

status=0
for auth in "${modes[@]}"; do
  if [ "$auth" = keys ]; then storage=durable; else storage=memory; fi
  echo "== Java SDK suite (FERROBUS_TEST_AUTH=$auth, storage $storage)"
  log="$here/target/java-suite-$auth.log"
  mkdir -p "$here/target"
  started=$(date +%s)
  set +e
  (cd "$here" && FERROBUS_TEST_AUTH="$auth" FERROBUS_TEST_STORAGE="$storage" \
    mvn -B --no-transfer-progress -Dstyle.color=never test "$@") 2>&1 |
    sed -E 's/\x1b\[[0-9;]*m//g' >"$log"
  code=${PIPESTATUS[0]}
  set -e
  elapsed=$(($(date +%s) - started))
  # On failure: Surefire's list of failed tests (with the broker's log tail each carries) and
  # compilation errors; the closing line is Surefire's own summary.
  if [ "$code" -ne 0 ]; then
    sed -n -E '/^\[ERROR\] (Failures|Errors): *$/,/^\[ERROR\] Tests run:/p; /COMPILATION ERROR|\.java:\[/p' "$log"
  fi
  summary="$(grep -E '^\[(INFO|ERROR|WARNING)\] Tests run: [0-9]+, Failures: [0-9]+, Errors: [0-9]+, Skipped: [0-9]+$' "$log" | tail -n 1 | sed -E 's/^\[[A-Z]+\] //' || true)"
  if [ "$code" -ne 0 ] && [ -z "$summary" ]; then
    echo "-- Maven failed before Surefire summed up; the end of $log:"
    tail -n 60 "$log"
  fi
  echo "Java SDK suite ($auth): ${elapsed}s, full log $log"
  if [ -n "$summary" ]; then echo "$summary"; fi
  if [ "$code" -ne 0 ]; then status=$code; fi
done
exit "$status"
