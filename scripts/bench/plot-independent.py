"""Plots a scripts/bench/independent result file: msg/s received per peer and round (dots),
with each peer's median (bar), and broker CPU per message beside it; for a paced run
(--rate), also each peer's send → receive latency percentiles (median over the runs).

    python3 scripts/bench/plot-independent.py RESULTS.txt OUT.png

Needs matplotlib; the calling script checks for it and skips the plot when it is missing.
"""
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PEERS = ["ferrobus", "proton", "p2p", "baseline", "s1"]
LABELS = {
    "ferrobus": "ferrobus",
    "proton": "Proton-C\nexample broker",
    "p2p": "peer-to-peer\n(no broker)",
    "baseline": "ferrobus\n(older build)",
    "s1": "ferrobus,\none queue",
}
COLOURS = {"ferrobus": "#c0392b", "proton": "#2c7fb8", "p2p": "#7f7f7f", "baseline": "#e6a04e", "s1": "#8e44ad"}
PERCENTILES = [("latency_us_p50", "p50"), ("latency_us_p99", "p99"), ("latency_us_p999", "p99.9")]


def read(path):
    runs, header = [], []
    with open(path, encoding="utf-8") as results:
        for line in results:
            if line.startswith("# "):
                header.append(line[2:].strip())
            if not line.startswith("result "):
                continue
            fields = dict(item.split("=", 1) for item in line.split()[1:] if "=" in item)
            runs.append(fields)
    return runs, header


def main():
    source, target = sys.argv[1], sys.argv[2]
    runs, header = read(source)
    peers = [peer for peer in PEERS if any(run["peer"] == peer for run in runs)]
    paced = any(run.get("latency_us_p50") and run.get("rate", "0") != "0" for run in runs)
    if paced:
        figure, (rate_axes, cpu_axes, latency_axes) = plt.subplots(
            1, 3, figsize=(14, 4.2), gridspec_kw={"width_ratios": [3, 2, 3]}
        )
    else:
        figure, (rate_axes, cpu_axes) = plt.subplots(
            1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [3, 2]}
        )
    for index, peer in enumerate(peers):
        mine = [run for run in runs if run["peer"] == peer]
        rates = [float(run["received_per_s"]) / 1000 for run in mine]
        rate_axes.bar(index, statistics.median(rates), width=0.6, color=COLOURS[peer], alpha=0.35)
        offsets = [index - 0.2 + 0.4 * i / max(1, len(mine) - 1) for i in range(len(mine))]
        rate_axes.scatter(offsets, rates, color=COLOURS[peer], zorder=3, s=22)
        for x, run, rate in zip(offsets, mine, rates):
            rate_axes.annotate(run["round"], (x, rate), textcoords="offset points",
                               xytext=(0, 4), ha="center", fontsize=7)
        rate_axes.annotate(f"{statistics.median(rates):.0f}k", (index, 0),
                           textcoords="offset points", xytext=(0, 4), ha="center",
                           fontsize=9, fontweight="bold")
        if peer != "p2p":
            cpu = [float(run["broker_us_per_msg"]) for run in mine]
            cpu_axes.bar(index, statistics.median(cpu), width=0.6, color=COLOURS[peer], alpha=0.35)
            cpu_axes.scatter(offsets, cpu, color=COLOURS[peer], zorder=3, s=22)
            cpu_axes.annotate(f"{statistics.median(cpu):.2f}", (index, 0),
                              textcoords="offset points", xytext=(0, 4), ha="center",
                              fontsize=9, fontweight="bold")
    rate_axes.set_xticks(range(len(peers)), [LABELS[peer] for peer in peers])
    rate_axes.set_ylabel("messages received per second (thousands)")
    rate_axes.set_title("msg/s per run (dot, round number) and median (bar)", fontsize=10)
    rate_axes.set_ylim(bottom=0)
    broker_peers = [peer for peer in peers if peer != "p2p"]
    # The CPU bars stand where their peer stands in the left chart (peer-to-peer has none).
    cpu_axes.set_xticks([peers.index(peer) for peer in broker_peers],
                        [LABELS[peer] for peer in broker_peers])
    cpu_axes.set_ylabel("broker CPU µs per message")
    cpu_axes.set_title("broker CPU per message", fontsize=10)
    cpu_axes.set_ylim(bottom=0)
    for axes in (rate_axes, cpu_axes):
        axes.grid(axis="y", alpha=0.3)
    if paced:
        width = 0.8 / len(peers)
        for index, peer in enumerate(peers):
            mine = [run for run in runs if run["peer"] == peer and run.get("latency_us_p50")]
            if not mine:
                continue
            values = [statistics.median(float(run[key]) for run in mine) for key, _ in PERCENTILES]
            xs = [position + (index - (len(peers) - 1) / 2) * width for position in range(3)]
            latency_axes.bar(xs, values, width=width, color=COLOURS[peer], label=LABELS[peer])
            for x, value in zip(xs, values):
                latency_axes.annotate(f"{value:.0f}", (x, value), textcoords="offset points",
                                      xytext=(0, 2), ha="center", fontsize=7)
        latency_axes.set_xticks(range(3), [label for _, label in PERCENTILES])
        latency_axes.set_yscale("log")
        latency_axes.set_ylabel("send → receive latency, µs (log scale)")
        latency_axes.set_title("latency at a fixed rate (median of the runs)", fontsize=10)
        latency_axes.legend(fontsize=7)
        latency_axes.grid(axis="y", alpha=0.3)
    settings = next((line for line in header if line.startswith("client=")), "")
    queues = next((run.get("queues") for run in runs if run.get("queues")), "1")
    shape = ("1 sender → queue → 1 receiver" if queues == "1"
             else f"{queues} × (1 sender → queue → 1 receiver) at once")
    figure.suptitle(f"Independent client (Qpid Proton-C): {shape}, at-least-once\n" + settings,
                    fontsize=9)
    figure.tight_layout()
    figure.savefig(target, dpi=110)
    print(f"plot: {target}")


if __name__ == "__main__":
    main()
