# Shared by the benchmark scripts (sourced, not run): building the broker and the load
# generator, starting and stopping brokers by PID on 127.0.0.1 ephemeral ports, CPU pinning,
# and reading the `result key=value …` lines the load generator prints.
#
# Environment:
#   BENCH_OUT          where configs, logs and results go (default target/bench)
#   BENCH_BROKER_CPU   CPU the broker is pinned to (default 0)
#   BENCH_LOAD_CPU     CPU the load generator is pinned to (default 1)
#   BENCH_NO_PIN=1     do not pin (also automatic on a machine with one CPU)
# shellcheck disable=SC2034 # variables here are used by the scripts that source this file

BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH_OUT=${BENCH_OUT:-$BENCH_ROOT/target/bench}
BENCH_BROKER_CPU=${BENCH_BROKER_CPU:-0}
BENCH_LOAD_CPU=${BENCH_LOAD_CPU:-1}
mkdir -p "$BENCH_OUT"

FERROBUS_BIN=$BENCH_ROOT/target/release/ferrobus
LOAD_BIN=""
BROKER_PID=""
BROKER_PORT=""
# Extra PIDs belonging to the running broker (RabbitMQ's wrapper and epmd).
BROKER_HELPER_PIDS=()

bench_log() { printf '== %s\n' "$*" >&2; }

# Sets PIN to the command prefix that pins to CPU $1 (empty when pinning is off). A prefix,
# not a function, so that `"${PIN[@]}" broker &` leaves the broker's own PID in $!.
pin_to() {
  if [ "${BENCH_NO_PIN:-0}" = 1 ] || [ "$(nproc)" -lt 2 ]; then
    PIN=()
  else
    PIN=(taskset -c "$1")
  fi
}

# Builds target/release/ferrobus and the load generator; sets LOAD_BIN.
bench_build() {
  bench_log "cargo build --release"
  (cd "$BENCH_ROOT" && cargo build --release --locked --quiet)
  bench_log "cargo bench --bench load --no-run"
  LOAD_BIN=$(cd "$BENCH_ROOT" &&
    cargo bench --locked --bench load --no-run --message-format=json 2>/dev/null |
    grep '"kind":\["bench"\]' | grep '"name":"load"' |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
  if [ -z "$LOAD_BIN" ] || [ ! -x "$LOAD_BIN" ]; then
    echo "could not build the load generator (cargo bench --bench load --no-run)" >&2
    return 1
  fi
}

# Waits until FILE has a line "listening on [HOST:]PORT"; sets BROKER_PORT.
wait_for_listen_line() {
  local file=$1 seconds=${2:-10} step
  for ((step = 0; step < seconds * 20; step++)); do
    BROKER_PORT=$(grep -o 'listening on [0-9.:]*[0-9]' "$file" 2>/dev/null |
      head -n 1 | sed 's/.*[ :]//' || true)
    [ -n "$BROKER_PORT" ] && return 0
    if [ -n "$BROKER_PID" ] && ! kill -0 "$BROKER_PID" 2>/dev/null; then
      echo "broker exited during start-up; log: $file" >&2
      return 1
    fi
    sleep 0.05
  done
  echo "no 'listening on' line in $file after ${seconds}s" >&2
  return 1
}

# Starts ferrobus on 127.0.0.1:0 with the TOML text in $2, pinned to the broker CPU.
start_ferrobus() {
  local name=$1 config_text=$2
  local config=$BENCH_OUT/$name.toml log=$BENCH_OUT/$name.log
  printf '%s\n' "$config_text" >"$config"
  : >"$log"
  pin_to "$BENCH_BROKER_CPU"
  # In memory unless FERROBUS_STORAGE_ARGS says otherwise (e.g. "--data-dir DIR"): the
  # scenarios measure the broker, not the disk, and never write into the repository.
  # shellcheck disable=SC2086
  "${PIN[@]}" "$FERROBUS_BIN" --config "$config" --listen 127.0.0.1:0 ${FERROBUS_STORAGE_ARGS:---memory} 2>"$log" &
  BROKER_PID=$!
  BROKER_HELPER_PIDS=()
  wait_for_listen_line "$log" 10
}

# Stops the broker started last (SIGTERM, then SIGKILL after 15 s) and its helpers.
stop_broker() {
  local pid step
  [ -n "$BROKER_PID" ] || return 0
  kill "$BROKER_PID" 2>/dev/null || true
  for ((step = 0; step < 300; step++)); do
    kill -0 "$BROKER_PID" 2>/dev/null || break
    sleep 0.05
  done
  kill -9 "$BROKER_PID" 2>/dev/null || true
  wait "$BROKER_PID" 2>/dev/null || true
  for pid in "${BROKER_HELPER_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  BROKER_PID=""
  BROKER_HELPER_PIDS=()
}

# Runs the load generator pinned to the load CPU against the running broker; prints its
# result line (also appended to $RESULTS when set). Extra arguments go to the generator.
run_load() {
  local command=$1
  shift
  local output status=0
  pin_to "$BENCH_LOAD_CPU"
  output=$("${PIN[@]}" "$LOAD_BIN" "$command" \
    --url "amqp://127.0.0.1:$BROKER_PORT" --broker-pid "$BROKER_PID" "$@") || status=$?
  output=$(printf '%s\n' "$output" | grep '^result ' || true)
  if [ -z "$output" ]; then
    echo "load generator printed no result (exit $status)" >&2
    return 1
  fi
  [ -n "${RESULTS:-}" ] && printf '%s\n' "$output" >>"$RESULTS"
  printf '%s\n' "$output"
  return "$status"
}

# The value of KEY in a result line.
field() {
  printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# median / min / max of numbers on stdin, as "median min max".
stats() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "0 0 0"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%g %g %g\n", m, v[1], v[NR] }'
}

# The commit measured (BENCH_COMMIT overrides, e.g. for a tree exported without .git).
bench_commit() {
  echo "${BENCH_COMMIT:-$(git -C "$BENCH_ROOT" describe --always --dirty 2>/dev/null || echo unknown)}"
}

# The machine, for the record.
machine_line() {
  local model
  model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
  printf 'nproc=%s cpu="%s" kernel=%s memory=%s loadavg="%s"\n' "$(nproc)" "$model" \
    "$(uname -r)" "$(free -g | awk '/^Mem:/ { print $2 "GiB" }')" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
}

QUEUE_CONFIG='[[queues]]
name = "bench"
max_size_in_megabytes = 4096'
