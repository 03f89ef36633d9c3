# Applying a NetworkPlan to the kernel, with netlink (pyroute2).
#
# Order: namespaces, then veth pairs created directly inside their two
# namespaces (nothing ever appears in the root namespace), then each host's
# addresses, routes and neighbours, then the core's, then the core's NFQUEUE
# rule. Every step is idempotent-free but undoable: removing the namespaces
# removes everything the later steps made (links, routes, rules).

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

from pyroute2 import IPRoute

from testbed.errors import EmulationError
from testbed.net._netns import NETNS_DIR, create_netns, entered_netns, nsenter_argv, write_sysctl
from testbed.net._plan import NetworkPlan

__all__ = ["build_network", "install_queue_rule"]

RT_SCOPE_LINK = 253
NUD_PERMANENT = 0x80

Step = Callable[[str], None]


def _noop(_what: str) -> None:
    pass


def build_namespaces(plan: NetworkPlan, step: Step = _noop) -> None:
    for name in plan.netns_names:
        try:
            create_netns(name)
        except FileExistsError:
            raise EmulationError(
                f"network namespace {name} already exists; run `testbed clean`"
            ) from None
        step("namespaces")


def build_links(plan: NetworkPlan, step: Step = _noop) -> None:
    core_fd = os.open(NETNS_DIR / plan.core_netns, os.O_RDONLY)
    try:
        with IPRoute() as ipr:
            for host in plan.hosts:
                host_fd = os.open(NETNS_DIR / host.netns, os.O_RDONLY)
                try:
                    ipr.link(
                        "add",
                        ifname="eth0",
                        kind="veth",
                        address=host.mac,
                        net_ns_fd=host_fd,
                        peer={
                            "ifname": host.core_ifname,
                            "address": host.core_mac,
                            "net_ns_fd": core_fd,
                        },
                    )
                finally:
                    os.close(host_fd)
                step("links")
    finally:
        os.close(core_fd)


def configure_hosts(plan: NetworkPlan, step: Step = _noop) -> None:
    for host in plan.hosts:
        with entered_netns(host.netns):
            ipr = IPRoute()
            write_sysctl("net.ipv6.conf.all.disable_ipv6", 1)
            write_sysctl("net.ipv6.conf.default.disable_ipv6", 1)
        with ipr:
            lo = ipr.link_lookup(ifname="lo")[0]
            eth0 = ipr.link_lookup(ifname="eth0")[0]
            ipr.link("set", index=lo, state="up")
            ipr.link("set", index=eth0, state="up")
            ipr.addr("add", index=eth0, address=host.ip, prefixlen=32)
            ipr.route("add", dst=f"{plan.core_ip}/32", oif=eth0, scope=RT_SCOPE_LINK)
            ipr.route("add", dst="0.0.0.0/0", gateway=plan.core_ip, oif=eth0)
            ipr.neigh(
                "add", dst=plan.core_ip, lladdr=host.core_mac, ifindex=eth0, state=NUD_PERMANENT
            )
        step("hosts")


def configure_core(plan: NetworkPlan) -> None:
    with entered_netns(plan.core_netns):
        ipr = IPRoute()
        write_sysctl("net.ipv4.ip_forward", 1)
        write_sysctl("net.ipv4.conf.all.rp_filter", 0)
        write_sysctl("net.ipv4.conf.default.rp_filter", 0)
        write_sysctl("net.ipv4.conf.all.send_redirects", 0)
        write_sysctl("net.ipv4.conf.default.send_redirects", 0)
        write_sysctl("net.ipv6.conf.all.disable_ipv6", 1)
        write_sysctl("net.ipv6.conf.default.disable_ipv6", 1)
    with ipr:
        lo = ipr.link_lookup(ifname="lo")[0]
        ipr.link("set", index=lo, state="up")
        ipr.addr("add", index=lo, address=plan.core_ip, prefixlen=32)
        for host in plan.hosts:
            port = ipr.link_lookup(ifname=host.core_ifname)[0]
            ipr.link("set", index=port, state="up")
            ipr.route("add", dst=f"{host.ip}/32", oif=port, scope=RT_SCOPE_LINK)
            ipr.neigh("add", dst=host.ip, lladdr=host.mac, ifindex=port, state=NUD_PERMANENT)


def install_queue_rule(plan: NetworkPlan, queue: int) -> str:
    """Send every forwarded packet in the core to netfilter queue `queue`.

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
            "--queue-num",
            str(queue),
        ]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode == 0:
            return tool
        errors.append(f"{tool}: {result.stderr.strip() or f'exit {result.returncode}'}")
    raise EmulationError("cannot add the NFQUEUE rule in the WAN core: " + "; ".join(errors))


def build_network(plan: NetworkPlan, step: Step = _noop) -> None:
    """Create namespaces, links, addresses and routes of `plan` (not the queue rule)."""
    build_namespaces(plan, step)
    build_links(plan, step)
    configure_hosts(plan, step)
    configure_core(plan)
