# The compiled data path (fastpath.c, built by `make` into _fastpath.so),
# behind the same interface as DelayCore.
#
# Theory of operation
#   FastCore owns the C state (fp_t). `sync()` copies what the LinkModel says
#   into it after every change (the delay rows are shared, not copied); the
#   engine calls `run()` in a thread of its own, which holds the C lock except
#   while it sleeps; every other method takes the lock for its call. ctypes
#   releases the GIL around each call, so the data path never waits for Python.
#   Without the library (no `make` yet, or a library older than its source) the
#   engine uses DelayCore and says so (`datapath` in its stats).
#
# Rules
#   1. Each call into C that touches state holds the C lock.
#   2. The library is loaded once per process; `load()` says why it could not be.

from __future__ import annotations

import contextlib
import ctypes
import threading
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testbed.linkmodel import DROP_REASONS, LinkModel
from testbed.net.delay._native import load_library

__all__ = ["FastCore", "FastCores", "load"]

_HERE = Path(__file__).resolve().parent
_SOURCE = _HERE / "fastpath.c"
_LIBRARY = _HERE / "_fastpath.so"
_REASONS = ("loss", "partition", "down", "queue")  # fastpath.c's R_* order
assert set(_REASONS) == set(DROP_REASONS.values())
_WINDOW = 8192


class _Params(ctypes.Structure):
    _fields_ = [
        ("loss", ctypes.c_double),
        ("jitter", ctypes.c_int32),
        ("j1", ctypes.c_double),
        ("j2", ctypes.c_double),
        ("reorder", ctypes.c_double),
        ("reorder_gap_s", ctypes.c_double),
        ("duplicate", ctypes.c_double),
        ("rate_Bps", ctypes.c_double),
        ("limit_bytes", ctypes.c_double),
        ("limit_packets", ctypes.c_int32),
        ("ecn_bytes", ctypes.c_double),
    ]


class _Stats(ctypes.Structure):
    _fields_ = [
        ("packets_in", ctypes.c_uint64),
        ("foreign", ctypes.c_uint64),
        ("no_timestamp", ctypes.c_uint64),
        ("held", ctypes.c_uint64),
        ("max_held", ctypes.c_uint64),
        ("forwarded", ctypes.c_uint64),
        ("drops", ctypes.c_uint64 * 4),
        ("duplicated", ctypes.c_uint64),
        ("ce_marked", ctypes.c_uint64),
        ("reordered", ctypes.c_uint64),
        ("send_errors", ctypes.c_uint64),
        ("early_s", ctypes.c_double),
        ("lead_s", ctypes.c_double),
        ("path_offset_s", ctypes.c_double),
        ("last_error_s", ctypes.c_double),
        ("have_last_error", ctypes.c_int64),
        ("spun_s", ctypes.c_double),
    ]


_lib: ctypes.CDLL | None = None
_why_not: str | None = None
_loaded = False


def load() -> tuple[ctypes.CDLL | None, str | None]:
    """The library, or None and why it is not usable."""
    global _lib, _why_not, _loaded
    if _loaded:
        return _lib, _why_not
    _loaded = True
    lib, _why_not = load_library(_LIBRARY, _SOURCE)
    if lib is None:
        return None, _why_not
    P, u32, u64, i64, d = (
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_uint64,
        ctypes.c_int64,
        ctypes.c_double,
    )
    sig = {
        "fp_new": (P, [ctypes.c_int, ctypes.c_int, ctypes.c_int, u32, u64]),
        "fp_free": (None, [P]),
        "fp_lock": (None, [P]),
        "fp_unlock": (None, [P]),
        "fp_set_rows": (None, [P, P]),
        "fp_set_hosts": (None, [P, P, P, ctypes.c_int]),
        "fp_set_params": (ctypes.c_int, [P, P, P, i64]),
        "fp_set_path_offset": (None, [P, d]),
        "fp_set_fd": (None, [P, ctypes.c_int]),
        "fp_packet_in": (ctypes.c_int, [P, u32, d, u32, u32, u32, u32, d, P]),
        "fp_release": (ctypes.c_int, [P, d, d, P, P, P, ctypes.c_int]),
        "fp_stats": (None, [P, P]),
        "fp_counters": (i64, [P, P, i64, ctypes.c_int]),
        "fp_window": (ctypes.c_int, [P, ctypes.c_int, P]),
        "fp_drain": (i64, [P, P, i64]),
        "fp_next_due": (d, [P]),
        "fp_run": (ctypes.c_int, [P]),
        "fp_stop": (None, [P]),
    }
    for name, (restype, argtypes) in sig.items():
        func = getattr(lib, name)
        func.restype = restype
        func.argtypes = argtypes
    _lib = lib
    return _lib, None


def _figure(name: str) -> Any:
    """A read-only attribute of FastCore taken from its figures()."""
    return property(lambda core: core.figures()[name])


