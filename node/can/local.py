# What every part of the overlay shares: the peer's own state and its I/O.
#
# Theory of operation
#   The overlay is a facade (overlay.py) over four parts: the neighbour table
#   (neighbours.py), the conflict protocol (conflicts.py), the takeover of dead
#   zones (takeover.py) and the join service (join.py). They share one
#   LocalNode: who we are (id, address, point), our zone (lo, hi, path,
#   instance), our status, and the injected config, rng, `send` and `emit`.
#   Everything else a part keeps is its own; a part asks another through its
#   methods.
#
# Rules
#   1. The status changes only through set_status(), which checks the
#      transition table of status.py.
#   2. Randomness comes from `rng`, time only from the `now` arguments; no
#      part keeps its own clock or generator.

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from node.can.config import CanConfig
from node.can.geometry import Space
from node.can.status import Status, transition
from node.events import Event
from node.wire import Message, PathEntry, PeerInfo, Update

__all__ = ["ID_BITS", "Address", "LocalNode"]

Address = tuple[str, int]
ID_BITS = 48


@dataclass
class LocalNode:
    """The peer's own state and outputs, shared by the overlay's parts."""

    config: CanConfig
    address: Address
    point: tuple[float, ...]
    rng: random.Random
    send: Callable[[Address, Message], None]
    emit: Callable[[Event], None]
    status: Status = Status.IDLE
    id: int = 0
    lo: tuple[float, ...] = ()
    hi: tuple[float, ...] = ()
    path: tuple[PathEntry, ...] = field(default=())
    instance: int = 0
    # What our periodic updates go out as: the peer may add what rides on them
    # (node/peer.py: a scheduler's load); None: the Update itself.
    dress: Callable[[Update, float], Message] | None = None

    @property
    def space(self) -> Space:
        return self.config.space

    def set_status(self, new: Status) -> None:
        """Move to status `new` (see status.py). Raises RuntimeError, changing
        nothing, if the transition table has no such move."""
        self.status = transition(self.status, new)

    def in_overlay(self) -> bool:
        """A member, or a member negotiating its leave."""
        return self.status in (Status.MEMBER, Status.LEAVING)

    def reset_zone(self) -> None:
        self.lo, self.hi, self.path, self.instance = (), (), (), 0

    def new_id(self) -> int:
        return self.rng.getrandbits(ID_BITS) or 1

    def split_id(self) -> int:
        """An id for a split of our zone made now (unique: our instance changes with it)."""
        return (self.id << 15) | (self.instance & 0x7FFF)

    def info(self) -> PeerInfo:
        return PeerInfo(
            self.id,
            self.address[0],
            self.address[1],
            self.instance,
            self.point,
            self.lo,
            self.hi,
            self.path,
        )
