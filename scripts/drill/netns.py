"""The drill's hosts: network namespaces on one private bridge, and the faults a network can have.

Why namespaces: a deployment of separate hosts fails in ways one host cannot show — a worker cut off from
Postgres and Redis while the others carry on, a slow link to one host. Each host here is a network
namespace with its own interface on a bridge in the root namespace; processes of a host run inside it
(`ip netns exec`), so a firewall rule or a rate limit on its interface touches that host alone.

Everything is named with the PREFIX so that a run can find and remove what an earlier, killed run left
(`destroy_all`). Traffic only ever goes to the addresses made here (SUBNET), never anywhere else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass

PREFIX = "fgd"
BRIDGE = f"{PREFIX}-br"
SUBNET = "10.231.0"  # /24, private, on no interface of this machine (checked in `check_subnet_free`)
BRIDGE_IP = f"{SUBNET}.1"


@dataclass(frozen=True)
class Host:
    """One namespace: its name, its address and the name of its veth's root-side end."""

    name: str
    ip: str

    @property
    def ns(self) -> str:
        return f"{PREFIX}-{self.name}"

    @property
    def veth(self) -> str:
        return f"{PREFIX}-{self.name}-h"


def sh(*argv: str, check: bool = True, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    """Run one command (bounded), capturing its output."""
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=timeout)


def in_ns(host: Host, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", host.ns, *argv]


def check_subnet_free() -> None:
    """Refuse to run when SUBNET is already in use on this machine (someone else's network)."""
    out = sh("ip", "-4", "-o", "addr").stdout
    for line in out.splitlines():
        if f" {SUBNET}." in line and BRIDGE not in line:
            raise SystemExit(f"drill: {SUBNET}.0/24 is already used on this machine: {line.strip()}")


def create(hosts: list[Host]) -> None:
    """The bridge with the root namespace on BRIDGE_IP, and one namespace per host plugged into it."""
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for h in hosts:
        sh("ip", "netns", "add", h.ns)
        sh("ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
        sh("ip", "link", "set", h.veth, "master", BRIDGE)
        sh("ip", "link", "set", h.veth, "up")
        sh(*in_ns(h, "ip", "addr", "add", f"{h.ip}/24", "dev", "eth0"))
        sh(*in_ns(h, "ip", "link", "set", "eth0", "up"))
        sh(*in_ns(h, "ip", "link", "set", "lo", "up"))


def namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"{PREFIX}-")]


def kill_ns_processes(ns: str) -> None:
    """End every process still inside a namespace (SIGCONT first: a paused one cannot die of SIGTERM)."""
    for sig in (signal.SIGCONT, signal.SIGTERM, None, signal.SIGKILL):
        pids = [int(p) for p in sh("ip", "netns", "pids", ns, check=False).stdout.split()]
        if not pids:
            return
        if sig is None:
            time.sleep(2.0)
            continue
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    time.sleep(0.5)


def destroy_all() -> None:
    """Remove every namespace and the bridge of this drill (this run's or a killed earlier one's)."""
    for ns in namespaces():
        kill_ns_processes(ns)
        sh("ip", "netns", "del", ns, check=False)
    sh("ip", "link", "del", BRIDGE, check=False)


# --- faults ---------------------------------------------------------------------------------------------


def partition(host: Host, peers: list[Host]) -> None:
    """Drop every packet between `host` and `peers`, both ways, silently (no RST, no ICMP): a cut cable."""
    for p in peers:
        sh(*in_ns(host, "iptables", "-A", "OUTPUT", "-d", p.ip, "-j", "DROP"))
        sh(*in_ns(host, "iptables", "-A", "INPUT", "-s", p.ip, "-j", "DROP"))


def heal(host: Host) -> None:
    sh(*in_ns(host, "iptables", "-F"), check=False)


def slow_link(host: Host, kbit: int) -> None:
    """Limit `host`'s link to `kbit` kbit/s each way: a token bucket on its own interface (what it sends)
    and on the bridge's end of its cable (what it receives). netem is not available here, so there is no
    added delay beyond the queueing the buckets cause."""
    tbf = ["root", "tbf", "rate", f"{kbit}kbit", "burst", "4kb", "latency", "500ms"]
    sh(*in_ns(host, "tc", "qdisc", "add", "dev", "eth0", *tbf))
    sh("tc", "qdisc", "add", "dev", host.veth, *tbf)


def fast_link(host: Host) -> None:
    sh(*in_ns(host, "tc", "qdisc", "del", "dev", "eth0", "root"), check=False)
    sh("tc", "qdisc", "del", "dev", host.veth, "root", check=False)
