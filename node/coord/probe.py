# RTT probing (seed 002 §5.2.3): a peer measures the round-trip time to
# chosen peers with real datagrams, several samples each, under a budget, and
# reports them with the usual filters (mean, median, minimum, and the mean of
# the lowest quartile that Table 5.5's "Lowest Quartile" variant uses).
#
# Sans-IO like the overlay: request() queues a measurement; Ping datagrams go
# out through `send` no faster than the budget allows; a Pong carries the
# nonce back and the RTT is `now` at the Pong minus `now` at the Ping (the
# runtime reads its clock right at the socket on both sides). A sample with
# no Pong after `timeout_s` is lost. When all samples of a request are in,
# an RttMeasured event reports them. In the simulator the same component sees
# the matrix's latency plus the link model's jitter and loss.

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from node.events import Event, RttMeasured
from node.wire import Message, Ping, Pong

__all__ = ["FILTERS", "ProbeConfig", "Prober", "summarize"]

Address = tuple[str, int]
FILTERS = ("mean", "median", "min", "lowest_quartile")
# A peer that held a Ping longer than this before answering reports this.
MAX_HELD_S = 10.0


def summarize(rtts: Sequence[float], how: str) -> float:
    """One figure from several RTT samples.

    "lowest_quartile" is the mean of the samples at or below the first quartile
    (Ledlie et al., NSDI 2007, as seed 002 §5.2.3.3 uses it): it drops samples
    taken while a host or path was busy. With fewer than 4 samples it is the minimum.
    """
    if not rtts:
        raise ValueError("no samples")
    if how == "mean":
        return statistics.fmean(rtts)
    if how == "median":
        return statistics.median(rtts)
    if how == "min":
        return min(rtts)
    if how == "lowest_quartile":
        if len(rtts) < 4:
            return min(rtts)
        q1 = statistics.quantiles(rtts, n=4, method="inclusive")[0]
        return statistics.fmean(r for r in rtts if r <= q1)
    raise ValueError(f"unknown filter {how!r}; expected one of {', '.join(FILTERS)}")


@dataclass(frozen=True)
class ProbeConfig:
    samples: int = 5  # per measurement
    interval_s: float = 0.02  # between two samples to the same peer
    timeout_s: float = 2.0  # a sample not answered by then is lost
    rate: float = 200.0  # budget: Pings per second at most, all targets together
    max_pending: int = 1024  # measurements queued or under way

    def __post_init__(self) -> None:
        if not (isinstance(self.samples, int) and 1 <= self.samples <= 1000):
            raise ValueError(f"probe.samples must be an integer in 1..1000, not {self.samples!r}")
        for name in ("interval_s", "timeout_s", "rate"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"probe.{name} must be a positive number, not {value!r}")
        if not (isinstance(self.max_pending, int) and self.max_pending >= 1):
            raise ValueError(
                f"probe.max_pending must be a positive integer, not {self.max_pending!r}"
            )


@dataclass
class _Measurement:
    request: int
    target: int
    addr: Address
    samples: int
    sent: int = 0
    next_at: float = -math.inf
    rtts: list[float] | None = None
    lost: int = 0


