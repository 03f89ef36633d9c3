# Shared by the peer's tests.

from __future__ import annotations

from node.can.geometry import Dimension, Space
from node.can.overlay import CanConfig

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
