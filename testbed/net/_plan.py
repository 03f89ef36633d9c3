# The network plan: every name, address and MAC of an emulated WAN, as data.
#
# Planning is pure (no root, no kernel): it can be tested anywhere and it fails
# before anything is created. Applying the plan is _build.py's job.
#
# Naming (after Mininet's scheme, with a run prefix):
#   host k (1-based)  name "h<k>", IPv4 <subnet base> + k  (h1 = 10.0.0.1),
#                     namespace "tb<run>-h<k>", interface "eth0",
#                     MAC 02:00:<k as 4 bytes>
#   the WAN core      namespace "tb<run>-core", one interface per host named
#                     "h<k>" with MAC 02:01:<k>, the address <last usable of
#                     the subnet> (10.255.255.254) on its loopback
# Hosts reach everything through the core: a /32 on eth0, a link route to the
# core's address and a default route via it; permanent neighbour entries on
# both sides, so no ARP ever runs. Each host has its own port on the core (no
# bridge): there is no port limit, and no shared segment whose per-link delays
# would turn the matrix into a tree metric.

from __future__ import annotations

import dataclasses
import ipaddress
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from testbed.errors import EmulationError

__all__ = ["IFNAMSIZ", "NETNS_PREFIX_RE", "HostPlan", "NetworkPlan", "new_run_id", "plan_network"]

IFNAMSIZ = 15  # usable characters in a Linux interface name
RUN_ID_RE = re.compile(r"^[0-9a-f]{4,8}$")
# Every namespace the testbed creates matches this; `testbed clean` relies on it.
NETNS_PREFIX_RE = re.compile(r"^tb([0-9a-f]{4,8})-(core|h[0-9]+)$")


def new_run_id() -> str:
    return secrets.token_hex(3)


def _mac(kind: int, number: int) -> str:
    raw = bytes([0x02, kind]) + number.to_bytes(4, "big")
    return ":".join(f"{b:02x}" for b in raw)


@dataclass(frozen=True, slots=True)
class HostPlan:
    """One emulated host."""

    index: int  # 0-based, the row of the matrix
    name: str  # "h1"
    ip: str
    mac: str
    netns: str
    core_ifname: str
    core_mac: str

    @property
    def number(self) -> int:
        """1-based host number (the k of "h<k>")."""
        return self.index + 1


@dataclass(frozen=True, slots=True)
class NetworkPlan:
    run_id: str
    subnet: str
    ip_base: int  # host k has address ip_base + k
    core_ip: str
    core_netns: str
    hosts: tuple[HostPlan, ...]

    @property
    def netns_names(self) -> list[str]:
        return [self.core_netns, *(h.netns for h in self.hosts)]

    def site(self, site_run_id: str, indices: Sequence[int]) -> NetworkPlan:
        """The part of this plan one machine builds: hosts `indices` (their addresses
        and names unchanged) in namespaces named after `site_run_id`, on a core of
        its own."""
        if not RUN_ID_RE.match(site_run_id):
            raise EmulationError(f"run id must be 4 to 8 lowercase hex digits, not {site_run_id!r}")
        hosts = tuple(
            dataclasses.replace(self.hosts[k], netns=f"tb{site_run_id}-h{self.hosts[k].number}")
            for k in indices
        )
        return dataclasses.replace(
            self, run_id=site_run_id, core_netns=f"tb{site_run_id}-core", hosts=hosts
        )


def plan_network(n_hosts: int, run_id: str, *, subnet: str = "10.0.0.0/8") -> NetworkPlan:
    """Name and number n_hosts hosts and the core.

    Raises:
        EmulationError: bad count, run id or subnet, or a subnet too small.
    """
    if not isinstance(n_hosts, int) or isinstance(n_hosts, bool) or n_hosts < 1:
        raise EmulationError(f"the host count must be a positive integer, not {n_hosts!r}")
    if not RUN_ID_RE.match(run_id):
        raise EmulationError(f"run id must be 4 to 8 lowercase hex digits, not {run_id!r}")
    try:
        network = ipaddress.IPv4Network(subnet, strict=True)
    except ValueError as exc:
        raise EmulationError(f"subnet {subnet!r} is not an IPv4 network: {exc}") from None
    # Usable: base+1 .. broadcast-1, minus one address for the core.
    capacity = network.num_addresses - 3
    if n_hosts > capacity:
        raise EmulationError(
            f"subnet {subnet} holds at most {max(capacity, 0)} hosts, not {n_hosts}"
        )
    base = int(network.network_address)
    core_ip = str(network.broadcast_address - 1)
    hosts = []
    for index in range(n_hosts):
        k = index + 1
        core_ifname = f"h{k}"
        if len(core_ifname) > IFNAMSIZ:  # cannot happen below 10**14 hosts; checked anyway
            raise EmulationError(
                f"interface name {core_ifname!r} is longer than {IFNAMSIZ} characters"
            )
        hosts.append(
            HostPlan(
                index=index,
                name=f"h{k}",
                ip=str(ipaddress.IPv4Address(base + k)),
                mac=_mac(0x00, k),
                netns=f"tb{run_id}-h{k}",
                core_ifname=core_ifname,
                core_mac=_mac(0x01, k),
            )
        )
    return NetworkPlan(run_id, subnet, base, core_ip, f"tb{run_id}-core", tuple(hosts))
