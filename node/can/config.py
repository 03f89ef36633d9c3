# The overlay's configuration: timing and limits, validated when created.
#
# Rules
#   1. Every time is in seconds of the `now` clock and must be positive and
#      finite; an invalid config never exists (it raises ValueError naming the
#      field and the bad value).
#   2. Checks of a field live here, in __post_init__, and nowhere else.

from __future__ import annotations

import math
from dataclasses import dataclass

from node.can.geometry import Space

__all__ = ["CanConfig"]


@dataclass(frozen=True)
class CanConfig:
    """Timing and limits of the overlay. Times in seconds of the `now` clock."""

    space: Space
    update_interval_s: float = 2.0
    suspect_after_s: float = 6.0  # silence of a direct neighbour before it is probed
    probe_timeout_s: float = 1.0  # no answer to the probe: declared dead
    propose_timeout_s: float = 2.0  # a neighbour that does not answer a Propose counts as NO
    join_timeout_s: float = 8.0  # a joiner that hears nothing retries
    retry_min_s: float = 0.5  # random back-off before a retry: uniform in [min, cap], cap doubling
    retry_max_s: float = 30.0
    busy_timeout_s: float = (
        8.0  # a neighbour's command we never saw committed is forgotten after this
    )
    tombstone_ttl_s: float = 120.0
    gossip_window_s: float = (
        30.0  # a tombstone is passed on in updates for this long after we learn it
    )
    forget_after_s: float = 10.0  # indirect news not refreshed for this long is dropped
    leave_attempts: int = 8  # MERGE attempts before leaving abruptly
    # Who receives a Propose: "neighbourhood" (direct and indirect neighbours, as
    # seed 002 §6.2 has it) or "direct" (enough to catch interfering commands,
    # whose nodes are within two hops: a common neighbour sees both; docs/can.md).
    propose_scope: str = "neighbourhood"
    max_hops: int = 512
    max_gossip_tombstones: int = 64
    max_summaries: int = 200  # neighbour summaries per update (the datagram must stay small)

    def __post_init__(self) -> None:
        for name in (
            "update_interval_s",
            "suspect_after_s",
            "probe_timeout_s",
            "propose_timeout_s",
            "join_timeout_s",
            "retry_min_s",
            "retry_max_s",
            "busy_timeout_s",
            "tombstone_ttl_s",
            "gossip_window_s",
            "forget_after_s",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(
                    f"CanConfig.{name} must be a positive number of seconds, not {value!r}"
                )
        if self.propose_scope not in ("neighbourhood", "direct"):
            raise ValueError(
                f"CanConfig.propose_scope must be 'neighbourhood' or 'direct', not {self.propose_scope!r}"
            )
        if self.suspect_after_s <= self.update_interval_s:
            raise ValueError(
                "CanConfig.suspect_after_s must exceed update_interval_s, or live neighbours are suspected"
            )
