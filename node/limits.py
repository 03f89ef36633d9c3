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
#   Strangers get less: a source this peer has never spoken to first (sent
#   anything but an answer to a Ping; `Contacts`) is held to `stranger_per_s`
#   after `stranger_burst` (each at most the others'). A flooding host that is
#   no peer's neighbour, owner or cluster mate hears only Pongs back, so it
#   stays a stranger everywhere: each peer decodes and answers a few of its
#   datagrams a second and drops the rest at the lookup (a host the overlay
#   talks to gets the full rate). A new contact (a joiner, a prober, a job's run
#   node) starts as a stranger and is known from the first message sent to it;
#   its first words fit in the stranger's burst.
#
# Rule: time is the peer's `now` clock (virtual in the simulator: the same
# datagrams are limited the same way at any speed).

from __future__ import annotations

__all__ = ["Contacts", "SourceLimiter"]


class Contacts:
    """The source addresses this peer has spoken to first, at most `table`, the
    least recently spoken to forgotten first (see the header)."""

    def __init__(self, table: int) -> None:
        self.table = table
        self._hosts: dict[str, None] = {}

    def note(self, host: str) -> None:
        hosts = self._hosts
        if host in hosts:
            del hosts[host]  # re-inserted last: most recently spoken to
        elif len(hosts) >= self.table:
            del hosts[next(iter(hosts))]
        hosts[host] = None

    def __contains__(self, host: object) -> bool:
        return host in self._hosts

    def __len__(self) -> int:
        return len(self._hosts)


class SourceLimiter:
    """Token buckets by source address (see the header). rate_per_s = 0: no limit,
    for strangers too."""

    def __init__(
        self,
        rate_per_s: float,
        burst: float,
        table: int,
        *,
        stranger_per_s: float | None = None,
        stranger_burst: float | None = None,
    ) -> None:
        """Strangers: by default as anyone else; never more than anyone else."""
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.table = table
        self.stranger_per_s = (
            rate_per_s if stranger_per_s is None else min(stranger_per_s, rate_per_s)
        )
        self.stranger_burst = burst if stranger_burst is None else min(stranger_burst, burst)
        self._buckets: dict[str, tuple[float, float]] = {}  # source -> (tokens, when)

    def allow(self, source: str, now: float, known: bool = True) -> bool:
        """Whether a datagram from `source` at `now` may be handled (takes a token);
        `known`: the source is a contact (else the stranger's rate and burst apply)."""
        if self.rate_per_s <= 0:
            return True
        rate, burst = (
            (self.rate_per_s, self.burst) if known else (self.stranger_per_s, self.stranger_burst)
        )
        bucket = self._buckets.pop(source, None)  # re-inserted last: most recently heard
        if bucket is None:
            tokens = burst
            if len(self._buckets) >= self.table:
                del self._buckets[next(iter(self._buckets))]
        else:
            tokens, when = bucket
            tokens = min(burst, tokens + max(0.0, now - when) * rate)
        allowed = tokens >= 1.0
        self._buckets[source] = (tokens - 1.0 if allowed else tokens, now)
        return allowed

    def __len__(self) -> int:
        return len(self._buckets)
