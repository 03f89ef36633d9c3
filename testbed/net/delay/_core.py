# The delay engine's bookkeeping, without I/O.
#
# Theory of operation
#   Each forwarded IPv4 packet arrives with the kernel's arrival timestamp.
#   `packet_in` maps its addresses to host indices, asks the LinkModel for its
#   fate, and either answers at once (drop, or a foreign packet we accept) or
#   holds it until  due = arrival + delay - path_offset,  where path_offset is
#   the latency the emulated path has even without holding (veth hops,
#   forwarding, the verdict round trip), measured at calibration. Held packets
#   sit in a heap ordered by (due, arrival order); `release_due(now)` pops every
#   packet due by `now` and checks once more that its pair may still talk, so a
#   partition also cuts packets in flight.
#
# Rules
#   1. Time only comes in as arguments (`now`, the kernel stamp).
#   2. Every packet ends in exactly one verdict and is counted exactly once:
#      forwarded (per pair, packets and bytes), dropped (per pair, and per
#      reason), or foreign (not between two emulated hosts; accepted at once).
#      Per-pair counts are kept for the pairs that talk only (memory follows
#      traffic, not n squared).
#   3. Memory is bounded by the kernel queue length (max_queued): the heap never
#      holds more packets than the kernel lets wait for a verdict.

from __future__ import annotations

import heapq
import itertools
import random
from array import array

from testbed.linkmodel import DROP_REASONS, LinkModel
from testbed.net.delay._nfqueue import NF_ACCEPT, NF_DROP

__all__ = ["DelayCore"]

# How many recent release errors are kept for the lateness percentiles.
LATENESS_WINDOW = 8192


class DelayCore:
    """Held packets, verdicts and counters for one WAN core."""

    def __init__(
        self, model: LinkModel, *, ip_base: int, rng: random.Random, path_offset_s: float = 0.0
    ) -> None:
        """Args:
        model: the per-pair link model (delays in seconds).
        ip_base: host index k (0-based) has IPv4 address ip_base + k + 1.
        rng: randomness for loss and jitter.
        path_offset_s: one-way latency of the path without holding; subtracted.
        """
        self.model = model
        self.n = model.n
        self.ip_first = ip_base + 1
        self.rng = rng
        self.path_offset_s = path_offset_s
        self._heap: list[tuple[float, int, int, int, int, int]] = []
        self._seq = itertools.count()
        # Per ordered pair that carried traffic (key src * n + dst): forwarded
        # packets, forwarded bytes, dropped packets. Sparse: n x n lists would be
        # 600 MB at 5,000 hosts, and most pairs of a big grid never talk.
        self._pairs: dict[int, list[int]] = {}
        self.drops = dict.fromkeys(DROP_REASONS.values(), 0)
        self.packets_in = 0
        self.foreign = 0
        self.no_timestamp = 0
        self.max_held = 0
        self.last_release_error_s: float | None = None
        # Recent release errors of held packets (release time - due time), and
        # recent processing delays of packets forwarded at once (release - arrival).
        self._lateness = _Window(LATENESS_WINDOW)
        self._immediate = _Window(LATENESS_WINDOW)

    # -- inputs -----------------------------------------------------------------------------------

    def packet_in(
        self, packet_id: int, stamp: float, saddr: int, daddr: int, size: int, now: float
    ) -> int | None:
        """Take one queued packet.

        Returns NF_ACCEPT or NF_DROP when the verdict is due at once, or None
        when the packet is now held (release_due will return it later). Mutates
        the counters and the heap.
        """
        self.packets_in += 1
        src = saddr - self.ip_first
        dst = daddr - self.ip_first
        n = self.n
        if not (0 <= src < n and 0 <= dst < n) or src == dst:
            self.foreign += 1
            return NF_ACCEPT
        if not stamp:
            self.no_timestamp += 1
            stamp = now
        delay = self.model.fate(src, dst, self.rng)
        if delay < 0.0:
            self._pair(src * n + dst)[2] += 1
            self.drops[DROP_REASONS[delay]] += 1
            return NF_DROP
        due = stamp + delay - self.path_offset_s
        if due <= now:
            self._count_forward(src, dst, size)
            self._immediate.add(now - stamp)
            return NF_ACCEPT
        heapq.heappush(self._heap, (due, next(self._seq), packet_id, src, dst, size))
        if len(self._heap) > self.max_held:
            self.max_held = len(self._heap)
        return None

    def release_due(self, until: float, now: float | None = None) -> list[tuple[int, int]]:
        """Pop every held packet due by `until`; returns (packet_id, verdict) pairs in due order.

        `now` (default: until) is the release time, for the error statistics;
        last_release_error_s is then the mean (release - due) of this batch.
        """
        now = until if now is None else now
        heap = self._heap
        out: list[tuple[int, int]] = []
        model = self.model
        error_sum = 0.0
        while heap and heap[0][0] <= until:
            due, _seq, packet_id, src, dst, size = heapq.heappop(heap)
            reason = model.blocked(src, dst)
            if reason:
                self._pair(src * self.n + dst)[2] += 1
                self.drops[DROP_REASONS[reason]] += 1
                out.append((packet_id, NF_DROP))
            else:
                self._count_forward(src, dst, size)
                self._lateness.add(now - due)
                out.append((packet_id, NF_ACCEPT))
            error_sum += now - due
        self.last_release_error_s = error_sum / len(out) if out else None
        return out

    def drain_all(self) -> list[int]:
        """Forget every held packet (shutdown); returns their ids so they can be dropped."""
        ids = [entry[2] for entry in self._heap]
        self._heap.clear()
        return ids

    # -- outputs ----------------------------------------------------------------------------------

    def next_due(self) -> float | None:
        """The earliest due time of a held packet, or None."""
        return self._heap[0][0] if self._heap else None

    @property
    def held(self) -> int:
        return len(self._heap)

    def _pair(self, k: int) -> list[int]:
        counts = self._pairs.get(k)
        if counts is None:
            counts = self._pairs[k] = [0, 0, 0]
        return counts

    def _count_forward(self, src: int, dst: int, size: int) -> None:
        counts = self._pair(src * self.n + dst)
        counts[0] += 1
        counts[1] += size

    def lateness_s(self) -> list[float]:
        """Recent release errors of held packets (release time - due time; < 0 is early)."""
        return self._lateness.values()

    def immediate_s(self) -> list[float]:
        """Recent processing delays (kernel arrival to verdict) of packets forwarded at once."""
        return self._immediate.values()

    def forwarded(self) -> int:
        return sum(counts[0] for counts in self._pairs.values())

    def counters(self) -> dict[str, int | list[list[int]]]:
        """Every ordered pair that carried traffic since the last reset, sparse:
        {"hosts": n, "pairs": [[src, dst, forwarded packets, forwarded bytes,
        dropped packets], ...]} in (src, dst) order."""
        n = self.n
        return {
            "hosts": n,
            "pairs": [[k // n, k % n, *counts] for k, counts in sorted(self._pairs.items())],
        }

    def reset_counters(self) -> None:
        self._pairs = {}
        self.drops = dict.fromkeys(DROP_REASONS.values(), 0)


class _Window:
    """The last `size` float samples (a ring buffer)."""

    __slots__ = ("_count", "_data", "_size")

    def __init__(self, size: int) -> None:
        self._data = array("d", [0.0]) * size
        self._size = size
        self._count = 0

    def add(self, value: float) -> None:
        self._data[self._count % self._size] = value
        self._count += 1

    def values(self) -> list[float]:
        return list(self._data[: min(self._count, self._size)])
