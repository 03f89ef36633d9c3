# Who is alive around us, as the scheduler sees it (seed 000 §2.1: an owner
# watches its job; seed 002 §4.2: members beat each other their queue
# lengths). Any scheduling message from a peer is a sign of life (hear());
# a SchedBeat also says its load, its cluster's residue and maxQL, and Kim's
# aggregates (Heard). Our cluster is static (set_cluster), us first; a member
# silent for `dead_after_s`, counting from when the cluster was set, is lost
# until heard from again.
#
# Rules
#   Bounded: what we heard of a peer silent for FORGET_AFTER x dead_after_s is
#   dropped (forget()), so a long run does not grow a peer's memory.

from __future__ import annotations

import math

from node.sched.config import FORGET_AFTER, Address, SchedConfig
from node.sched.records import Heard

__all__ = ["Liveness"]


class Liveness:
    """Our cluster, who we heard from and when, and what our neighbours beat us."""

    def __init__(self, config: SchedConfig, address: Address, dims: int) -> None:
        self.config = config
        self.address = address
        self.members: list[Address] = [address]  # our cluster (static), us first; alone by default
        self.lost: set[Address] = set()  # members that left or went silent (until heard again)
        self.heard: dict[Address, float] = {}  # any sched message, by sender
        self.state_of: dict[Address, Heard] = {}  # what neighbours and members last beat us
        self.above: tuple[float, ...] = (0.0,) * (2 * dims)  # Kim's aggregates, ours
        self.member_since = -math.inf  # when our cluster was set: members' silence counts from it

    def set_cluster(self, members: list[Address], now: float) -> None:
        self.members = [self.address] + [m for m in dict.fromkeys(members) if m != self.address]
        self.member_since = now

    def hear(self, source: Address, now: float) -> None:
        self.heard[source] = now
        self.lost.discard(source)

    def live(self) -> list[Address]:
        """Our cluster's members, us first, without those known to be gone."""
        return [m for m in self.members if m not in self.lost]

    def silent(self, addr: Address, since: float, now: float) -> bool:
        """Nothing from `addr` for dead_after_s, counting from `since` at the earliest."""
        return max(self.heard.get(addr, since), since) < now - self.config.dead_after_s

    def forget(self, now: float) -> None:
        """Drop what we heard of peers long silent."""
        horizon = now - FORGET_AFTER * self.config.dead_after_s
        for addr in [a for a, at in self.heard.items() if at < horizon]:
            del self.heard[addr]
        for addr in [a for a, h in self.state_of.items() if h.at < horizon]:
            del self.state_of[addr]
