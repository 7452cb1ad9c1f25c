# Peer brokers for the side-by-side run (sourced after lib.sh): RabbitMQ with its AMQP 1.0
# plugin and Qpid Proton's C example broker, both from Debian packages, both bound to
# 127.0.0.1 on ephemeral ports, started and stopped by PID.
# shellcheck disable=SC2034 # variables here are used by the scripts that source this file

PEER_PACKAGES=(rabbitmq-server libqpid-proton11-dev-examples libqpid-proton11-dev gcc pkg-config)
PROTON_BROKER=$BENCH_OUT/peers/proton-broker

# Installs the Debian packages the peers need, without letting the package start a system
# RabbitMQ service (a temporary policy-rc.d, as container images do).
install_peers() {
  local missing=() package
  for package in "${PEER_PACKAGES[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    bench_log "installing ${missing[*]}"
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    [ "$own_policy" = 1 ] && rm -f "$policy"
  fi
  if [ ! -x "$PROTON_BROKER" ] ||
    [ /usr/share/proton/examples/c/broker.c -nt "$PROTON_BROKER" ]; then
    bench_log "compiling Qpid Proton's example broker"
    mkdir -p "$(dirname "$PROTON_BROKER")"
    # shellcheck disable=SC2046 # pkg-config prints several flags
    gcc -O2 -o "$PROTON_BROKER" /usr/share/proton/examples/c/broker.c \
      $(pkg-config --cflags --libs libqpid-proton) -lpthread
  fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Qpid Proton's C example broker (4 threads, queues created on demand, deliveries to
# consumers pre-settled, incoming credit window 5).
start_proton() {
  local log=$BENCH_OUT/proton.log
  : >"$log"
  pin_to "$BENCH_BROKER_CPU"
  "${PIN[@]}" "$PROTON_BROKER" 127.0.0.1 0 >"$log" 2>&1 &
  BROKER_PID=$!
  BROKER_HELPER_PIDS=()
  wait_for_listen_line "$log" 10
}

# RabbitMQ in a scratch directory: loopback listener on a free port, its own epmd on a
# loopback port, Erlang distribution on loopback, only the AMQP 1.0 plugin enabled.
start_rabbitmq() {
  local dir=$BENCH_OUT/rabbitmq
  rm -rf "$dir"
  mkdir -p "$dir/home" "$dir/mnesia" "$dir/log"
  BROKER_PORT=$(free_port)
  local epmd_port distribution_port
  epmd_port=$(free_port)
  distribution_port=$(free_port)
  cat >"$dir/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$BROKER_PORT
loopback_users.guest = true
log.console = true
log.console.level = warning
log.file = false
EOF
  echo '[rabbitmq_amqp1_0].' >"$dir/enabled_plugins"
  epmd -address 127.0.0.1 -port "$epmd_port" &
  local epmd_pid=$!
  pin_to "$BENCH_BROKER_CPU"
  (cd "$dir" && exec env HOME="$dir/home" ERL_EPMD_PORT="$epmd_port" ERL_EPMD_ADDRESS=127.0.0.1 \
    RABBITMQ_NODENAME=ferrobus-bench@localhost RABBITMQ_DIST_PORT="$distribution_port" \
    RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
    RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" RABBITMQ_PID_FILE="$dir/pid" \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    "${PIN[@]}" /usr/lib/rabbitmq/bin/rabbitmq-server >"$dir/out.log" 2>&1) &
  local wrapper_pid=$! step
  BROKER_HELPER_PIDS=("$wrapper_pid" "$epmd_pid")
  BROKER_PID=""
  for ((step = 0; step < 600; step++)); do
    if [ -s "$dir/pid" ] && (exec 3<>"/dev/tcp/127.0.0.1/$BROKER_PORT") 2>/dev/null; then
      BROKER_PID=$(cat "$dir/pid")
      return 0
    fi
    kill -0 "$wrapper_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "RabbitMQ did not start; see $dir/out.log" >&2
  BROKER_PID=$(cat "$dir/pid" 2>/dev/null || true)
  stop_broker
  return 1
}

# Starts a named broker for the side-by-side run.
start_named_broker() {
  case $1 in
    ferrobus) start_ferrobus ferrobus "$QUEUE_CONFIG" ;;
    rabbitmq) start_rabbitmq ;;
    proton) start_proton ;;
    *) echo "unknown broker $1" >&2; return 1 ;;
  esac
}

# Load-generator arguments a broker needs (RabbitMQ 3.10: SASL PLAIN as guest).
broker_load_args() {
  case $1 in
    rabbitmq) echo "--sasl plain --user guest --password guest" ;;
    *) echo "--sasl anonymous" ;;
  esac
}
