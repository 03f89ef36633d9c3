# What the emulated WAN delivers while a run goes on: RTT error against the
# configured matrix, sampled in the background.
#
# Theory of operation
#   At the start and every `interval_s` after, a thread picks `pairs` random host pairs (seeded), asks
#   the delay engine for their configured one-way delays over its own control
#   connection (not the whole matrix: at 1,000 hosts that would stall the
#   engine), and sends `samples` kernel-timestamped ICMP echoes per pair through
#   the WAN (IcmpProber, raw sockets in the pairs' namespaces only). The
#   destination's kernel answers, so a sample's error is the WAN's: the delay
#   engine's lateness, the kernel path and the machine's load, not a peer's
#   scheduling. Each round is written to `fidelity.jsonl` as it ends.
#
#   `take()` summarises the samples since the last take (one check of a run),
#   `close()` stops the thread and summarises them all. The bound is the
#   project's: |error| <= max(0.5 ms, 2 % of the RTT); a run whose p99 sample is
#   outside it, or with fewer than 99 % of its samples within it, did not get
#   the WAN it asked for (`kept_up` false), and says so.
#
# Rules
#   1. The monitor never changes the WAN; it only adds a light load (by default
#      32 pairs x 4 echoes at 200/s every 10 s: 0.6 s of 256 packets/s).
#   2. Lost echoes (a partition, a host down, a loss rate) are counted, never
#      counted as error.
#   3. A failing round (the engine gone at teardown) ends the thread; the
#      summary says why instead of raising in the run's thread.

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import InputError
from testbed.net._probe import IcmpProber
from testbed.net.delay import EngineClient
from testbed.runs import JsonLog

__all__ = ["BOUND_ABS_MS", "BOUND_REL", "KEPT_UP_WITHIN", "FidelityMonitor", "rtt_errors"]

BOUND_ABS_MS = 0.5
BOUND_REL = 0.02
# A run's WAN kept up when at least this share of its samples were within the bound.
KEPT_UP_WITHIN = 0.99


def _q(values: np.ndarray, q: float) -> float:
    return round(float(np.percentile(values, q)), 4) if values.size else float("nan")


def rtt_errors(measured_ms: np.ndarray, expected_ms: np.ndarray) -> dict[str, Any]:
    """How far each measured RTT (ms) is from its configured RTT (ms), against the bound."""
    signed = measured_ms - expected_ms
    error = np.abs(signed)
    bound = np.maximum(BOUND_ABS_MS, BOUND_REL * expected_ms)
    relative = error / np.maximum(expected_ms, 1e-9)
    return {
        "rtt_error_ms": {
            "p50": _q(error, 50),
            "p99": _q(error, 99),
            "max": _q(error, 100),
            "mean_signed": round(float(signed.mean()), 4) if signed.size else None,
        },
        "rtt_rel_error": {"p50": _q(relative, 50), "p99": _q(relative, 99)},
        "bound": f"max({BOUND_ABS_MS} ms, {BOUND_REL:.0%} of RTT)",
        "bound_ratio_p99": _q(error / bound, 99),
        "within_bound": round(float((error <= bound).mean()), 5) if error.size else None,
    }


class _Samples:
    """Measured and configured RTTs (ms), lost echoes and rounds, since some start."""

    def __init__(self) -> None:
        self.measured: list[float] = []
        self.expected: list[float] = []
        self.lost = 0
        self.rounds = 0

    def summary(self) -> dict[str, Any]:
        measured = np.asarray(self.measured)
        expected = np.asarray(self.expected)
        out = {"samples": int(measured.size), "lost": self.lost, "rounds": self.rounds}
        if not measured.size:
            return {**out, "error_p50_ms": None, "error_p99_ms": None, "within_bound": None}
        errors = rtt_errors(measured, expected)
        within = errors["within_bound"]
        return {
            **out,
            "error_p50_ms": errors["rtt_error_ms"]["p50"],
            "error_p99_ms": errors["rtt_error_ms"]["p99"],
            "error_max_ms": errors["rtt_error_ms"]["max"],
            "mean_signed_ms": errors["rtt_error_ms"]["mean_signed"],
            "within_bound": within,
            "bound": errors["bound"],
            "kept_up": within >= KEPT_UP_WITHIN,
        }