class Prober:
    """Measures RTTs to other peers. Drive it like the overlay: inputs take `now`,
    outputs go through `send` and `emit`, and get_timer() says when to call
    handle_timer()."""

    def __init__(
        self,
        config: ProbeConfig,
        *,
        rng: Callable[[], random.Random],
        send: Callable[[Address, Message], None],
        emit: Callable[[Event], None],
    ) -> None:
        self.config = config
        self._make_rng = rng  # drawn on the first request: a peer that never probes keeps its draws
        self._rng: random.Random | None = None
        self._send = send
        self._emit = emit
        self._active: dict[int, _Measurement] = {}  # request -> measurement, in request order
        # The active ones with samples still to send, in the same order: the timers scan
        # only these (a measurement whose Pings are all out only waits for answers).
        self._sending: dict[int, _Measurement] = {}
        self._sending_min: float | None = None  # min next_at over _sending; None: to compute
        self._inflight: dict[int, tuple[_Measurement, float]] = {}  # nonce -> (for, sent at)
        self._next_send = -math.inf  # the budget: no Ping before this
        self._next_request = 0
        self.sent = 0
        self.answered = 0  # Pongs we served
        self.unexpected = 0  # Pongs for no sample of ours (late, duplicated or forged)
        self.bad_holds = 0  # Pongs claiming a hold the round trip cannot contain

    # -- inputs ----------------------------------------------------------------------------------

    def request(
        self, target: int, addr: Address, now: float, samples: int | None = None
    ) -> int | None:
        """Queue a measurement of `samples` RTTs to peer `target` at `addr`.
        Returns its request number, or None if too many are pending."""
        if len(self._active) >= self.config.max_pending:
            return None
        count = self.config.samples if samples is None else samples
        if not (isinstance(count, int) and count >= 1):
            raise ValueError(f"samples must be a positive integer, not {count!r}")
        self._next_request += 1
        measurement = _Measurement(self._next_request, target, addr, count, rtts=[])
        self._active[self._next_request] = self._sending[self._next_request] = measurement
        self._sending_min = None
        self.handle_timer(now)
        return self._next_request

    def handle_ping(
        self, addr: Address, ping: Ping, now: float, rx_at: float | None = None
    ) -> None:
        """Answer a Ping; `rx_at` is when it reached the socket (default: now),
        and the Pong says how long we held it since."""
        self.answered += 1
        held = 0.0 if rx_at is None else min(max(now - rx_at, 0.0), MAX_HELD_S)
        self._send(addr, Pong(ping.nonce, round(held * 1e6)))

    def handle_pong(self, pong: Pong, now: float, rx_at: float | None = None) -> None:
        """A sample: from our Ping to the Pong reaching the socket (`rx_at`,
        default now), less the time the other peer says it held the Ping."""
        entry = self._inflight.pop(pong.nonce, None)
        if entry is None:
            self.unexpected += 1
            return
        measurement, sent_at = entry
        assert measurement.rtts is not None
        rtt = (now if rx_at is None else rx_at) - sent_at - pong.held_us / 1e6
        if not (0 <= pong.held_us <= MAX_HELD_S * 1e6 and rtt > 0):
            self.bad_holds += 1  # a hold longer than the round trip: not a sample
            measurement.lost += 1
        else:
            measurement.rtts.append(rtt)
        self._finish_if_done(measurement, now)

    def handle_timer(self, now: float) -> None:
        timeout = self.config.timeout_s
        # Samples in flight are in the order they were sent: the oldest first.
        while self._inflight:
            nonce, (measurement, sent_at) = next(iter(self._inflight.items()))
            if now < sent_at + timeout:
                break
            del self._inflight[nonce]
            measurement.lost += 1
            self._finish_if_done(measurement, now)
        if now < self._next_send:
            return  # the budget allows no Ping yet
        self._sending_min = None  # next_at changes below
        done = []
        for measurement in self._sending.values():  # (sending changes no entry)
            if now < self._next_send:
                break  # the budget is spent for now
            while measurement.sent < measurement.samples and now >= max(
                measurement.next_at, self._next_send
            ):
                if self._rng is None:
                    self._rng = self._make_rng()
                nonce = self._rng.getrandbits(63)
                self._inflight[nonce] = (measurement, now)
                self._send(measurement.addr, Ping(nonce))
                self.sent += 1
                measurement.sent += 1
                measurement.next_at = now + self.config.interval_s
                self._next_send = now + 1.0 / self.config.rate
            if measurement.sent >= measurement.samples:
                done.append(measurement.request)
        for request in done:
            del self._sending[request]

    def get_timer(self) -> float | None:
        best = math.inf
        if self._inflight:  # the oldest sample in flight times out first
            _, sent_at = next(iter(self._inflight.values()))
            best = sent_at + self.config.timeout_s
        if self._sending:  # the next Ping: its measurement's interval, and the budget
            if self._sending_min is None:  # (after every input: kept, not scanned each time)
                self._sending_min = min(m.next_at for m in self._sending.values())
            best = min(best, max(self._sending_min, self._next_send))
        return None if best == math.inf else best

    def _finish_if_done(self, measurement: _Measurement, now: float) -> None:
        assert measurement.rtts is not None
        if len(measurement.rtts) + measurement.lost < measurement.samples:
            return
        del self._active[measurement.request]
        if self._sending.pop(measurement.request, None) is not None:
            self._sending_min = None
        self._emit(
            RttMeasured(
                now,
                measurement.request,
                measurement.target,
                tuple(measurement.rtts),
                measurement.lost,
            )
        )

    @property
    def pending(self) -> int:
        return len(self._active)
