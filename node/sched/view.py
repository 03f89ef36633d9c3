# What the scheduler reads of the overlay, and nothing more (seed 000 §3.1:
# routing to the owner of a job's requirement point, matchmaking over our
# zone's neighbours). A typing.Protocol, so node/can never imports the
# scheduler and the scheduler never sees the overlay's internals: CanOverlay
# satisfies it with the public names it has always had (config, point, lo, hi,
# known, direct), and a test can hand in a plain namespace.
#
# Rules
#   Read-only: the scheduler never changes the overlay. Every name here is a
#   public name of node.can.overlay.CanOverlay; adding one is a decision about
#   the overlay's public surface, not a convenience.

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Protocol

from node.can.geometry import Space
from node.wire import PeerInfo

__all__ = ["KnownPeer", "OverlayConfig", "OverlayView"]


class OverlayConfig(Protocol):
    @property
    def space(self) -> Space: ...


class KnownPeer(Protocol):
    """A peer the overlay knows of: its last PeerInfo (address, point, zone)."""

    @property
    def info(self) -> PeerInfo: ...


class OverlayView(Protocol):
    """Our place in the CAN: the space, our point and zone (empty while not a
    member), the peers we know by id and which of them are direct neighbours."""

    @property
    def config(self) -> OverlayConfig: ...

    @property
    def point(self) -> tuple[float, ...]: ...

    @property
    def lo(self) -> tuple[float, ...]: ...

    @property
    def hi(self) -> tuple[float, ...]: ...

    @property
    def known(self) -> Mapping[int, KnownPeer]: ...

    @property
    def direct(self) -> AbstractSet[int]: ...