class FastCore:
    """Held packets, verdicts and counters for one WAN core, in C.

    The same methods as DelayCore (the Python reference), and `run()`/`stop()`
    for the engine's data thread. Raises RuntimeError if the library is missing.
    """

    def __init__(
        self,
        model: LinkModel,
        *,
        ip_base: int,
        seed: int,
        path_offset_s: float = 0.0,
        nfq_fd: int = -1,
        queue: int = 0,
    ) -> None:
        lib, why = load()
        if lib is None:
            raise RuntimeError(why)
        self._lib = lib
        self.model = model
        self.n = model.n
        self._fp = lib.fp_new(nfq_fd, queue, self.n, ip_base + 1, seed & ((1 << 64) - 1))
        if not self._fp:
            raise MemoryError("fastpath: fp_new failed")
        self._mutex = threading.Lock()  # serialises Python callers; C has its own lock
        self._keep: list[Any] = []
        self._synced = -1
        self.path_offset_s = path_offset_s
        self.sync()

    def close(self) -> None:
        if self._fp:
            self._lib.fp_free(self._fp)
            self._fp = None

    def __del__(self) -> None:
        self.close()

    # -- the model ----------------------------------------------------------------------------------

    def sync(self) -> None:
        """Copy the model's state into the data path (after every change)."""
        model = self.model
        rows = model.rows()
        pointers = (ctypes.c_void_p * self.n)(*(row.buffer_info()[0] for row in rows))
        group, down, extras = model.host_state()
        groups = array("i", group)
        downs = bytes(bytearray(1 if d else 0 for d in down))
        default, pairs = model.pair_params()
        params = (_Params * (len(pairs) + 1))()
        params[0] = _Params(*default)
        keys = (ctypes.c_uint64 * max(1, len(pairs)))()
        n = self.n
        for k, ((src, dst), values) in enumerate(pairs.items(), start=1):
            params[k] = _Params(*values)
            keys[k - 1] = src * n + dst
        with self._locked():
            self._lib.fp_set_rows(self._fp, pointers)
            self._lib.fp_set_hosts(
                self._fp, groups.buffer_info()[0], ctypes.c_char_p(downs), int(extras)
            )
            if self._lib.fp_set_params(self._fp, params, keys, len(pairs)):
                raise MemoryError("fastpath: fp_set_params failed")
        # The rows are the model's arrays: keep them alive while C points at them.
        self._keep = [rows]
        self._synced = model.version

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._mutex:
            self._lib.fp_lock(self._fp)
            try:
                yield
            finally:
                self._lib.fp_unlock(self._fp)

    @property
    def path_offset_s(self) -> float:
        return self._stats().path_offset_s

    @path_offset_s.setter
    def path_offset_s(self, value: float) -> None:
        with self._locked():
            self._lib.fp_set_path_offset(self._fp, float(value))

    # -- inputs (tests and the reference comparison; the engine's thread reads the queue) -------

    def packet_in(
        self,
        packet_id: int,
        stamp: float,
        saddr: int,
        daddr: int,
        size: int,
        now: float,
        tos: int = 0,
    ) -> int | None:
        if self._synced != self.model.version:
            self.sync()
        mark = ctypes.c_uint32()
        with self._locked():
            verdict = self._lib.fp_packet_in(
                self._fp, packet_id, stamp, saddr, daddr, size, tos, now, ctypes.byref(mark)
            )
        return None if verdict < 0 else int(verdict)

    def release_due(self, until: float, now: float | None = None) -> list[tuple[int, int]]:
        now = until if now is None else now
        if self._synced != self.model.version:
            self.sync()
        out: list[tuple[int, int]] = []
        ids = (ctypes.c_uint32 * 1024)()
        verdicts = (ctypes.c_int32 * 1024)()
        marks = (ctypes.c_uint32 * 1024)()
        with self._locked():
            while True:
                k = self._lib.fp_release(self._fp, until, now, ids, verdicts, marks, 1024)
                out.extend(zip(ids[:k], verdicts[:k], strict=True))
                if k < 1024:
                    break
        return out

    def drain_all(self) -> list[int]:
        with self._locked():
            held = self._stats_unlocked().held
            ids = (ctypes.c_uint32 * max(1, held))()
            k = self._lib.fp_drain(self._fp, ids, held)
        return list(ids[:k])

    # -- the data thread ----------------------------------------------------------------------------

    def attach(self, nfq_fd: int) -> None:
        """Read and answer this queue socket (before run())."""
        with self._locked():
            self._lib.fp_set_fd(self._fp, nfq_fd)

    def run(self) -> int:
        """Read the queue and answer until stop(); returns 0 or the errno that ended it."""
        return int(self._lib.fp_run(self._fp))

    def stop(self) -> None:
        self._lib.fp_stop(self._fp)

    # -- outputs ------------------------------------------------------------------------------------

    def _stats_unlocked(self) -> _Stats:
        stats = _Stats()
        self._lib.fp_stats(self._fp, ctypes.byref(stats))
        return stats

    def _stats(self) -> _Stats:
        with self._locked():
            return self._stats_unlocked()

    def figures(self) -> dict[str, Any]:
        """Everything stats() reports of the data path, read under one lock."""
        s = self._stats()
        return {
            "packets_in": s.packets_in,
            "forwarded": s.forwarded,
            "foreign": s.foreign,
            "no_timestamp": s.no_timestamp,
            "held": s.held,
            "max_held": s.max_held,
            "drops": dict(zip(_REASONS, s.drops, strict=True)),
            "duplicated": s.duplicated,
            "ce_marked": s.ce_marked,
            "reordered": s.reordered,
            "verdict_send_errors": s.send_errors,
            "early_s": s.early_s,
            "lead_s": s.lead_s,
            "spun_s": round(s.spun_s, 3),
        }

    def next_due(self) -> float | None:
        with self._locked():
            due = self._lib.fp_next_due(self._fp)
        return None if due < 0 else float(due)

    # DelayCore's counters, read from figures() (one lock for all of them).
    held = _figure("held")
    max_held = _figure("max_held")
    packets_in = _figure("packets_in")
    foreign = _figure("foreign")
    no_timestamp = _figure("no_timestamp")
    drops = _figure("drops")

    @property
    def last_release_error_s(self) -> float | None:
        s = self._stats()
        return float(s.last_error_s) if s.have_last_error else None

    def forwarded(self) -> int:
        return int(self._stats().forwarded)

    def _window(self, which: int) -> list[float]:
        out = (ctypes.c_double * _WINDOW)()
        with self._locked():
            k = self._lib.fp_window(self._fp, which, out)
        return list(out[:k])

    def lateness_s(self) -> list[float]:
        return self._window(0)

    def immediate_s(self) -> list[float]:
        return self._window(1)

    def counters(self, reset: bool = False) -> dict[str, int | list[list[int]]]:
        size = 1024
        while True:
            out = (ctypes.c_uint64 * (5 * size))()
            with self._locked():
                k = self._lib.fp_counters(self._fp, out, size, int(reset))
            if k >= 0:
                break
            size = -k
        rows = [list(out[5 * i : 5 * i + 5]) for i in range(k)]
        rows.sort()
        return {"hosts": self.n, "pairs": rows}

    def reset_counters(self) -> None:
        self.counters(reset=True)


