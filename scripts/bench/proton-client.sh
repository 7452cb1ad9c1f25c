# shellcheck shell=bash
# The independent client (benches/proton-c/proton-bench.c, on Qpid Proton-C's proactor API)
# and the helpers of the scripts that run it: scripts/bench/independent and
# scripts/bench/fanout --client proton. Source after lib.sh.

CLIENT_SOURCE=$BENCH_ROOT/benches/proton-c/proton-bench.c
CLIENT_BIN=$BENCH_OUT/proton-c/proton-bench

build_client() {
  if [ ! -x "$CLIENT_BIN" ] || [ "$CLIENT_SOURCE" -nt "$CLIENT_BIN" ]; then
    bench_log "compiling benches/proton-c/proton-bench.c"
    mkdir -p "$(dirname "$CLIENT_BIN")"
    # shellcheck disable=SC2046 # pkg-config prints several flags
    gcc -O2 -Wall -o "$CLIENT_BIN" "$CLIENT_SOURCE" $(pkg-config --cflags --libs libqpid-proton) -lpthread
  fi
}

# utime + stime of PID in clock ticks (0 when there is no PID).
process_ticks() {
  [ -n "$1" ] || { echo 0; return; }
  # Field 2 (comm) may hold spaces: count from after its closing parenthesis.
  sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}
# Busy ticks of the whole machine (user nice system irq softirq steal), from /proc/stat.
machine_ticks() {
  awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat
}

# Waits until FILE holds a line matching PATTERN, or the process PID is gone, or 10 s passed.
wait_for_line() {
  local file=$1 pattern=$2 pid=$3 step
  for ((step = 0; step < 1000; step++)); do
    grep -q "$pattern" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
  done
  echo "no '$pattern' in $file" >&2
  cat "$file" >&2 || true
  return 1
}

