"""Hosts in network namespaces on one machine, and the faults a cluster must survive.

``Network`` makes one namespace per host (``ip netns``), joined by veth pairs to a bridge in a
hub namespace of its own, so every host reaches every other at ``10.77.N.i`` and nothing
touches the machine's own interfaces. Faults:

- ``kill`` (SIGKILL), ``pause`` / ``resume`` (SIGSTOP / SIGCONT) of a process a host runs;
- ``cut`` / ``heal``: drop what a host receives from (``inbound``) or sends to
  (``outbound``) some peers, all of it or a share of the packets (nftables ``numgen random``:
  a partition, an asymmetric one, or loss). This kernel has no ``sch_netem``
  (``tc qdisc … netem`` answers "Specified qdisc kind is unknown"), so delay is not
  injected here; loss makes TCP retransmit, which delays.

Everything is removed when the ``with`` block ends, failed or not: the processes it started
are killed, the namespaces (and with them their veths and nftables tables) deleted. Needs
root and iproute2 and nftables; ``available()`` says whether this machine has them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from typing import Dict, List, Optional, Sequence


def available() -> Optional[str]:
    """``None`` when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2, nftables)"
    return None


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


class Network:
    """Hosts ``names`` in namespaces of their own, addressed ``10.77.<net>.<1..>``."""

    def __init__(self, names: Sequence[str], net: Optional[int] = None) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.net = net if net is not None else 100 + os.getpid() % 100
        self.names = list(names)
        self.hub = f"fbhub-{self.tag}"
        self.address: Dict[str, str] = {
            name: f"10.77.{self.net}.{index + 1}" for index, name in enumerate(self.names)
        }
        self.processes: List[subprocess.Popen] = []
        self._made: List[str] = []

    def namespace(self, name: str) -> str:
        return f"fb{name}-{self.tag}"

    def __enter__(self) -> "Network":
        try:
            _run("ip", "netns", "add", self.hub)
            self._made.append(self.hub)
            _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", self.hub, "link", "set", "br0", "up")
            for index, name in enumerate(self.names):
                namespace = self.namespace(name)
                _run("ip", "netns", "add", namespace)
                self._made.append(namespace)
                host, port = f"h{index}{self.tag}", f"p{index}{self.tag}"
                _run("ip", "link", "add", host, "type", "veth", "peer", "name", port)
                _run("ip", "link", "set", host, "netns", namespace)
                _run("ip", "link", "set", port, "netns", self.hub)
                _run("ip", "-n", self.hub, "link", "set", port, "master", "br0")
                _run("ip", "-n", self.hub, "link", "set", port, "up")
                _run("ip", "-n", namespace, "link", "set", host, "name", "eth0")
                _run("ip", "-n", namespace, "addr", "add", f"{self.address[name]}/24", "dev", "eth0")
                _run("ip", "-n", namespace, "link", "set", "eth0", "up")
                _run("ip", "-n", namespace, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                try:
                    process.send_signal(signal.SIGCONT)
                    process.kill()
                except ProcessLookupError:
                    pass
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        self.processes.clear()
        for namespace in reversed(self._made):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        self._made.clear()

    # Processes.

    def start(self, name: str, argv: Sequence[str], **popen) -> subprocess.Popen:
        """Starts ``argv`` on host ``name``; killed when the network closes."""
        process = subprocess.Popen(
            ["ip", "netns", "exec", self.namespace(name), *argv], **popen
        )
        self.processes.append(process)
        return process

    def run(self, name: str, argv: Sequence[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
        """Runs ``argv`` on host ``name`` to its end (at most ``timeout`` seconds)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.namespace(name), *argv], timeout=timeout, **kwargs
        )

    @staticmethod
    def kill(process: subprocess.Popen) -> None:
        """SIGKILL, as a crash: nothing the process had not made durable survives."""
        process.kill()
        process.wait(timeout=10)

    @staticmethod
    def pause(process: subprocess.Popen) -> None:
        process.send_signal(signal.SIGSTOP)

    @staticmethod
    def resume(process: subprocess.Popen) -> None:
        process.send_signal(signal.SIGCONT)

    # Packets.

    def cut(
        self,
        name: str,
        peers: Sequence[str],
        direction: str = "inbound",
        percent: int = 100,
    ) -> None:
        """Host ``name`` drops ``percent`` % of the packets it receives from ``peers``
        (``inbound``) or sends to them (``outbound``)."""
        if direction not in ("inbound", "outbound"):
            raise ValueError(f"direction {direction!r}: inbound or outbound")
        if not 0 < percent <= 100:
            raise ValueError(f"percent {percent}: 1 to 100")
        hook, field = ("input", "saddr") if direction == "inbound" else ("output", "daddr")
        chain = direction
        namespace = self.namespace(name)
        script = [
            "table inet fault {",
            f"  chain {chain} {{ type filter hook {hook} priority 0; policy accept; }}",
            "}",
        ]
        self._nft(namespace, "\n".join(script))
        chance = "" if percent == 100 else f"numgen random mod 100 < {percent} "
        for peer in peers:
            self._nft(
                namespace,
                f"add rule inet fault {chain} ip {field} {self.address[peer]} {chance}drop",
            )

    def heal(self, name: str) -> None:
        """Host ``name`` drops nothing any more."""
        subprocess.run(
            ["ip", "netns", "exec", self.namespace(name), "nft", "delete", "table", "inet", "fault"],
            capture_output=True,
        )

    @staticmethod
    def _nft(namespace: str, script: str) -> None:
        subprocess.run(
            ["ip", "netns", "exec", namespace, "nft", "-f", "-"],
            input=script,
            check=True,
            capture_output=True,
            text=True,
        )
