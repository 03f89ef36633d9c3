# What every scheduling role shares (seed 002 §4.2, seed 000 §3.1): the
# configuration, who we are, the overlay's read-only view, the peer's random
# generator, the two outputs (datagrams through `send`, events through
# `emit`), the timer wake-up, the counters of what happened, and whether we
# have left. One Context per SchedAgent, handed to each role at construction.
#
# Rules
#   Roles share state only through objects passed in explicitly (this one,
#   node.sched.liveness.Liveness, and the narrow callables a role is given),
#   never by inheriting from each other.
#   Every random draw comes from `rng`, in the order the roles make them: a
#   peer's run is a function of its seed (STYLE.md §1).

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from node.events import Event
from node.sched.config import Address, SchedConfig
from node.sched.view import OverlayView
from node.wire import Endpoint, Message

__all__ = ["Context"]


@dataclass
class Context:
    config: SchedConfig
    address: Address
    view: OverlayView
    rng: random.Random
    send: Callable[[Address, Message], None]
    emit: Callable[[Event], None]
    wake: Callable[[float], None]  # start the beat and balance timers if they are not running
    counts: dict[str, int] = field(default_factory=dict)
    gone: bool = False  # we left: no new jobs, attempts or tasks

    @property
    def me(self) -> Endpoint:
        return Endpoint(*self.address)

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n
