# Shared by the benchmark scripts (sourced, not run): building the broker and the load
# generator, starting and stopping brokers by PID on 127.0.0.1 ephemeral ports, CPU pinning,
# and reading the `result key=value …` lines the load generator prints.
#
# Environment:
#   BENCH_OUT          where configs, logs and results go (default target/bench)
#   BENCH_BROKER_CPU   CPU the broker is pinned to (default 0)
#   BENCH_LOAD_CPU     CPU the load generator is pinned to (default 1)
#   BENCH_NO_PIN=1     do not pin (also automatic on a machine with one CPU)
#   CARGO_TARGET_DIR   honoured: the binaries are taken from where cargo builds them
#   BENCH_STORAGE      default storage of start_ferrobus (memory, durable or dir:PATH)
#   FERROBUS_STORAGE_ARGS  passed to the broker instead of the storage arguments
#   BENCH_COMMIT       the build named in result headers (default: git describe --dirty)
# shellcheck disable=SC2034 # variables here are used by the scripts that source this file

BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH_OUT=${BENCH_OUT:-$BENCH_ROOT/target/bench}
BENCH_BROKER_CPU=${BENCH_BROKER_CPU:-0}
BENCH_LOAD_CPU=${BENCH_LOAD_CPU:-1}
mkdir -p "$BENCH_OUT"

# Cargo's target directory: CARGO_TARGET_DIR (relative to the repository, where cargo runs)
# or target/. bench_build asks cargo itself, which also knows a configured build.target-dir.
bench_target_dir() {
  local dir=${CARGO_TARGET_DIR:-$BENCH_ROOT/target}
  case $dir in /*) ;; *) dir=$BENCH_ROOT/$dir ;; esac
  printf '%s\n' "$dir"
}
FERROBUS_BIN=$(bench_target_dir)/release/ferrobus
LOAD_BIN=""
BROKER_PID=""
BROKER_PORT=""
# Nanoseconds since the epoch just before the broker started last was spawned.
BROKER_SPAWNED_NS=""
# A scratch data directory of the running broker, removed by stop_broker.
BROKER_SCRATCH_DIR=""
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

# Builds target/release/ferrobus and the load generator; sets FERROBUS_BIN and LOAD_BIN.
bench_build() {
  local target_dir
  # --benches: the broker and the load generator share one build (the dev-dependencies'
  # features apply to both), so the `cargo bench --no-run` below and scripts/test's build
  # reuse it instead of compiling every dependency a second time.
  bench_log "cargo build --release --bins --benches"
  (cd "$BENCH_ROOT" && cargo build --release --locked --quiet --bins --benches)
  target_dir=$(cd "$BENCH_ROOT" && cargo metadata --locked --format-version 1 --no-deps 2>/dev/null |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p' | head -n 1)
  FERROBUS_BIN=${target_dir:-$(bench_target_dir)}/release/ferrobus
  if [ ! -x "$FERROBUS_BIN" ]; then
    echo "no broker binary at $FERROBUS_BIN after cargo build --release" >&2
    return 1
  fi
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
  for ((step = 0; step < seconds * 100; step++)); do
    BROKER_PORT=$(grep -o 'listening on [0-9.:]*[0-9]' "$file" 2>/dev/null |
      head -n 1 | sed 's/.*[ :]//' || true)
    [ -n "$BROKER_PORT" ] && return 0
    if [ -n "$BROKER_PID" ] && ! kill -0 "$BROKER_PID" 2>/dev/null; then
      echo "broker exited during start-up; log: $file" >&2
      return 1
    fi
    sleep 0.01
  done
  echo "no 'listening on' line in $file after ${seconds}s" >&2
  return 1
}

# Starts ferrobus on 127.0.0.1:0 with the TOML text in $2, pinned to the broker CPU:
#
#   start_ferrobus NAME CONFIG-TEXT [STORAGE]
#
# STORAGE (default $BENCH_STORAGE, else memory):
#   memory     --memory: nothing is written (the broker's own default is durable in ./data,
#              which the scenarios must never create in the repository)
#   durable    --data-dir on a fresh, empty $BENCH_OUT/NAME-data, deleted by stop_broker
#   dir:PATH   --data-dir PATH, kept (the caller removes it), e.g. to restart on it
# FERROBUS_STORAGE_ARGS, when set, is passed verbatim instead (e.g. "--data-dir DIR").
start_ferrobus() {
  local name=$1 config_text=$2 storage=${3:-${BENCH_STORAGE:-memory}}
  local config=$BENCH_OUT/$name.toml log=$BENCH_OUT/$name.log
  local -a storage_args
  printf '%s\n' "$config_text" >"$config"
  : >"$log"
  BROKER_SCRATCH_DIR=""
  if [ -n "${FERROBUS_STORAGE_ARGS:-}" ]; then
    read -r -a storage_args <<<"$FERROBUS_STORAGE_ARGS"
  else
    case $storage in
      memory) storage_args=(--memory) ;;
      durable)
        BROKER_SCRATCH_DIR=$BENCH_OUT/$name-data
        rm -rf "$BROKER_SCRATCH_DIR"
        storage_args=(--data-dir "$BROKER_SCRATCH_DIR")
        ;;
      dir:?*) storage_args=(--data-dir "${storage#dir:}") ;;
      *)
        echo "start_ferrobus: unknown storage '$storage' (memory, durable or dir:PATH)" >&2
        return 2
        ;;
    esac
  fi
  pin_to "$BENCH_BROKER_CPU"
  BROKER_SPAWNED_NS=$(date +%s%N)
  "${PIN[@]}" "$FERROBUS_BIN" --config "$config" --listen 127.0.0.1:0 "${storage_args[@]}" 2>"$log" &
  BROKER_PID=$!
  BROKER_HELPER_PIDS=()
  # Durable starts read the whole log before they listen (recovery of a large directory).
  wait_for_listen_line "$log" 120
}

# Stops the broker started last (SIGTERM, then SIGKILL after 15 s) and its helpers, and
# removes its scratch data directory (start_ferrobus … durable).
stop_broker() {
  local pid step
  if [ -n "$BROKER_PID" ]; then
    kill "$BROKER_PID" 2>/dev/null || true
    for ((step = 0; step < 300; step++)); do
      kill -0 "$BROKER_PID" 2>/dev/null || break
      sleep 0.05
    done
    kill -9 "$BROKER_PID" 2>/dev/null || true
    wait "$BROKER_PID" 2>/dev/null || true
  fi
  for pid in "${BROKER_HELPER_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  BROKER_PID=""
  BROKER_HELPER_PIDS=()
  if [ -n "$BROKER_SCRATCH_DIR" ]; then
    rm -rf "$BROKER_SCRATCH_DIR"
    BROKER_SCRATCH_DIR=""
  fi
}

# Kills the broker started last with SIGKILL (a crash: no shutdown, nothing flushed beyond
# what was already synced). Its data directory stays, even a scratch one.
crash_broker() {
  [ -n "$BROKER_PID" ] || return 0
  kill -9 "$BROKER_PID" 2>/dev/null || true
  wait "$BROKER_PID" 2>/dev/null || true
  BROKER_PID=""
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
