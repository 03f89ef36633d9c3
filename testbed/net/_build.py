# Applying a NetworkPlan to the kernel.
#
# Order: namespaces (with their sysctls, written while inside), then veth
# pairs created directly inside their two namespaces (nothing ever appears in
# the root namespace), then each host's addresses, routes and neighbours, then
# the core's, then the core's NFQUEUE rule. Nothing is undone step by step:
# removing the namespaces removes everything the later steps made (links,
# routes, rules).
#
# Links, addresses, routes and neighbours go through iproute2's `ip -batch`:
# one process for all links, one for the core, one per host (a few at a time).
# pyroute2 did the same in-process, but each request ran its own asyncio loop:
# 50 s of 60 for 5,000 hosts. A failed command stops its batch and is reported
# with its line.

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor

from testbed.errors import EmulationError
from testbed.net._netns import create_netns, entered_netns, nsenter_argv, write_sysctl
from testbed.net._plan import NetworkPlan

__all__ = ["build_network", "install_queue_rule"]

Step = Callable[[str], None]

# `ip -batch` processes run at once for the hosts (each is mostly fork, exec and
# netlink round trips; the kernel does the work).
HOST_BATCHES_AT_ONCE = 4

HOST_SYSCTLS = {
    "net.ipv6.conf.all.disable_ipv6": 1,
    "net.ipv6.conf.default.disable_ipv6": 1,
}
CORE_SYSCTLS = {
    "net.ipv4.ip_forward": 1,
    "net.ipv4.conf.all.rp_filter": 0,
    "net.ipv4.conf.default.rp_filter": 0,
    "net.ipv4.conf.all.send_redirects": 0,
    "net.ipv4.conf.default.send_redirects": 0,
    **HOST_SYSCTLS,
}


def _noop(_what: str) -> None:
    pass


def ip_batch(commands: Iterable[str], netns: str | None = None) -> None:
    """Run iproute2 commands (one per line, without the leading `ip`) in one
    process, in namespace `netns` (None: the root namespace).

    Raises:
        EmulationError: a command failed (the batch stops there); says which.
    """
    tool_batch("ip", commands, netns)


