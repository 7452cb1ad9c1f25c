#!/usr/bin/env bash
# Run the Python compatibility suite against a built ferrobus.
#   tests/python/run.sh [pytest args...]
# Uses $FERROBUS_BIN, else <repo>/target/release/ferrobus (build it first: cargo build --release).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
if [ ! -x "$venv/bin/pytest" ] || ! cmp -s "$here/requirements.txt" "$venv/.requirements.installed"; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  "$venv/bin/pip" install --quiet -r "$here/requirements.txt"
  cp "$here/requirements.txt" "$venv/.requirements.installed"
fi
cd "$here"
exec "$venv/bin/pytest" "$@"
