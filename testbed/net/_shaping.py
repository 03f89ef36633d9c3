# Access links: each host's up and down bandwidth, shaped by the kernel.
#
# Theory of operation
#   A host's upload is its veth's egress in its own namespace (eth0); its
#   download is the core's port towards it (h<k> in the core namespace), which
#   a packet reaches after the delay engine released it. So a packet queues for
#   its sender's uplink, then travels its pair's delay, then queues for the
#   receiver's downlink, in that order, as on a real path whose bottlenecks are
#   the access links. Each direction is an HTB class at the rate (ceil = rate)
#   with a drop-tail FIFO leaf: bfifo for a queue in bytes, pfifo in packets.
#   Per-pair path bandwidth (state per pair) is the engine's (fastpath.c).
#
# Rules
#   1. Every argument is checked before any qdisc changes; units are in the
#      names (mbit, bytes, packets).
#   2. One `tc -batch` per namespace; a failure names the command.

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from testbed.errors import EmulationError
from testbed.net._build import tool_batch
from testbed.net._plan import NetworkPlan

__all__ = ["AccessLink", "apply_access"]

MAX_MBIT = 100_000.0


@dataclass(frozen=True, slots=True)
class AccessLink:
    """One host's access link: rates in Mbit/s (None = not shaped), a drop-tail
    queue per direction in bytes or packets (one of them)."""

    up_mbit: float | None = None
    down_mbit: float | None = None
    queue_bytes: int = 0
    queue_packets: int = 0

    def __post_init__(self) -> None:
        for name in ("up_mbit", "down_mbit"):
            value = getattr(self, name)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or not 0.001 <= value <= MAX_MBIT
            ):
                raise EmulationError(
                    f"access link: {name} must be a rate in Mbit/s within 0.001..{MAX_MBIT:.0f}, "
                    f"not {value!r}"
                )
        for name in ("queue_bytes", "queue_packets"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 30:
                raise EmulationError(
                    f"access link: {name} must be a whole number >= 0, not {value!r}"
                )
        shaped = self.up_mbit is not None or self.down_mbit is not None
        if shaped and bool(self.queue_bytes) == bool(self.queue_packets):
            raise EmulationError(
                "access link: give the queue's size as queue_bytes or queue_packets (one, > 0)"
            )
        if not shaped and (self.queue_bytes or self.queue_packets):
            raise EmulationError("access link: a queue without up_mbit or down_mbit")
        if self.queue_bytes and self.queue_bytes < 1514:
            raise EmulationError(
                f"access link: a queue of {self.queue_bytes} bytes cannot hold one full frame (1,514)"
            )

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "up_mbit": self.up_mbit,
            "down_mbit": self.down_mbit,
            "queue_bytes": self.queue_bytes,
            "queue_packets": self.queue_packets,
        }


def _burst_bytes(rate_mbit: float) -> int:
    # One millisecond at the rate, at least two full frames: smaller bursts cost
    # throughput (HTB refills per timer tick), larger ones let bursts through unshaped.
    return max(2 * 1514, int(rate_mbit * 1e6 / 8 * 0.001))


def _commands(dev: str, rate_mbit: float | None, link: AccessLink) -> list[str]:
    commands = [f"qdisc del dev {dev} root"]  # may fail when nothing is there: see below
    if rate_mbit is None:
        return commands
    rate_bit = int(rate_mbit * 1e6)
    burst = _burst_bytes(rate_mbit)
    leaf = (
        f"bfifo limit {link.queue_bytes}"
        if link.queue_bytes
        else f"pfifo limit {link.queue_packets}"
    )
    return [
        *commands,
        f"qdisc add dev {dev} root handle 1: htb default 1 r2q 1",
        (
            f"class add dev {dev} parent 1: classid 1:1 htb rate {rate_bit}bit "
            f"ceil {rate_bit}bit burst {burst} cburst {burst}"
        ),
        f"qdisc add dev {dev} parent 1:1 handle 10: {leaf}",
    ]


def apply_access(
    plan: NetworkPlan, hosts: Sequence[int], link: AccessLink, shaped: set[tuple[str, str]]
) -> None:
    """Shape (or with no rates, unshape) the access links of host indices `hosts`.

    `shaped` holds the (namespace, device) pairs shaped so far; it is updated.

    Raises:
        EmulationError: tc refused a command (it names it).
    """
    batches: dict[str, list[str]] = defaultdict(list)
    after = set(shaped)
    planned = {hp.index: hp for hp in plan.hosts}  # one machine's share holds some hosts
    for index in hosts:
        hp = planned[index]
        for netns, dev, rate in (
            (hp.netns, "eth0", link.up_mbit),
            (plan.core_netns, hp.core_ifname, link.down_mbit),
        ):
            commands = _commands(dev, rate, link)
            if (netns, dev) not in shaped:
                commands = commands[1:]  # nothing to delete
            batches[netns].extend(commands)
            if rate is None:
                after.discard((netns, dev))
            else:
                after.add((netns, dev))
    for netns, commands in batches.items():
        if commands:
            tool_batch("tc", commands, netns)
    shaped.clear()
    shaped.update(after)