class FidelityMonitor:
    """Samples the WAN's delivered RTT in a background thread (see the module comment).

    netns[k], ips[k]: host k's namespace and address, k its index in the delay engine.
    """

    def __init__(
        self,
        netns: Sequence[str],
        ips: Sequence[str],
        control_path: str | Path,
        log_path: Path,
        *,
        interval_s: float = 10.0,
        pairs: int = 32,
        samples: int = 4,
        rate_per_s: float = 200.0,
        seed: int = 0,
    ) -> None:
        for name, value in (
            ("interval_s", interval_s),
            ("pairs", pairs),
            ("samples", samples),
            ("rate_per_s", rate_per_s),
        ):
            if not value > 0:
                raise InputError(f"{name} must be > 0, got {value!r}", source="<fidelity monitor>")
        if len(ips) != len(netns):
            raise InputError(
                f"every host needs a namespace and an address: got {len(netns)} namespaces "
                f"and {len(ips)} addresses",
                source="<fidelity monitor>",
            )
        self._netns = list(netns)
        self._ips = list(ips)
        self._control_path = control_path
        self._log = JsonLog(log_path)
        self.interval_s = interval_s
        self.pairs = pairs
        self.samples = samples
        self.rate_per_s = rate_per_s
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._all = _Samples()
        self._since = _Samples()
        self._lateness: dict[str, Any] | None = None  # the engine's, at the last round
        self._error: str | None = None
        if len(netns) < 2:
            self._error = f"nothing to sample: {len(netns)} host(s), a pair needs 2"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="wan-fidelity", daemon=True)

    def start(self) -> None:
        if len(self._netns) >= 2:
            self._thread.start()

    def take(self) -> dict[str, Any]:
        """The summary of the samples since the last take (or the start)."""
        with self._lock:
            since, self._since = self._since, _Samples()
            return self._summary(since)

    def close(self) -> dict[str, Any]:
        """Stop sampling (waits for a round in progress); the summary of the whole run.
        Idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        with self._lock:
            self._log.close()
            return self._summary(self._all)

    def _summary(self, samples: _Samples) -> dict[str, Any]:
        out = samples.summary()
        out["pairs_per_round"] = self.pairs
        out["echoes_per_pair"] = self.samples
        out["interval_s"] = self.interval_s
        if self._lateness is not None:
            out["engine_lateness_us"] = self._lateness
        if self._error is not None:
            out["error"] = self._error
        return out

    # -- the thread ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            with EngineClient(self._control_path) as engine:
                while True:  # a round at once, so that even a short run has one
                    self._round(engine)
                    if self._stop.wait(self.interval_s):
                        break
        except Exception as exc:  # the engine gone (teardown) or a host's namespace removed
            if not self._stop.is_set():
                self._error = f"sampling stopped: {type(exc).__name__}: {exc}"
                self._log.write("fidelity.error", error=self._error)

    def _measure(
        self, engine: EngineClient | None, pairs: list[tuple[int, int]]
    ) -> tuple[list[float], list[list[float]], int, int, dict[str, Any] | None]:
        """(configured RTT ms, measured RTTs s, echoes sent, lost, the engine's lateness)
        of `pairs`."""
        assert engine is not None
        one_way = engine.one_way([*pairs, *((b, a) for a, b in pairs)])
        expected = [(one_way[k] + one_way[k + len(pairs)]) * 1e3 for k in range(len(pairs))]
        ends = sorted({h for pair in pairs for h in pair})
        local = {h: k for k, h in enumerate(ends)}
        with IcmpProber([self._netns[h] for h in ends], [self._ips[h] for h in ends]) as prober:
            result = prober.probe(
                [(local[a], local[b]) for a, b in pairs],
                samples=self.samples,
                rate_per_s=self.rate_per_s,
                timeout_s=0.5 + 2.0 * max(expected) / 1e3,
                seed=self._rng.getrandbits(32),
            )
        lateness = engine.stats()["lateness_us"]
        return expected, result.rtts_s, result.sent, result.lost, lateness

    def _round(self, engine: EngineClient | None) -> None:
        n = len(self._netns)
        chosen: set[tuple[int, int]] = set()
        wanted = min(self.pairs, n * (n - 1) // 2)
        while len(chosen) < wanted:
            a, b = self._rng.sample(range(n), 2)
            chosen.add((min(a, b), max(a, b)))
        pairs = sorted(chosen)
        started = time.time()
        expected, rtts_s, sent, lost, lateness = self._measure(engine, pairs)
        measured: list[float] = []
        configured: list[float] = []
        for k, rtts in enumerate(rtts_s):
            measured.extend(r * 1e3 for r in rtts)
            configured.extend([expected[k]] * len(rtts))
        errors = rtt_errors(np.asarray(measured), np.asarray(configured))
        # Each pair's median |error| (host indices, 1-based as the names: h<k>), for plots.
        per_pair = [
            [a + 1, b + 1, round(float(np.median(np.abs(np.asarray(rtts) * 1e3 - expected[k]))), 4)]
            for k, ((a, b), rtts) in enumerate(zip(pairs, rtts_s, strict=True))
            if rtts
        ]
        self._log.write(
            "fidelity.round",
            started=round(started, 3),
            pairs=len(pairs),
            sent=sent,
            lost=lost,
            error_p50_ms=errors["rtt_error_ms"]["p50"] if measured else None,
            error_p99_ms=errors["rtt_error_ms"]["p99"] if measured else None,
            within_bound=errors["within_bound"],
            engine_lateness_us=lateness,
            pair_error_ms=per_pair,
        )
        with self._lock:
            for bucket in (self._all, self._since):
                bucket.measured.extend(measured)
                bucket.expected.extend(configured)
                bucket.lost += lost
                bucket.rounds += 1
            self._lateness = lateness
