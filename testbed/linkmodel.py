# The fate of a packet from one host to another: delay, jitter, loss,
# partition, host down. One model, two users: the emulator's delay engine asks
# it about every forwarded packet, the simulator about every datagram.
#
# Theory of operation
#   State is per ordered pair (src, dst) of host indices 0..n-1:
#     one-way delay in seconds (dense n x n; the matrix is the truth, never a
#     sum of per-link delays), optional jitter and loss (sparse, with an
#     all-pairs default), a partition group per host and a down flag per host.
#   `fate(src, dst, rng)` returns the delay to apply, or a negative DROP_* code.
#
# Rules
#   1. Every mutating call validates all of its arguments before it changes
#      anything: a rejected call leaves the model exactly as it was.
#   2. No clock and no global randomness: the caller passes the Random.
#   3. The hot path (`fate`) stays a handful of list lookups when nothing but
#      delay is configured; anything else is behind one flag.

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from testbed.errors import ControlError

__all__ = [
    "DROP_DOWN",
    "DROP_LOSS",
    "DROP_PARTITION",
    "DROP_QUEUE",
    "DROP_REASONS",
    "Bandwidth",
    "Jitter",
    "LinkModel",
    "Reorder",
]

DROP_LOSS = -1.0
DROP_PARTITION = -2.0
DROP_DOWN = -3.0
DROP_QUEUE = -4.0  # a full bandwidth queue (the engine's per-pair queues only)
DROP_REASONS = {
    DROP_LOSS: "loss",
    DROP_PARTITION: "partition",
    DROP_DOWN: "down",
    DROP_QUEUE: "queue",
}

# A delay above this is certainly a unit mistake (ms given as s, say).
MAX_ONE_WAY_S = 60.0


