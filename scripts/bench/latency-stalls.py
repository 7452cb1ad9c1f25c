#!/usr/bin/env python3
"""Which slow messages of a paced run coincide with another task taking the broker's core.

    latency-stalls.py LATENCIES SWITCHES [--broker-cpu N] [--client-cpu N] [--threshold US]
                      [--min-run US] [--before US]

LATENCIES: the receiver's PROTON_BENCH_LATENCY_FILE (per message, arrival order: latency in
µs and arrival time in CLOCK_MONOTONIC ns). SWITCHES: `perf script -F time,cpu,event,trace`
of `perf record -k CLOCK_MONOTONIC -e sched:sched_switch -C <broker CPU>,<client CPU>` over
the same run (the same clock, so the two line up). A message is "disturbed" when a task that
does not belong on that CPU (the broker's threads on the broker's CPU, proton-bench on the
clients' CPU; the idle task on either) ran there for at least --min-run µs (default 100)
between the message's due time and its arrival, or ended shortly before it was due (within
--before µs, default 1000, or three times the run's length if longer): while it runs, the
broker (or the paced sender, or the receiver) cannot, and what queued meanwhile is worked
off after it, while new messages keep coming (at 70 % load a backlog takes about 2.3 times
as long to clear as it took to build).

Prints the tasks that took the broker's CPU (count, total and longest run), the latency
percentiles of all messages and of the undisturbed ones, and how many of the messages above
--threshold µs (default 500) were disturbed.
"""
import argparse
import bisect
import collections
import re


def percentiles(values):
    values = sorted(values)
    n = len(values)
    if n == 0:
        return "none"
    return "p50 %.0f  p99 %.0f  p99.9 %.0f  max %.0f  (%d messages)" % (
        values[n // 2], values[int(n * 0.99)], values[int(n * 0.999)], values[-1], n)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("latencies")
    parser.add_argument("switches")
    parser.add_argument("--broker-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--threshold", type=float, default=500)
    parser.add_argument("--min-run", type=float, default=100)
    parser.add_argument("--before", type=float, default=1000)
    parser.add_argument("--fields", action="store_true",
                        help="also print one line 'fields clean_p50=… clean_p99=… "
                        "clean_p999=… slow=… slow_disturbed=…' for scripts/bench/independent")
    args = parser.parse_args()

    messages = []
    with open(args.latencies) as lines:
        for line in lines:
            latency_text, arrived_text = line.split()
            latency, arrived = float(latency_text), int(arrived_text) / 1e9
            messages.append((latency, arrived - latency / 1e6, arrived))

    switches = collections.defaultdict(list)  # cpu -> (time, pid, comm) switched in
    pattern = re.compile(r"\s*\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch:.*?prev_pid=(\d+).*"
                         r"==> next_comm=(.*?) next_pid=(\d+)")
    with open(args.switches) as lines:
        for line in lines:
            match = pattern.match(line)
            if match:
                switches[int(match.group(1))].append(
                    (float(match.group(2)), int(match.group(5)), match.group(4)))

    # What belongs on each CPU, by thread name: the broker's (ferrobus's runtime threads, the
    # Proton-C example broker) and the clients'.
    def belongs(cpu, comm):
        if cpu == args.broker_cpu:
            return comm.startswith(("tokio-rt-worker", "ferrobus", "proton-broker"))
        return comm.startswith("proton-bench")

    runs = []  # (start, end, "cpu N: comm") of tasks that do not belong
    for cpu, events in switches.items():
        if cpu not in (args.broker_cpu, args.client_cpu):
            continue
        for (start, pid, comm), (end, _, _) in zip(events, events[1:]):
            if pid == 0 or belongs(cpu, comm):
                continue
            if (end - start) * 1e6 >= args.min_run:
                role = "broker" if cpu == args.broker_cpu else "client"
                runs.append((start, end, "%s CPU %d: %s" % (role, cpu, comm)))
    runs.sort()
    first_due = min(due for _, due, _ in messages)
    last_arrival = max(arrived for _, _, arrived in messages)
    runs = [run for run in runs if run[1] >= first_due - 0.01 and run[0] <= last_arrival]
    by_task = collections.defaultdict(list)
    for start, end, comm in runs:
        by_task[comm].append((end - start) * 1e3)
    print("other tasks that ran >= %.0f µs on the broker's or the clients' CPU:" % args.min_run)
    for comm, lengths in sorted(by_task.items(), key=lambda item: -sum(item[1])):
        print("  %-34s %4d runs, %7.2f ms in all, longest %.2f ms"
              % (comm, len(lengths), sum(lengths), max(lengths)))

    starts = [start for start, _, _ in runs]
    longest = max([end - start for start, end, _ in runs], default=0)
    clean, slow, slow_disturbed = [], 0, 0
    reach = max(args.before / 1e6, 3 * longest)
    for latency, due, arrived in messages:
        # a run that starts before the arrival and ends after (due - its reach)
        index = bisect.bisect_left(starts, due - longest - reach)
        disturbed = False
        while index < len(runs) and runs[index][0] <= arrived:
            start, end, _ = runs[index]
            if end + max(args.before / 1e6, 3 * (end - start)) >= due:
                disturbed = True
                break
            index += 1
        if not disturbed:
            clean.append(latency)
        if latency > args.threshold:
            slow += 1
            slow_disturbed += disturbed
    print("all messages:          " + percentiles([m[0] for m in messages]))
    print("undisturbed messages:  " + percentiles(clean))
    print("messages above %.0f µs: %d, of which disturbed: %d (%.0f %%)"
          % (args.threshold, slow, slow_disturbed, 100 * slow_disturbed / max(slow, 1)))
    if args.fields:
        clean.sort()
        n = len(clean)
        if n:
            print("fields clean_p50=%.1f clean_p99=%.1f clean_p999=%.1f slow=%d slow_disturbed=%d"
                  % (clean[n // 2], clean[int(n * 0.99)], clean[int(n * 0.999)], slow,
                     slow_disturbed))


if __name__ == "__main__":
    main()
