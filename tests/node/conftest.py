# Shared by the peer's tests.

from __future__ import annotations

import random

from node.can.geometry import Dimension, Space
from node.can.overlay import CanConfig, CanOverlay

# A two-dimensional space and an overlay with fast timers (test_peer, test_probe_rtt).
SPACE = Space([Dimension("cpu", 0, 100), Dimension("v", 0, 1, virtual=True)])
CAN = CanConfig(
    SPACE,
    update_interval_s=1.0,
    suspect_after_s=3.0,
    probe_timeout_s=0.5,
    propose_timeout_s=1.0,
    join_timeout_s=4.0,
    retry_max_s=4.0,
)

# One overlay fed by hand, with what it sends and emits (the conflict, takeover and status
# tests).
CONFIG = CanConfig(SPACE, update_interval_s=1.0, suspect_after_s=3.0, join_timeout_s=4.0)
HOME = ("10.0.0.1", 7000)


class Wire:
    """Collects what an overlay sends and emits."""

    def __init__(self) -> None:
        self.sent: list[tuple[tuple[str, int], object]] = []
        self.events: list[object] = []

    def take(self, kind: type) -> list[tuple[tuple[str, int], object]]:
        out = [(to, m) for to, m in self.sent if isinstance(m, kind)]
        self.sent = [(to, m) for to, m in self.sent if not isinstance(m, kind)]
        return out


def overlay(
    point=(20.0, 0.3), address=HOME, seed=1, config: CanConfig = CONFIG
) -> tuple[CanOverlay, Wire]:
    wire = Wire()
    can = CanOverlay(
        config,
        address=address,
        point=point,
        rng=random.Random(seed),
        send=lambda to, m: wire.sent.append((to, m)),
        emit=wire.events.append,
    )
    return can, wire