def tool_batch(tool: str, commands: Iterable[str], netns: str | None = None) -> None:
    """Run `tool -batch -` (iproute2's ip or tc) on commands, one per line, in
    namespace `netns` (None: the root namespace).

    Raises:
        EmulationError: a command failed (the batch stops there); says which.
    """
    lines = list(commands)
    if shutil.which(tool) is None:
        raise EmulationError(
            f"iproute2's `{tool}` is not installed; `make demo` (scripts/install-system-deps.sh) "
            "installs it"
        )
    # nsenter, not `ip -n`: ip -n also unshares the mount namespace, copying every
    # mount (each namespace of the run is one): that cost grows with the run.
    argv = [*(nsenter_argv(netns) if netns else []), tool, "-batch", "-"]
    result = subprocess.run(
        argv, input="\n".join(lines) + "\n", capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        where = f"namespace {netns}" if netns else "the root namespace"
        said = "; ".join(result.stderr.strip().splitlines()[-3:]) or f"exit {result.returncode}"
        failed = re.search(r"Command failed -:(\d+)", result.stderr)
        command = f" (command: {tool} {lines[int(failed[1]) - 1]})" if failed else ""
        raise EmulationError(f"{tool} -batch in {where}: {said}{command}")


def build_namespaces(
    plan: NetworkPlan, step: Step = _noop, attached: AbstractSet[str] = frozenset()
) -> None:
    """Every namespace of the plan but those `attached` (containers' namespaces,
    already named: they only get their sysctls)."""
    for name in plan.netns_names:
        if name in attached:
            with entered_netns(name):
                for key, value in HOST_SYSCTLS.items():
                    write_sysctl(key, value)
            step("namespaces")
            continue
        try:
            create_netns(name, CORE_SYSCTLS if name == plan.core_netns else HOST_SYSCTLS)
        except FileExistsError:
            raise EmulationError(
                f"network namespace {name} already exists; run `testbed clean`"
            ) from None
        step("namespaces")


def build_links(plan: NetworkPlan, step: Step = _noop) -> None:
    """Every host's veth pair: eth0 in the host, its port in the core."""
    ip_batch(
        f"link add eth0 netns {host.netns} address {host.mac} type veth "
        f"peer name {host.core_ifname} netns {plan.core_netns} address {host.core_mac}"
        for host in plan.hosts
    )
    for _host in plan.hosts:
        step("links")


def configure_hosts(plan: NetworkPlan, step: Step = _noop) -> None:
    def one(k: int) -> None:
        host = plan.hosts[k]
        ip_batch(
            [
                "link set lo up",
                "link set eth0 up",
                f"addr add {host.ip}/32 dev eth0",
                f"route add {plan.core_ip}/32 dev eth0 scope link",
                f"route add default via {plan.core_ip} dev eth0",
                f"neigh add {plan.core_ip} lladdr {host.core_mac} dev eth0 nud permanent",
            ],
            host.netns,
        )

    with ThreadPoolExecutor(HOST_BATCHES_AT_ONCE) as pool:
        for _ in pool.map(one, range(len(plan.hosts))):
            step("hosts")


def configure_core(plan: NetworkPlan) -> None:
    commands = ["link set lo up", f"addr add {plan.core_ip}/32 dev lo"]
    for host in plan.hosts:
        port = host.core_ifname
        commands += [
            f"link set {port} up",
            f"route add {host.ip}/32 dev {port} scope link",
            f"neigh add {host.ip} lladdr {host.mac} dev {port} nud permanent",
        ]
    ip_batch(commands, plan.core_netns)


def install_queue_rule(plan: NetworkPlan, queue: int, queues: int = 1) -> str:
    """Send every forwarded packet in the core to netfilter queue `queue` (or,
    with queues > 1, spread over queue..queue+queues-1 by a hash of the address
    pair that keeps both directions of a pair on one queue).

    No --queue-bypass: if the engine is not there, packets are dropped rather
    than forwarded undelayed (an experiment must never silently run without
    its latencies). Returns the iptables flavour that worked.

    Raises:
        EmulationError: neither iptables nor iptables-legacy could add the rule.
    """
    errors = []
    for tool in ("iptables", "iptables-legacy"):
        if shutil.which(tool) is None:
            errors.append(f"{tool}: not installed")
            continue
        argv = [
            *nsenter_argv(plan.core_netns),
            tool,
            "-w",
            "-A",
            "FORWARD",
            "-j",
            "NFQUEUE",
            *(
                ["--queue-balance", f"{queue}:{queue + queues - 1}"]
                if queues > 1
                else ["--queue-num", str(queue)]
            ),
        ]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode == 0:
            return tool
        errors.append(f"{tool}: {result.stderr.strip() or f'exit {result.returncode}'}")
    raise EmulationError("cannot add the NFQUEUE rule in the WAN core: " + "; ".join(errors))


# The core's nftables rules. Anti-spoofing: a packet that comes from a host's
# port (h<k>) with a source address that is not that host's is dropped and
# counted (`spoofed`) before anything else sees it (priority raw). Marks: what
# the delay engine marked on a verdict (fastpath.c): bit 1 = deliver a copy too,
# bit 2 = set ECN CE (the packet is ECN-capable).
CORE_NFT_RULES = """
table ip testbed_wan {
  set hosts { type ifname . ipv4_addr; }
  counter spoofed { }
  chain antispoof {
    type filter hook prerouting priority raw; policy accept;
    iifname "h*" iifname . ip saddr != @hosts counter name "spoofed" drop
  }
  chain marks {
    type filter hook postrouting priority 0; policy accept;
    meta mark & 0x1 == 0x1 dup to ip daddr
    meta mark & 0x2 == 0x2 ip ecn set ce
  }
}
"""


def install_mark_rules(plan: NetworkPlan) -> None:
    """The core's nftables rules: anti-spoofing on the hosts' ports, and the
    duplicates and CE marks the engine asks for.

    Raises:
        EmulationError: nft is missing or refused them.
    """
    if shutil.which("nft") is None:
        raise EmulationError(
            "nftables' `nft` is not installed (duplication, ECN marks and anti-spoofing need "
            "it); `make install` (scripts/install-system-deps.sh) installs it"
        )
    elements = ", ".join(f'"{h.core_ifname}" . {h.ip}' for h in plan.hosts)
    rules = CORE_NFT_RULES + (
        f"add element ip testbed_wan hosts {{ {elements} }}\n" if elements else ""
    )
    result = subprocess.run(
        [*nsenter_argv(plan.core_netns), "nft", "-f", "-"],
        input=rules,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise EmulationError(f"nft in the WAN core refused its rules: {result.stderr.strip()}")


def spoofed_packets(plan: NetworkPlan) -> int:
    """How many packets the core dropped for a source address not their host's."""
    result = subprocess.run(
        [*nsenter_argv(plan.core_netns), "nft", "-j", "list", "counter", "ip", "testbed_wan",
         "spoofed"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise EmulationError(f"nft in the WAN core: {result.stderr.strip()}")
    for item in json.loads(result.stdout)["nftables"]:
        if "counter" in item:
            return int(item["counter"]["packets"])
    raise EmulationError("nft in the WAN core has no `spoofed` counter")


def build_network(
    plan: NetworkPlan, step: Step = _noop, attached: AbstractSet[str] = frozenset()
) -> None:
    """Create namespaces (but those `attached`: containers'), links, addresses and
    routes of `plan` (not the queue rule)."""
    build_namespaces(plan, step, attached)
    build_links(plan, step)
    configure_hosts(plan, step)
    configure_core(plan)
