/*
 * proton-bench: a small AMQP 1.0 throughput client on Qpid Proton-C's proactor API, used by
 * scripts/bench/independent as a client independent of ferrobus's own AMQP stack (and of the
 * fe2o3-amqp load generator). One process is one role on one connection and one link:
 *
 *   proton-bench send    --host H --port P --address A --count N --size B [--timeout S]
 *   proton-bench receive --host H --port P --address A --count N --size B --credit C [--timeout S]
 *   proton-bench receive --listen --host 127.0.0.1 --port 0 ...   (peer-to-peer: a sender
 *                                  connects to this receiver directly, no broker in between)
 *   proton-bench send ... --rate R [--tick-us T]   (paced: R messages per second, for latency
 *                                  at a fixed rate; the pacer wakes every T µs, 20 by default)
 *   proton-bench probe [--cpus A,B]  (the host's speed now: a fixed arithmetic loop, timed;
 *                                  with --cpus, on CPU A and on CPU B, a cache line's round
 *                                  trip from CPU A to CPU B and back, and a load from memory
 *                                  on CPU A)
 *
 * At-least-once: the sender sends unsettled transfers and settles each one when its outcome
 * arrives; the receiver accepts and settles every delivery, keeping its credit topped up to
 * --credit (re-granted when it falls below half). The message (binary body of --size bytes,
 * no properties) is encoded once; each send writes its 1-based sequence number into the first
 * 8 bytes of the body and its send time (CLOCK_MONOTONIC, ns) into the next 8, which the
 * receiver reads back from the end of the delivery (the body is the last section) to count
 * duplicates and out-of-range numbers and to measure each message's latency, send → receive
 * (both processes on one machine share the monotonic clock).
 *
 * --rate R paces the sender: a second thread wakes the connection every 20 µs (--tick-us)
 * (pn_connection_wake, the proactor's thread-safe call) and each wake sends what is due by
 * then, R × time since the first send, within the link credit. Each wake costs the client's
 * core two task switches: at 240k/s with 20 µs ticks the pair on one core ran out of CPU
 * without a broker (p99 10 ms), with 100 µs ticks it kept up (p99 0.3 ms) — a longer tick
 * lets the client pace higher rates, at up to one tick's wait in every message's latency.
 * A paced message carries the time it was due (first send + (sequence − 1) ÷ R), not the
 * time it left: a broker that holds the sender back (small credit or session window) has
 * the messages wait in the client, and that wait is the broker's latency too (otherwise a
 * throttling broker looks fast: coordinated omission). The pacer's own lag (tens of µs) is
 * in every peer's figure, peer-to-peer included. PROTON_BENCH_LATENCY_FILE=PATH makes the
 * receiver write every message's latency and arrival time there (to line slow ones up with
 * a scheduler trace).
 *
 * Each process stops by itself: after N messages, or after --timeout seconds (exit 3). When it
 * stops it prints one line:
 *
 *   result role=receive count=N received=N duplicates=0 unknown=0 elapsed_s=… per_s=… cpu_s=…
 *          … latency_us_p50=… latency_us_p99=… latency_us_p999=… latency_us_max=…
 *   result role=send count=N sent=N accepted=N other_outcomes=0 elapsed_s=… per_s=… cpu_s=…
 *
 * elapsed_s is first → last delivery (receiver) or first send → last outcome (sender); per_s is
 * the messages counted over it; cpu_s is this process's own user + system CPU (getrusage), to
 * tell when the client itself is the bottleneck. Before it, a connecting process prints
 * "attached ADDRESS" once its link is attached; a listening one "listening on PORT".
 *
 * Build: gcc -O2 -o proton-bench proton-bench.c $(pkg-config --cflags --libs libqpid-proton) -lpthread
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#include <proton/condition.h>
#include <proton/connection.h>
#include <proton/delivery.h>
#include <proton/link.h>
#include <proton/listener.h>
#include <proton/message.h>
#include <proton/netaddr.h>
#include <proton/proactor.h>
#include <proton/sasl.h>
#include <proton/session.h>
#include <proton/transport.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>

typedef struct {
  int sender;                /* role: 1 = send, 0 = receive */
  int listen;                /* receiver only: listen for a sender instead of connecting */
  const char *host, *port, *address;
  long count;
  int size, credit;
  double timeout_s;
  double rate;               /* sender: messages per second, 0 = as fast as credit allows */
  long tick_us;              /* sender with --rate: the pacer's period, µs */

  pn_proactor_t *proactor;
  pn_listener_t *listener;
  char *message;             /* the encoded message (sender) or a receive buffer */
  size_t message_len, capacity;
  long sent, accepted, other_outcomes;           /* sender */
  long received, duplicates, unknown, granted;   /* receiver; granted = credit issued so far */
  unsigned char *seen;       /* receiver: one byte per sequence number */
  float *latency_us;         /* receiver: send → receive per message, in arrival order */
  uint64_t *arrived_ns;      /* receiver with PROTON_BENCH_LATENCY_FILE: arrival times */
  long latencies;
  pn_connection_t *connection;
  pthread_t pacer;
  volatile int pacing;       /* sender with --rate: the pacer thread runs */
  double first, last;        /* monotonic seconds */
  uint64_t first_ns;         /* sender: the first send (CLOCK_MONOTONIC ns), for due times */
  int finished, exit_code;
} app_t;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int compare_floats(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static double cpu_seconds(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

static void print_result(app_t *app) {
  double elapsed = app->last > app->first ? app->last - app->first : 0;
  long done = app->sender ? app->accepted + app->other_outcomes : app->received;
  if (app->sender)
    printf("result role=send count=%ld sent=%ld accepted=%ld other_outcomes=%ld", app->count,
           app->sent, app->accepted, app->other_outcomes);
  else
    printf("result role=receive count=%ld received=%ld duplicates=%ld unknown=%ld", app->count,
           app->received, app->duplicates, app->unknown);
  printf(" elapsed_s=%.6f per_s=%.0f cpu_s=%.3f size=%d credit=%d", elapsed,
         elapsed > 0 ? done / elapsed : 0, cpu_seconds(), app->size, app->credit);
  if (app->sender && app->rate > 0) printf(" rate=%.0f tick_us=%ld", app->rate, app->tick_us);
  if (!app->sender && app->latencies > 0) {
    long n = app->latencies;
    /* PROTON_BENCH_LATENCY_FILE: each message's latency (µs) and arrival time
       (CLOCK_MONOTONIC ns), one line per message in arrival order, before sorting: to see
       when the slow ones happened (and line them up with `perf … -k CLOCK_MONOTONIC`). */
    const char *dump = getenv("PROTON_BENCH_LATENCY_FILE");
    FILE *out = dump ? fopen(dump, "w") : NULL;
    if (out) {
      for (long i = 0; i < n; i++)
        fprintf(out, "%.1f %llu\n", app->latency_us[i],
                app->arrived_ns ? (unsigned long long)app->arrived_ns[i] : 0ULL);
      fclose(out);
    }
    qsort(app->latency_us, n, sizeof *app->latency_us, compare_floats);
    printf(" latency_us_p50=%.1f latency_us_p99=%.1f latency_us_p999=%.1f latency_us_max=%.1f",
           app->latency_us[n / 2], app->latency_us[(long)(n * 0.99)],
           app->latency_us[(long)(n * 0.999)], app->latency_us[n - 1]);
  }
  printf("\n");
  fflush(stdout);
}

static void check_condition(app_t *app, pn_event_t *e, pn_condition_t *cond) {
  if (pn_condition_is_set(cond)) {
    fprintf(stderr, "%s: %s: %s\n", pn_event_type_name(pn_event_type(e)),
            pn_condition_get_name(cond), pn_condition_get_description(cond));
    if (pn_event_connection(e)) pn_connection_close(pn_event_connection(e));
    if (!app->finished) app->exit_code = 1;
  }
}

/* Encodes the message once: a binary body of app->size bytes, nothing else. */
static void encode_message(app_t *app) {
  pn_message_t *m = pn_message();
  char *body = calloc(1, app->size);
  pn_data_put_binary(pn_message_body(m), pn_bytes(app->size, body));
  app->capacity = app->size + 256;
  for (;;) {
    app->message = realloc(app->message, app->capacity);
    app->message_len = app->capacity;
    int err = pn_message_encode(m, app->message, &app->message_len);
    if (err == 0) break;
    if (err != PN_OVERFLOW) { fprintf(stderr, "encode: %s\n", pn_code(err)); exit(1); }
    app->capacity *= 2;
  }
  free(body);
  pn_message_free(m);
}

/* Sends while there is credit (and, with --rate, while messages are due); the body's first
 * 8 bytes carry the sequence number, the next 8 the send time. */
static void send_available(app_t *app, pn_link_t *l) {
  size_t offset = app->message_len - app->size;   /* the body's bytes end the encoding */
  long due = app->count;
  if (app->rate > 0) {
    /* Paced: the first message now, then one every 1/rate s after it (never a burst of the
       whole credit at the start: that queued up to a credit's worth of messages at once and
       showed as a latency tail that was the client's). */
    due = app->sent > 0 ? (long)((now() - app->first) * app->rate) + 1 : 1;
    if (due > app->count) due = app->count;
  }
  while (pn_link_credit(l) > 0 && app->sent < due) {
    uint64_t sequence = (uint64_t)++app->sent;
    if (app->sent == 1) {
      app->first = now();
      app->first_ns = now_ns();
    }
    pn_delivery(l, pn_dtag((const char *)&sequence, sizeof sequence));
    if (app->size >= 8) memcpy(app->message + offset, &sequence, 8);
    if (app->size >= 16) {
      uint64_t sent_at = app->rate > 0
          ? app->first_ns + (uint64_t)((double)(sequence - 1) * 1e9 / app->rate)
          : now_ns();
      memcpy(app->message + offset + 8, &sent_at, 8);
    }
    pn_link_send(l, app->message, app->message_len);
    pn_link_advance(l);
  }
}

/* Tops the receiver's credit up to --credit when it fell below half, never past --count. */
static void grant_credit(app_t *app, pn_link_t *l) {
  int credit = pn_link_credit(l);
  if (credit >= app->credit / 2) return;
  long want = app->credit - credit;
  if (want > app->count - app->granted) want = app->count - app->granted;
  if (want > 0) {
    pn_link_flow(l, (int)want);
    app->granted += want;
  }
}

/* --rate: wakes the connection every --tick-us µs until the sender finishes. */
static void *pace(void *argument) {
  app_t *app = argument;
  struct timespec tick = {app->tick_us / 1000000, (app->tick_us % 1000000) * 1000};
  /* Without this a 20 µs sleep lasts 70 µs or more (the default 50 µs timer slack). */
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  while (app->pacing) {
    pn_connection_wake(app->connection);
    nanosleep(&tick, NULL);
  }
  return NULL;
}

static void stop_pacing(app_t *app) {
  if (app->pacing) {
    app->pacing = 0;
    pthread_join(app->pacer, NULL);
  }
}

static void finish(app_t *app, pn_connection_t *c) {
  stop_pacing(app);
  app->finished = 1;
  app->last = now();
  pn_connection_close(c);
  if (app->listener) pn_listener_close(app->listener);
}

static void on_delivery(app_t *app, pn_event_t *e) {
  pn_delivery_t *d = pn_event_delivery(e);
  pn_link_t *l = pn_delivery_link(d);
  if (app->sender) {
    if (!pn_delivery_updated(d)) return;
    if (pn_delivery_remote_state(d) == PN_ACCEPTED) app->accepted++;
    else app->other_outcomes++;
    pn_delivery_settle(d);
    if (app->accepted + app->other_outcomes == app->count && !app->finished)
      finish(app, pn_event_connection(e));
    return;
  }
  if (!pn_delivery_readable(d) || pn_delivery_partial(d)) return;
  size_t pending = pn_delivery_pending(d);
  if (pending > app->capacity) {
    app->capacity = pending;
    app->message = realloc(app->message, app->capacity);
  }
  ssize_t n = pn_link_recv(l, app->message, pending);
  pn_link_advance(l);
  if (n >= app->size && app->size >= 8) {
    uint64_t sequence;
    memcpy(&sequence, app->message + n - app->size, 8);
    if (sequence >= 1 && sequence <= (uint64_t)app->count) {
      if (app->seen[sequence - 1]++) app->duplicates++;
    } else {
      app->unknown++;
    }
    if (app->size >= 16 && app->latencies < app->count) {
      uint64_t sent_at;
      memcpy(&sent_at, app->message + n - app->size + 8, 8);
      uint64_t arrived = now_ns();
      if (app->arrived_ns) app->arrived_ns[app->latencies] = arrived;
      app->latency_us[app->latencies++] = (float)((double)(arrived - sent_at) / 1000.0);
    }
  }
  if (!pn_delivery_settled(d)) pn_delivery_update(d, PN_ACCEPTED);  /* unless pre-settled */
  pn_delivery_settle(d);
  if (++app->received == 1) app->first = now();
  if (app->received >= app->count) {
    if (!app->finished) finish(app, pn_event_connection(e));
  } else {
    grant_credit(app, l);
  }
}

/* Returns 0 when the proactor has nothing left to do. */
static int handle(app_t *app, pn_event_t *e) {
  switch (pn_event_type(e)) {
  case PN_LISTENER_OPEN: {
    char port[PN_MAX_ADDR];
    pn_netaddr_host_port(pn_listener_addr(pn_event_listener(e)), NULL, 0, port, sizeof port);
    printf("listening on %s\n", port);
    fflush(stdout);
    break;
  }
  case PN_LISTENER_ACCEPT: {
    pn_transport_t *t = pn_transport();
    pn_transport_set_server(t);   /* before pn_sasl() */
    pn_sasl_allowed_mechs(pn_sasl(t), "ANONYMOUS");
    pn_listener_accept2(pn_event_listener(e), NULL, t);
    break;
  }
  case PN_LISTENER_CLOSE:
    app->listener = NULL;
    check_condition(app, e, pn_listener_condition(pn_event_listener(e)));
    break;
  case PN_CONNECTION_INIT: {
    pn_connection_t *c = pn_event_connection(e);
    pn_connection_set_container(c, app->sender ? "proton-bench-send" : "proton-bench-receive");
    if (app->listen) break;          /* the connecting sender opens; answered below */
    pn_connection_open(c);
    pn_session_t *s = pn_session(c);
    pn_session_open(s);
    pn_link_t *l = app->sender ? pn_sender(s, "proton-bench-sender")
                               : pn_receiver(s, "proton-bench-receiver");
    pn_terminus_set_address(app->sender ? pn_link_target(l) : pn_link_source(l), app->address);
    pn_link_open(l);
    if (!app->sender) grant_credit(app, l);
    break;
  }
  /* Listening receiver: answer the sender's open, begin and attach. */
  case PN_CONNECTION_REMOTE_OPEN:
    if (pn_connection_state(pn_event_connection(e)) & PN_LOCAL_UNINIT)
      pn_connection_open(pn_event_connection(e));
    break;
  case PN_SESSION_REMOTE_OPEN:
    if (pn_session_state(pn_event_session(e)) & PN_LOCAL_UNINIT)
      pn_session_open(pn_event_session(e));
    break;
  case PN_LINK_REMOTE_OPEN: {
    pn_link_t *l = pn_event_link(e);
    if (!app->listen) {              /* our own attach answered: say so (the script waits) */
      printf("attached %s\n", app->address);
      fflush(stdout);
    }
    if (pn_link_state(l) & PN_LOCAL_UNINIT) {
      pn_terminus_copy(pn_link_target(l), pn_link_remote_target(l));
      pn_terminus_copy(pn_link_source(l), pn_link_remote_source(l));
      pn_link_open(l);
      if (pn_link_is_receiver(l)) grant_credit(app, l);
    }
    break;
  }
  case PN_LINK_FLOW:
    if (app->sender) {
      pn_link_t *l = pn_event_link(e);
      if (app->rate > 0 && !app->pacing && !app->finished && pn_link_credit(l) > 0) {
        app->pacing = 1;
        pthread_create(&app->pacer, NULL, pace, app);
      }
      send_available(app, l);
    }
    break;
  case PN_CONNECTION_WAKE:
    if (app->sender && !app->finished) {
      pn_link_t *l = pn_link_head(pn_event_connection(e), 0);
      if (l) send_available(app, l);
    }
    break;
  case PN_DELIVERY:
    on_delivery(app, e);
    break;
  case PN_TRANSPORT_CLOSED:
    stop_pacing(app);                /* before the connection it wakes is freed */
    check_condition(app, e, pn_transport_condition(pn_event_transport(e)));
    if (app->finished) return 0;     /* the pending timeout would keep the proactor active */
    break;
  case PN_CONNECTION_REMOTE_CLOSE:
    check_condition(app, e, pn_connection_remote_condition(pn_event_connection(e)));
    pn_connection_close(pn_event_connection(e));
    break;
  case PN_SESSION_REMOTE_CLOSE:
    check_condition(app, e, pn_session_remote_condition(pn_event_session(e)));
    pn_connection_close(pn_event_connection(e));
    break;
  case PN_LINK_REMOTE_CLOSE:
  case PN_LINK_REMOTE_DETACH:
    check_condition(app, e, pn_link_remote_condition(pn_event_link(e)));
    pn_connection_close(pn_event_connection(e));
    break;
  case PN_PROACTOR_TIMEOUT:
    if (app->finished) return 0;     /* finished, but the close handshake never completed */
    stop_pacing(app);
    fprintf(stderr, "proton-bench: timed out after %.0f s\n", app->timeout_s);
    if (!app->last) app->last = now();
    print_result(app);
    exit(3);
  case PN_PROACTOR_INACTIVE:
    return 0;
  default:
    break;
  }
  return 1;
}

static void usage(void) {
  fprintf(stderr, "usage: proton-bench send|receive [--listen] --host H --port P --address A "
                  "--count N --size B --credit C --timeout S [--rate R [--tick-us T]]\n"
                  "       proton-bench probe [--cpus A,B]\n");
  exit(2);
}

/* The host's speed now, for runs on a shared machine: the same 100M dependent additions
 * (through a volatile, so neither vectorised nor folded), timed. The same instructions take
 * up to twice as long in some minutes as in others on a shared KVM guest; a run's probe,
 * taken on the broker's CPU just before and after it, says which kind of minute it had. */
static double alu_ms(void) {
  volatile unsigned long sum = 0;
  double started = now();
  for (unsigned long i = 0; i < 100000000UL; i++) sum += i * i;
  return (now() - started) * 1e3;
}

/* The cost of moving data between the broker's CPU and the clients' CPU now: a cache line
 * passed back and forth between two threads pinned to them, nanoseconds per round trip. On a
 * shared KVM guest the hypervisor moves the two virtual CPUs about: most of the time a round
 * trip takes 55-80 ns, for stretches of seconds 330-370 ns (the CPUs then sit on different
 * core complexes), and every message a broker passes between the cores pays it, while a
 * peer-to-peer run on one core does not. Waits spin, yielding after a while, so a machine
 * that runs both threads on one CPU gets slow figures rather than a hang. */
typedef struct { _Atomic long turn; char pad[56]; int cpu; } pingpong_t;
#define PINGPONG_TRIPS 200000L

static int pin_self(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void wait_turn(_Atomic long *turn, long want) {
  for (long spins = 0; atomic_load_explicit(turn, memory_order_acquire) != want; spins++)
    if (spins > 100000) sched_yield();
}

static void *pong(void *argument) {
  pingpong_t *p = argument;
  pin_self(p->cpu);
  for (long i = 0; i < PINGPONG_TRIPS; i++) {
    wait_turn(&p->turn, 2 * i + 1);
    atomic_store_explicit(&p->turn, 2 * i + 2, memory_order_release);
  }
  return NULL;
}

static double crosscore_ns(int from, int to) {
  static pingpong_t p __attribute__((aligned(64)));
  pthread_t thread;
  atomic_store(&p.turn, 0);
  p.cpu = to;
  if (pin_self(from) != 0 || pthread_create(&thread, NULL, pong, &p) != 0) return 0;
  double started = now();
  for (long i = 0; i < PINGPONG_TRIPS; i++) {
    atomic_store_explicit(&p.turn, 2 * i + 1, memory_order_release);
    wait_turn(&p.turn, 2 * i + 2);
  }
  double elapsed = now() - started;
  pthread_join(thread, NULL);
  return elapsed * 1e9 / PINGPONG_TRIPS;
}

/* The memory's speed now: nanoseconds per load of a chain of dependent loads through 64 MiB
 * in a random order (a cycle over its cache lines), so that nearly every load misses every
 * cache and waits for memory. Other tenants' memory traffic lengthens it where the loops
 * above do not notice; a broker that delivers from a backlog reads memory that way. */
#define CHASE_BYTES (64UL << 20)
#define CHASE_LOADS 500000L

static double memory_ns(void) {
  size_t lines = CHASE_BYTES / 64;
  size_t *slots = aligned_alloc(64, CHASE_BYTES);
  size_t *order = malloc(lines * sizeof *order);
  if (!slots || !order) return 0;
  for (size_t i = 0; i < lines; i++) order[i] = i;
  uint64_t seed = 88172645463325252ULL;
  for (size_t i = lines - 1; i > 0; i--) {      /* Fisher-Yates with xorshift64 */
    seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
    size_t j = seed % (i + 1), t = order[i];
    order[i] = order[j]; order[j] = t;
  }
  /* Each line's first word holds the index of the next line's first word. */
  for (size_t i = 0; i < lines; i++) slots[order[i] * 8] = order[(i + 1) % lines] * 8;
  free(order);
  volatile size_t at = 0;
  size_t position = 0;
  for (long i = 0; i < CHASE_LOADS / 10; i++) position = slots[position];   /* warm the TLB */
  double started = now();
  for (long i = 0; i < CHASE_LOADS; i++) position = slots[position];
  double elapsed = now() - started;
  at = position;
  (void)at;
  free(slots);
  return elapsed * 1e9 / CHASE_LOADS;
}

static int probe(int argc, char **argv) {
  int from = -1, to = -1;
  if (argc == 4 && !strcmp(argv[2], "--cpus")) {
    if (sscanf(argv[3], "%d,%d", &from, &to) != 2 || from < 0 || to < 0) usage();
  } else if (argc != 2) usage();
  if (from < 0) {
    printf("probe alu_ms=%.1f", alu_ms());
  } else {
    /* The loop on each CPU (alu_ms on A, alu_b_ms on B: a peer-to-peer run uses only the
       clients' CPU, a broker run both), then the round trip between them (none to measure
       when they are the same CPU). */
    pin_self(from);
    printf("probe alu_ms=%.1f", alu_ms());
    pin_self(to);
    printf(" alu_b_ms=%.1f", alu_ms());
    if (from != to) printf(" crosscore_ns=%.1f", crosscore_ns(from, to));
    pin_self(from);
    printf(" memory_ns=%.1f", memory_ns());
  }
  printf("\n");
  return 0;
}

int main(int argc, char **argv) {
  app_t app = {0};
  char addr[PN_MAX_ADDR];
  app.host = "127.0.0.1";
  app.port = "5672";
  app.address = "bench";
  app.count = 100000;
  app.size = 1024;
  app.credit = 1000;
  app.timeout_s = 300;
  app.tick_us = 20;
  if (argc < 2) usage();
  if (!strcmp(argv[1], "probe")) return probe(argc, argv);
  if (!strcmp(argv[1], "send")) app.sender = 1;
  else if (strcmp(argv[1], "receive")) usage();
  for (int i = 2; i < argc; i++) {
    const char *option = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(option, "--listen")) { app.listen = 1; continue; }
    if (!value) usage();
    i++;
    if (!strcmp(option, "--host")) app.host = value;
    else if (!strcmp(option, "--port")) app.port = value;
    else if (!strcmp(option, "--address")) app.address = value;
    else if (!strcmp(option, "--count")) app.count = atol(value);
    else if (!strcmp(option, "--size")) app.size = atoi(value);
    else if (!strcmp(option, "--credit")) app.credit = atoi(value);
    else if (!strcmp(option, "--timeout")) app.timeout_s = atof(value);
    else if (!strcmp(option, "--rate")) app.rate = atof(value);
    else if (!strcmp(option, "--tick-us")) app.tick_us = atol(value);
    else usage();
  }
  if (app.count < 1 || app.size < 0 || app.credit < 1 || (app.listen && app.sender) ||
      app.tick_us < 1 || app.tick_us > 1000000)
    usage();
  if (app.sender) encode_message(&app);
  else {
    app.seen = calloc(app.count, 1);
    app.latency_us = calloc(app.count, sizeof *app.latency_us);
    if (getenv("PROTON_BENCH_LATENCY_FILE")) app.arrived_ns = calloc(app.count, sizeof *app.arrived_ns);
  }

  app.proactor = pn_proactor();
  pn_proactor_set_timeout(app.proactor, (pn_millis_t)(app.timeout_s * 1000));
  pn_proactor_addr(addr, sizeof addr, app.host, app.port);
  if (app.listen) {
    app.listener = pn_listener();
    pn_proactor_listen(app.proactor, app.listener, addr, 16);
  } else {
    pn_transport_t *t = pn_transport();
    pn_sasl_allowed_mechs(pn_sasl(t), "ANONYMOUS");
    app.connection = pn_connection();
    pn_proactor_connect2(app.proactor, app.connection, t, addr);
  }
  for (int running = 1; running;) {
    pn_event_batch_t *events = pn_proactor_wait(app.proactor);
    for (pn_event_t *e; running && (e = pn_event_batch_next(events));)
      running = handle(&app, e);
    pn_proactor_done(app.proactor, events);
  }
  print_result(&app);
  pn_proactor_free(app.proactor);
  long done = app.sender ? app.accepted : app.received;
  if (!app.exit_code && (done != app.count || app.duplicates || app.unknown)) app.exit_code = 1;
  return app.exit_code;
}