@dataclass(frozen=True, slots=True)
class Jitter:
    """Random variation added to a pair's one-way delay.

    dist="normal": N(0, sigma_ms); dist="uniform": U(-width_ms, +width_ms);
    dist="pareto": one-sided heavy tail with mean mean_ms and shape alpha (> 1).
    The resulting delay is never below zero.
    """

    dist: str
    sigma_ms: float = 0.0
    width_ms: float = 0.0
    mean_ms: float = 0.0
    alpha: float = 3.0
    _given: frozenset[str] = frozenset()  # the parameters named (even if 0)

    def __post_init__(self) -> None:
        for name in ("sigma_ms", "width_ms", "mean_ms", "alpha"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ControlError(
                    "jitter", f"must be a finite number >= 0, not {value!r}", field=name
                )
        if self.dist not in ("normal", "uniform", "pareto"):
            raise ControlError(
                "jitter",
                f"unknown distribution {self.dist!r}; expected normal, uniform or pareto",
                field="dist",
            )
        # Each distribution takes its own parameters, all of them: a parameter of
        # another one (uniform with sigma_ms) or one left out would be a silent zero.
        wanted = _JITTER_PARAMS.get(self.dist, ())
        given = {
            name
            for name in ("sigma_ms", "width_ms", "mean_ms")
            if getattr(self, name) != 0.0 or name in self._given
        }
        foreign = sorted(given - set(wanted))
        if foreign:
            raise ControlError(
                "jitter",
                f"{self.dist} takes {' and '.join(wanted)}, not {', '.join(foreign)}",
                field=foreign[0],
            )
        for name in wanted:
            if name != "alpha" and getattr(self, name) == 0.0:
                raise ControlError(
                    "jitter",
                    f"{self.dist} needs {name} > 0 (dist=None removes jitter)",
                    field=name,
                )
        if self.dist == "pareto" and self.alpha <= 1:
            raise ControlError(
                "jitter", f"pareto needs alpha > 1 (finite mean), not {self.alpha!r}", field="alpha"
            )

    def sample_s(self, rng: random.Random) -> float:
        """One offset in seconds."""
        if self.dist == "normal":
            return rng.gauss(0.0, self.sigma_ms) / 1000.0
        if self.dist == "uniform":
            return rng.uniform(-self.width_ms, self.width_ms) / 1000.0
        # Pareto with scale x_m = mean * (alpha - 1) has E[x_m * U^(-1/alpha) - x_m] = mean.
        scale = self.mean_ms * (self.alpha - 1.0)
        return scale * ((1.0 - rng.random()) ** (-1.0 / self.alpha) - 1.0) / 1000.0

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> Jitter:
        """{"dist": ..., parameters}; ControlError names an unknown key."""
        known = {"dist", "sigma_ms", "width_ms", "mean_ms", "alpha"}
        unknown = sorted(set(spec) - known)
        if unknown:
            raise ControlError(
                "jitter",
                f"unknown parameter; expected {', '.join(sorted(known - {'dist'}))}",
                field=unknown[0],
            )
        if "dist" not in spec:
            raise ControlError("jitter", "missing: normal, uniform or pareto", field="dist")
        return cls(**spec, _given=frozenset(spec) - {"dist"})

    def to_dict(self) -> dict[str, float | str]:
        fields = _JITTER_PARAMS[self.dist]
        return {"dist": self.dist, **{name: getattr(self, name) for name in fields}}


_JITTER_PARAMS = {
    "normal": ("sigma_ms",),
    "uniform": ("width_ms",),
    "pareto": ("mean_ms", "alpha"),
}


@dataclass(frozen=True, slots=True)
class Reorder:
    """With probability `rate`, a packet is held `gap_ms` longer than its pair's
    delay, so packets sent up to gap_ms after it overtake it."""

    rate: float
    gap_ms: float

    def __post_init__(self) -> None:
        _check_rate("set_reorder", self.rate)
        if not (
            isinstance(self.gap_ms, int | float)
            and math.isfinite(self.gap_ms)
            and 0 < self.gap_ms <= MAX_ONE_WAY_S * 1e3
        ):
            raise ControlError(
                "set_reorder",
                f"must be a gap in ms within 0..{MAX_ONE_WAY_S * 1e3:.0f} (exclusive of 0), not {self.gap_ms!r}",
                field="gap_ms",
            )


@dataclass(frozen=True, slots=True)
class Bandwidth:
    """A pair's path bandwidth with a drop-tail queue (bytes or packets, one of them)
    and optional ECN marking (CE on ECN-capable packets above `ecn_bytes` of backlog)."""

    rate_mbit: float
    queue_bytes: int = 0
    queue_packets: int = 0
    ecn_bytes: int = 0

    def __post_init__(self) -> None:
        if not (
            isinstance(self.rate_mbit, int | float)
            and not isinstance(self.rate_mbit, bool)
            and math.isfinite(self.rate_mbit)
            and 0.001 <= self.rate_mbit <= 100_000
        ):
            raise ControlError(
                "set_bandwidth",
                f"must be a rate in Mbit/s within 0.001..100000, not {self.rate_mbit!r}",
                field="rate_mbit",
            )
        for name in ("queue_bytes", "queue_packets", "ecn_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 31:
                raise ControlError(
                    "set_bandwidth", f"must be a whole number >= 0, not {value!r}", field=name
                )
        if bool(self.queue_bytes) == bool(self.queue_packets):
            raise ControlError(
                "set_bandwidth",
                "give the queue's size in bytes or in packets (one of them, > 0)",
                field="queue_bytes",
            )
        if self.queue_bytes and self.queue_bytes < 1500:
            raise ControlError(
                "set_bandwidth",
                f"a queue of {self.queue_bytes} bytes cannot hold one 1,500-byte packet",
                field="queue_bytes",
            )
        if self.ecn_bytes and self.queue_bytes and self.ecn_bytes >= self.queue_bytes:
            raise ControlError(
                "set_bandwidth",
                f"the ECN threshold ({self.ecn_bytes} bytes) must be below the queue size",
                field="ecn_bytes",
            )

    def to_dict(self) -> dict[str, float | int]:
        return {
            "rate_mbit": self.rate_mbit,
            "queue_bytes": self.queue_bytes,
            "queue_packets": self.queue_packets,
            "ecn_bytes": self.ecn_bytes,
        }


def _check_rate(op: str, rate: float) -> None:
    if isinstance(rate, bool) or not (isinstance(rate, int | float) and 0.0 <= rate <= 1.0):
        raise ControlError(op, f"must be a probability within 0..1, not {rate!r}", field="rate")


# The fast data path's per-pair parameters, in its struct's order (fastpath.c params_t).
PairParams = tuple[float, int, float, float, float, float, float, float, float, int, float]
_JITTER_CODES = {"normal": 1, "uniform": 2, "pareto": 3}


def _in_range(row: np.ndarray) -> bool:
    """Every entry a delay in 0..MAX_ONE_WAY_S s (NaN is not)."""
    return bool(row.size == 0 or (row.min() >= 0.0 and row.max() <= MAX_ONE_WAY_S))


class LinkModel:
    """Per-pair delay, jitter, loss, partitions and down hosts for n hosts."""

    def __init__(self, one_way_s: Sequence[Sequence[float]] | np.ndarray) -> None:
        """Create the model from an n x n one-way delay matrix in seconds."""
        self._delay = self._check_matrix("init", one_way_s)
        self.n = len(self._delay)
        self._loss: dict[tuple[int, int], float] = {}
        self._loss_all = 0.0
        self._jitter: dict[tuple[int, int], Jitter] = {}
        self._jitter_all: Jitter | None = None
        self._reorder: dict[tuple[int, int], Reorder] = {}
        self._reorder_all: Reorder | None = None
        self._duplicate: dict[tuple[int, int], float] = {}
        self._duplicate_all = 0.0
        self._bandwidth: dict[tuple[int, int], Bandwidth] = {}
        self._bandwidth_all: Bandwidth | None = None
        self._group = [0] * self.n
        self._down = [False] * self.n
        self._extras = False  # anything besides plain delay configured?
        # Bumped by every change (the engine's fast path copies the model when it moves).
        self.version = 0

    # -- validation helpers ---------------------------------------------------------------------

    @staticmethod
    def _check_matrix(
        op: str, one_way_s: Sequence[Sequence[float]] | np.ndarray, n: int | None = None
    ) -> list[array[float]]:
        try:  # no copy of a float64 array: at 10,000 hosts each copy is 800 MB
            matrix = np.asarray(one_way_s, dtype=float)
        except (TypeError, ValueError) as exc:  # ragged rows, or entries that are not numbers
            raise ControlError(
                op, f"the delay matrix must be square numbers in s ({exc})", field="matrix"
            ) from None
        size = len(matrix)
        if matrix.ndim != 2 or size == 0 or matrix.shape[1] != size:
            raise ControlError(op, "the delay matrix must be square and non-empty", field="matrix")
        if n is not None and size != n:
            raise ControlError(
                op, f"the matrix has {size} hosts; this network has {n}", field="matrix"
            )
        # A row at a time: whole-matrix masks would be n x n temporaries.
        bad_row = next(
            (k for k, row in enumerate(matrix) if not _in_range(row)),
            None,
        )
        if bad_row is not None:
            row = matrix[bad_row]
            with np.errstate(invalid="ignore"):
                bad = ~(np.isfinite(row) & (row >= 0) & (row <= MAX_ONE_WAY_S))
            i, j = bad_row, int(np.argmax(bad))
            raise ControlError(
                op,
                f"entry ({i}, {j}) is {float(matrix[i, j])!r} s; expected 0..{MAX_ONE_WAY_S} s",
                field="matrix",
            )
        # Rows of C doubles: 8 bytes a pair (a list of floats takes 32; 800 MB at 5,000 hosts),
        # the diagonal zero (the caller's matrix is not changed).
        rows = [array("d", row.tobytes()) for row in matrix]
        for k, row in enumerate(rows):
            row[k] = 0.0
        return rows

    def _host(self, op: str, host: int, field: str = "host") -> int:
        if isinstance(host, bool) or not isinstance(host, int) or not 0 <= host < self.n:
            raise ControlError(
                op, f"no host with index {host!r}; hosts are 0..{self.n - 1}", field=field
            )
        return host

    def _hosts(self, op: str, hosts: Iterable[int] | None, field: str) -> list[int]:
        if hosts is None:
            return list(range(self.n))
        chosen = [self._host(op, h, field) for h in hosts]
        if not chosen:
            raise ControlError(op, "the host list is empty", field=field)
        return chosen

    def _pairs(
        self, op: str, src: Iterable[int] | None, dst: Iterable[int] | None
    ) -> list[tuple[int, int]]:
        sources = self._hosts(op, src, "src")
        targets = self._hosts(op, dst, "dst")
        return [(s, d) for s in sources for d in targets if s != d]

    def _refresh(self) -> None:
        self.version += 1
        self._extras = bool(
            self._loss
            or self._loss_all
            or self._jitter
            or self._jitter_all
            or self._reorder
            or self._reorder_all
            or self._duplicate
            or self._duplicate_all
            or self._bandwidth
            or self._bandwidth_all
            or any(self._down)
            or any(self._group)
        )

    # -- queries ----------------------------------------------------------------------------------

    def one_way_s(self, src: int, dst: int) -> float:
        """The configured one-way delay (no jitter)."""
        return self._delay[src][dst]

    def delay_matrix_s(self) -> list[list[float]]:
        """A copy of the one-way delay matrix."""
        return [row.tolist() for row in self._delay]

    def delay_array_s(self) -> np.ndarray:
        """A copy of the one-way delay matrix (n x n)."""
        return np.vstack([np.frombuffer(row, dtype=np.float64) for row in self._delay])

    def describe(self) -> dict[str, object]:
        """Everything besides the delay matrix, as JSON-ready data."""
        return {
            "loss_all": self._loss_all,
            "loss_pairs": [[s, d, p] for (s, d), p in sorted(self._loss.items())],
            "jitter_all": None if self._jitter_all is None else self._jitter_all.to_dict(),
            "jitter_pairs": [[s, d, j.to_dict()] for (s, d), j in sorted(self._jitter.items())],
            "reorder_all": None
            if self._reorder_all is None
            else {"rate": self._reorder_all.rate, "gap_ms": self._reorder_all.gap_ms},
            "reorder_pairs": [
                [s, d, {"rate": r.rate, "gap_ms": r.gap_ms}]
                for (s, d), r in sorted(self._reorder.items())
            ],
            "duplicate_all": self._duplicate_all,
            "duplicate_pairs": [[s, d, p] for (s, d), p in sorted(self._duplicate.items())],
            "bandwidth_all": None if self._bandwidth_all is None else self._bandwidth_all.to_dict(),
            "bandwidth_pairs": [
                [s, d, b.to_dict()] for (s, d), b in sorted(self._bandwidth.items())
            ],
            "groups": self._group[:],
            "down": [h for h in range(self.n) if self._down[h]],
        }

    def needs_fast_path(self) -> list[str]:
        """What is configured that only the engine's compiled data path applies
        (duplication, bandwidth); the simulator and the Python data path refuse them."""
        needs = []
        if self._duplicate or self._duplicate_all:
            needs.append("duplication")
        if self._bandwidth or self._bandwidth_all:
            needs.append("bandwidth")
        return needs

    # -- export for the engine's compiled data path -----------------------------------------------

    def rows(self) -> list[array[float]]:
        """The delay matrix's rows (the model's own arrays: changes show at once)."""
        return self._delay

    def host_state(self) -> tuple[list[int], list[bool], bool]:
        """(partition group per host, down flag per host, anything besides delay?)."""
        return self._group, self._down, self._extras

    def pair_params(self) -> tuple[PairParams, dict[tuple[int, int], PairParams]]:
        """The all-pairs default and every pair with a setting of its own, as the
        compiled data path's parameter tuples (seconds and bytes)."""

        def params(
            loss: float,
            jitter: Jitter | None,
            reorder: Reorder | None,
            duplicate: float,
            bandwidth: Bandwidth | None,
        ) -> PairParams:
            code, j1, j2 = 0, 0.0, 0.0
            if jitter is not None:
                code = _JITTER_CODES[jitter.dist]
                if jitter.dist == "normal":
                    j1 = jitter.sigma_ms / 1e3
                elif jitter.dist == "uniform":
                    j1 = jitter.width_ms / 1e3
                else:
                    j1, j2 = jitter.mean_ms * (jitter.alpha - 1.0) / 1e3, jitter.alpha
            rate_bps = queue_bytes = ecn_bytes = 0.0
            queue_packets = 0
            if bandwidth is not None:
                rate_bps = bandwidth.rate_mbit * 1e6 / 8
                queue_bytes = float(bandwidth.queue_bytes)
                queue_packets = bandwidth.queue_packets
                ecn_bytes = float(bandwidth.ecn_bytes)
            return (
                loss,
                code,
                j1,
                j2,
                reorder.rate if reorder else 0.0,
                reorder.gap_ms / 1e3 if reorder else 0.0,
                duplicate,
                rate_bps,
                queue_bytes,
                queue_packets,
                ecn_bytes,
            )

        keys = set(self._loss) | set(self._jitter) | set(self._reorder)
        keys |= set(self._duplicate) | set(self._bandwidth)
        default = params(
            self._loss_all,
            self._jitter_all,
            self._reorder_all,
            self._duplicate_all,
            self._bandwidth_all,
        )
        pairs = {
            pair: params(
                self._loss.get(pair, self._loss_all),
                self._jitter.get(pair, self._jitter_all),
                self._reorder.get(pair, self._reorder_all),
                self._duplicate.get(pair, self._duplicate_all),
                self._bandwidth.get(pair, self._bandwidth_all),
            )
            for pair in keys
        }
        return default, pairs

    # -- the hot path -----------------------------------------------------------------------------

    def fate(self, src: int, dst: int, rng: random.Random) -> float:
        """Return the one-way delay in seconds for one packet, or a DROP_* code (< 0)."""
        delay = self._delay[src][dst]
        if not self._extras:
            return delay
        if self._down[src] or self._down[dst]:
            return DROP_DOWN
        if self._group[src] != self._group[dst]:
            return DROP_PARTITION
        loss = self._loss.get((src, dst), self._loss_all)
        if loss and rng.random() < loss:
            return DROP_LOSS
        jitter = self._jitter.get((src, dst), self._jitter_all)
        if jitter is not None:
            delay += jitter.sample_s(rng)
            if delay < 0.0:
                delay = 0.0
        reorder = self._reorder.get((src, dst), self._reorder_all)
        if reorder is not None and rng.random() < reorder.rate:
            delay += reorder.gap_ms / 1e3
        return delay

    def blocked(self, src: int, dst: int) -> float:
        """DROP_DOWN or DROP_PARTITION if the pair cannot talk right now, else 0.0.

        The engine asks again when it releases a held packet, so that a partition
        also cuts packets already in flight.
        """
        if self._down[src] or self._down[dst]:
            return DROP_DOWN
        if self._group[src] != self._group[dst]:
            return DROP_PARTITION
        return 0.0

    # -- mutations (validate everything, then apply) -----------------------------------------------

    def set_delay(
        self, one_way_s: float, src: Iterable[int] | None = None, dst: Iterable[int] | None = None
    ) -> int:
        """Set the one-way delay of every (s, d) in src x dst (s != d). Returns the pair count."""
        if not (
            isinstance(one_way_s, int | float)
            and math.isfinite(one_way_s)
            and 0 <= one_way_s <= MAX_ONE_WAY_S
        ):
            raise ControlError(
                "set_delay",
                f"{one_way_s!r} s is not a delay in 0..{MAX_ONE_WAY_S} s",
                field="one_way_s",
            )
        pairs = self._pairs("set_delay", src, dst)
        for s, d in pairs:
            self._delay[s][d] = float(one_way_s)
        self.version += 1
        return len(pairs)

    def scale(self, factor: float) -> None:
        """Multiply every delay by `factor` (> 0)."""
        if not (isinstance(factor, int | float) and math.isfinite(factor) and factor > 0):
            raise ControlError(
                "scale", f"factor must be a positive number, not {factor!r}", field="factor"
            )
        worst = max(max(row) for row in self._delay) * factor
        if worst > MAX_ONE_WAY_S:
            raise ControlError(
                "scale",
                f"the largest delay would become {worst:.1f} s (limit {MAX_ONE_WAY_S} s)",
                field="factor",
            )
        self._delay = [array("d", (v * factor for v in row)) for row in self._delay]
        self.version += 1

    def load(self, one_way_s: Sequence[Sequence[float]] | np.ndarray) -> None:
        """Replace the whole delay matrix (same host count)."""
        self._delay = self._check_matrix("load_matrix", one_way_s, self.n)
        self.version += 1

    def set_loss(
        self, rate: float, src: Iterable[int] | None = None, dst: Iterable[int] | None = None
    ) -> int:
        """Set the loss probability of every pair in src x dst (None = all pairs). Returns the pair count."""
        if not (isinstance(rate, int | float) and 0.0 <= rate <= 1.0):
            raise ControlError("set_loss", f"must be within 0..1, not {rate!r}", field="rate")
        if src is None and dst is None:
            self._loss_all = float(rate)
            self._loss.clear()
            self._refresh()
            return self.n * (self.n - 1)
        pairs = self._pairs("set_loss", src, dst)
        for pair in pairs:
            self._loss[pair] = float(rate)
        self._refresh()
        return len(pairs)

    def set_jitter(
        self,
        jitter: Jitter | None,
        src: Iterable[int] | None = None,
        dst: Iterable[int] | None = None,
    ) -> int:
        """Set (or with None, remove) the jitter of every pair in src x dst (None = all pairs)."""
        if src is None and dst is None:
            self._jitter_all = jitter
            self._jitter.clear()
            self._refresh()
            return self.n * (self.n - 1)
        pairs = self._pairs("set_jitter", src, dst)
        for pair in pairs:
            if jitter is None:
                self._jitter.pop(pair, None)
            else:
                self._jitter[pair] = jitter
        self._refresh()
        return len(pairs)

    def set_reorder(
        self,
        reorder: Reorder | None,
        src: Iterable[int] | None = None,
        dst: Iterable[int] | None = None,
    ) -> int:
        """Set (or with None, remove) reordering of every pair in src x dst (None = all pairs)."""
        return self._set_sparse(
            "set_reorder", self._reorder, "_reorder_all", reorder, src, dst, absent=None
        )

    def set_duplicate(
        self, rate: float, src: Iterable[int] | None = None, dst: Iterable[int] | None = None
    ) -> int:
        """Set the probability that a packet of each pair in src x dst is delivered twice."""
        _check_rate("set_duplicate", rate)
        return self._set_sparse(
            "set_duplicate", self._duplicate, "_duplicate_all", float(rate), src, dst, absent=0.0
        )

    def set_bandwidth(
        self,
        bandwidth: Bandwidth | None,
        src: Iterable[int] | None = None,
        dst: Iterable[int] | None = None,
    ) -> int:
        """Set (or with None, remove) the path bandwidth of every pair in src x dst."""
        return self._set_sparse(
            "set_bandwidth", self._bandwidth, "_bandwidth_all", bandwidth, src, dst, absent=None
        )

    def _set_sparse(
        self,
        op: str,
        table: dict[tuple[int, int], Any],
        all_name: str,
        value: Any,
        src: Iterable[int] | None,
        dst: Iterable[int] | None,
        *,
        absent: Any,
    ) -> int:
        if src is None and dst is None:
            setattr(self, all_name, value)
            table.clear()
            self._refresh()
            return self.n * (self.n - 1)
        pairs = self._pairs(op, src, dst)
        for pair in pairs:
            if value == absent and getattr(self, all_name) == absent:
                table.pop(pair, None)
            else:
                table[pair] = value
        self._refresh()
        return len(pairs)

    def partition(self, groups: Sequence[Sequence[int]]) -> None:
        """Split the hosts into groups that cannot reach each other.

        Hosts not listed in any group form one more group together. Replaces
        any earlier partition.
        """
        seen: set[int] = set()
        for group in groups:
            members = self._hosts("partition", group, "groups")
            for h in members:
                if h in seen:
                    raise ControlError("partition", f"h{h + 1} is in two groups", field="groups")
                seen.add(h)
        if len(groups) < 1 or (len(groups) == 1 and len(seen) == self.n):
            raise ControlError(
                "partition", "needs at least two groups (or one group and the rest)", field="groups"
            )
        new = [0] * self.n
        for k, group in enumerate(groups, start=1):
            for h in group:
                new[h] = k
        self._group = new
        self._refresh()

    def heal(self) -> None:
        """Remove every partition."""
        self._group = [0] * self.n
        self._refresh()

    def set_down(self, host: int, down: bool) -> None:
        """Take a host off the network (all its packets dropped) or bring it back."""
        self._down[self._host("host_down" if down else "host_up", host)] = bool(down)
        self._refresh()
