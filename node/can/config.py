# The overlay's configuration: timing and limits, validated when created.
#
# Rules
#   1. Every time is in seconds of the `now` clock and must be positive and
#      finite; an invalid config never exists (it raises FieldError, a ValueError, naming the
#      field and the bad value).
#   2. Checks of a field live here, in __post_init__, and nowhere else.

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from node.can.geometry import Space
from node.fields import FieldError, check_positive

__all__ = ["ROOT_MAX_AGE", "CanConfig"]

# A root whose heartbeat has not advanced for this many root periods is dropped
# (node/can/reunion.py).
ROOT_MAX_AGE = 4


@dataclass(frozen=True)
class CanConfig:
    """Timing and limits of the overlay. Times in seconds of the `now` clock.

    The only declaration of these fields: a spec's [node] table embeds them by name
    (testbed/spec.py), a peer's JSON document carries them as its "can" section. Three
    defaults follow the update period, here and nowhere else (docs/can.md)."""

    space: Space
    update_interval_s: float = 2.0
    suspect_after_s: float = 6.0  # silence of a direct neighbour before it is probed
    probe_timeout_s: float = 1.0  # no answer to the probe: declared dead
    propose_timeout_s: float = 2.0  # a neighbour that does not answer a Propose counts as NO
    join_timeout_s: float = 8.0  # a joiner that hears nothing retries
    retry_min_s: float = 0.5  # random back-off before a retry: uniform in [min, cap], cap doubling
    retry_max_s: float = 30.0
    # A neighbour's command we never saw committed is forgotten after this; None: four
    # update periods, at least 8 s.
    busy_timeout_s: float | None = None
    tombstone_ttl_s: float = 120.0
    gossip_window_s: float = (
        30.0  # a tombstone is passed on in updates for this long after we learn it
    )
    # Indirect news not refreshed for this long is dropped; None: five update periods.
    forget_after_s: float | None = None
    # A leave proposes a MERGE whenever its neighbourhood is quiet; after leave_attempts
    # refused ones, or leave_timeout_s without a quiet moment, it leaves abruptly.
    # (120 s: at 1,000 peers with a fifth of them replaced in a minute, graceful leaves
    # took up to 62 s, and a 60 s bound cut 8 of 267; docs/can.md.)
    leave_attempts: int = 60
    leave_timeout_s: float = 120.0
    # Who receives a Propose: "neighbourhood" (direct and indirect neighbours, as
    # seed 002 §6.2 has it) or "direct" (enough to catch interfering commands,
    # whose nodes are within two hops: a common neighbour sees both; docs/can.md).
    propose_scope: Literal["neighbourhood", "direct"] = "direct"
    max_hops: int = 512
    max_gossip_tombstones: int = 64
    max_summaries: int = 200  # neighbour summaries per update (the datagram must stay small)
    # Datagrams one source address may send this peer: per second sustained, at once,
    # and how many sources are remembered (node/limits.py); 0 per second: no limit.
    per_source_per_s: float = 200.0
    per_source_burst: float = 400.0
    per_source_table: int = 4096
    # A source this peer has never sent anything but a Pong (a stranger: no neighbour,
    # owner, cluster mate or joiner it answered) gets this rate and burst instead
    # (each at most the per_source one).
    stranger_per_s: float = 20.0
    stranger_burst: float = 40.0
    # Overlay merge (node/can/reunion.py, docs/can.md): peers buried for silence are
    # probed again for this long (0: never; no merge after a partition); the root's
    # heartbeat period (None: half an update period; four of them must be shorter than
    # suspect_after_s); the size ratio that decides a merge before the roots' ids do.
    remember_dead_s: float = 300.0
    root_period_s: float | None = None
    merge_size_ratio: float = 8.0
    # A dead region next to our zone that the takeover rule leaves alone this long after
    # we learnt of its death is taken by its extent (node/can/takeover.py, "orphans";
    # None: ten update periods; 0: never).
    orphan_after_s: float | None = None

    def __post_init__(self) -> None:
        if self.busy_timeout_s is None:
            object.__setattr__(self, "busy_timeout_s", max(8.0, 4 * self.update_interval_s))
        if self.forget_after_s is None:
            object.__setattr__(self, "forget_after_s", 5 * self.update_interval_s)
        if self.root_period_s is None:
            object.__setattr__(self, "root_period_s", self.update_interval_s / 2)
        if self.orphan_after_s is None:
            object.__setattr__(self, "orphan_after_s", 10 * self.update_interval_s)
        check_positive(
            "can",
            self,
            (
                "update_interval_s",
                "suspect_after_s",
                "probe_timeout_s",
                "propose_timeout_s",
                "join_timeout_s",
                "retry_min_s",
                "retry_max_s",
                "busy_timeout_s",
                "tombstone_ttl_s",
                "leave_timeout_s",
                "gossip_window_s",
                "forget_after_s",
                "root_period_s",
            ),
            "seconds",
        )
        remember = self.remember_dead_s
        if not (isinstance(remember, int | float) and math.isfinite(remember) and remember >= 0):
            raise FieldError("can", "remember_dead_s", f"must be >= 0 seconds, not {remember!r}")
        orphan = self.orphan_after_s
        if not (isinstance(orphan, int | float) and math.isfinite(orphan) and orphan >= 0):
            raise FieldError("can", "orphan_after_s", f"must be >= 0 seconds, not {orphan!r}")
        ratio = self.merge_size_ratio
        if not (isinstance(ratio, int | float) and math.isfinite(ratio) and ratio > 1):
            raise FieldError("can", "merge_size_ratio", f"must be a number > 1, not {ratio!r}")
        if self.propose_scope not in ("neighbourhood", "direct"):
            raise FieldError(
                "can",
                "propose_scope",
                f"must be 'neighbourhood' or 'direct', not {self.propose_scope!r}",
            )
        if self.suspect_after_s <= self.update_interval_s:
            raise FieldError(
                "can",
                "suspect_after_s",
                "must exceed update_interval_s, or live neighbours get suspected",
            )
        if ROOT_MAX_AGE * self.root_every_s >= self.suspect_after_s:
            raise FieldError(
                "can",
                "root_period_s",
                f"{ROOT_MAX_AGE} root periods must be shorter than suspect_after_s, or a side cut off"
                " from its root buries the other side before it knows (docs/can.md)",
            )
        rate, burst = self.per_source_per_s, self.per_source_burst
        if not (isinstance(rate, int | float) and math.isfinite(rate) and rate >= 0):
            raise FieldError("can", "per_source_per_s", f"must be >= 0 datagrams/s, not {rate!r}")
        if not (isinstance(burst, int | float) and math.isfinite(burst) and burst >= 1):
            raise FieldError("can", "per_source_burst", f"must be >= 1 datagram, not {burst!r}")
        srate, sburst = self.stranger_per_s, self.stranger_burst
        if not (isinstance(srate, int | float) and math.isfinite(srate) and srate > 0):
            raise FieldError("can", "stranger_per_s", f"must be > 0 datagrams/s, not {srate!r}")
        if not (isinstance(sburst, int | float) and math.isfinite(sburst) and sburst >= 1):
            raise FieldError("can", "stranger_burst", f"must be >= 1 datagram, not {sburst!r}")
        for name in (
            "leave_attempts",
            "max_hops",
            "max_gossip_tombstones",
            "max_summaries",
            "per_source_table",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise FieldError("can", name, f"must be a positive integer, not {value!r}")

    @property
    def busy_for_s(self) -> float:
        """busy_timeout_s, resolved."""
        assert self.busy_timeout_s is not None
        return self.busy_timeout_s

    @property
    def root_every_s(self) -> float:
        """root_period_s, resolved."""
        assert self.root_period_s is not None
        return self.root_period_s

    @property
    def orphan_wait_s(self) -> float:
        """orphan_after_s, resolved."""
        assert self.orphan_after_s is not None
        return self.orphan_after_s

    @property
    def forget_news_after_s(self) -> float:
        """forget_after_s, resolved."""
        assert self.forget_after_s is not None
        return self.forget_after_s