class FastCores:
    """Several compiled data paths, one per netfilter queue, each in its own thread
    (the kernel spreads packets over the queues by a hash of the address pair, both
    directions alike, so each pair's packets and state stay on one). The kernel
    forwards a released packet inside the thread that releases it: with one queue,
    that thread is the engine's limit; with one per core, the work spreads.

    The same interface as DelayCore for what the engine reads (figures, counters,
    windows) and writes (sync, path offset)."""

    def __init__(
        self,
        model: LinkModel,
        *,
        ip_base: int,
        seed: int,
        path_offset_s: float = 0.0,
        queue: int = 0,
        queues: int = 1,
    ) -> None:
        self.model = model
        self.n = model.n
        self.queues = [queue + k for k in range(queues)]
        self.shards = [
            FastCore(model, ip_base=ip_base, seed=seed + k, path_offset_s=path_offset_s, queue=q)
            for k, q in enumerate(self.queues)
        ]

    @property
    def synced(self) -> int:
        return min(shard._synced for shard in self.shards)

    def sync(self) -> None:
        for shard in self.shards:
            shard.sync()

    @property
    def path_offset_s(self) -> float:
        return self.shards[0].path_offset_s

    @path_offset_s.setter
    def path_offset_s(self, value: float) -> None:
        for shard in self.shards:
            shard.path_offset_s = value

    @property
    def held(self) -> int:
        return sum(shard.held for shard in self.shards)

    def figures(self) -> dict[str, Any]:
        parts = [shard.figures() for shard in self.shards]
        total: dict[str, Any] = {}
        for key, value in parts[0].items():
            if key == "drops":
                total[key] = {r: sum(p["drops"][r] for p in parts) for r in value}
            elif key in ("early_s", "lead_s"):
                total[key] = max(p[key] for p in parts)
            elif key == "max_held":
                total[key] = sum(
                    p[key] for p in parts
                )  # a bound: the shards' peaks may differ in time
            else:
                total[key] = sum(p[key] for p in parts)
        total["queues"] = len(self.shards)
        return total

    def lateness_s(self) -> list[float]:
        return [v for shard in self.shards for v in shard.lateness_s()]

    def immediate_s(self) -> list[float]:
        return [v for shard in self.shards for v in shard.immediate_s()]

    def counters(self, reset: bool = False) -> dict[str, int | list[list[int]]]:
        rows: list[list[int]] = []
        for shard in self.shards:
            part = shard.counters(reset=reset)["pairs"]
            assert isinstance(part, list)
            rows.extend(part)
        rows.sort()
        return {"hosts": self.n, "pairs": rows}

    def reset_counters(self) -> None:
        self.counters(reset=True)

    def close(self) -> None:
        for shard in self.shards:
            shard.close()
