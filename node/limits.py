# Per-source rate limits: one flooding host must not starve a peer's neighbours.
#
# Theory of operation
#   A token bucket per source address, refilled at `rate_per_s` up to `burst`;
#   a datagram that finds no token is dropped and counted (drop.rate_limited)
#   before it is decoded, so a flood costs the peer a dictionary lookup per
#   datagram, not a decode and an HMAC. The key is the source address, not the
#   sender id a datagram claims: an id costs nothing to forge, an address is
#   what the WAN core lets a host send from (anti-spoofing, testbed/net). At
#   most `table` buckets are kept, the least recently heard forgotten first, so
#   the table is bounded whatever the sources (a forgotten source starts again
#   with a full bucket: at worst `burst` more datagrams).
#
# Rule: time is the peer's `now` clock (virtual in the simulator: the same
# datagrams are limited the same way at any speed).

from __future__ import annotations

__all__ = ["SourceLimiter"]


class SourceLimiter:
    """Token buckets by source address (see the header). rate_per_s = 0: no limit."""

    def __init__(self, rate_per_s: float, burst: float, table: int) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.table = table
        self._buckets: dict[str, tuple[float, float]] = {}  # source -> (tokens, when)

    def allow(self, source: str, now: float) -> bool:
        """Whether a datagram from `source` at `now` may be handled (takes a token)."""
        if self.rate_per_s <= 0:
            return True
        bucket = self._buckets.pop(source, None)  # re-inserted last: most recently heard
        if bucket is None:
            tokens = self.burst
            if len(self._buckets) >= self.table:
                del self._buckets[next(iter(self._buckets))]
        else:
            tokens, when = bucket
            tokens = min(self.burst, tokens + max(0.0, now - when) * self.rate_per_s)
        allowed = tokens >= 1.0
        self._buckets[source] = (tokens - 1.0 if allowed else tokens, now)
        return allowed

    def __len__(self) -> int:
        return len(self._buckets)
