# The delay engine process: one event loop over the netfilter queue, the
# control socket and a wake-up pipe for signals.
#
# Theory of operation
#   The loop sleeps in select() until the next held packet is due, a packet or
#   a control request arrives, or a signal comes. It wakes `early_s` before the
#   due time, where early_s tracks (EWMA) how late select() actually returns on
#   this machine, so releases land on time on average instead of always late.
#   The process asks for SCHED_FIFO and a 1 ns timer slack: under load from
#   hundreds of peers, a normal-priority engine would be scheduled late, and
#   every late wake-up is RTT error.
#
# Rules
#   1. Control requests are validated completely before anything changes;
#      every request, accepted or not, is written to the engine log.
#   2. Every packet read gets exactly one verdict (see DelayCore), including at
#      shutdown (held packets are dropped).
#   3. The engine never outlives the testbed process that started it
#      (PR_SET_PDEATHSIG), and it never leaves anything in the kernel: its
#      queue binding goes with its socket, its rule with the namespace.

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from testbed.errors import ControlError
from testbed.linkmodel import MAX_ONE_WAY_S, Bandwidth, Jitter, LinkModel, Reorder
from testbed.net.delay import _fast
from testbed.net.delay._core import DelayCore
from testbed.net.delay._nfqueue import NF_DROP, NfQueue, parse_packet_untrusted
from testbed.net.delay._protocol import MAX_LINE_BYTES, read_delay_file

__all__ = ["DelayEngine", "EngineConfig", "main"]

PR_SET_PDEATHSIG = 1
PR_SET_TIMERSLACK = 29
SO_TIMESTAMPNS = 35

# select() oversleep is learnt with this weight per sample, and bounded.
EARLY_GAIN = 0.05
EARLY_MAX_S = 0.001
# Packets due within this much of now are released in the same pass.
RELEASE_SLACK_S = 0.000_01
# Under load the loop is often busy reading when a packet falls due, so
# releases run late by a few tens of microseconds. `lead_s` releases that much
# ahead; it is an integral controller on the mean release error (target 0).
LEAD_GAIN = 0.02
LEAD_MAX_S = 0.000_3
# At most this many packets are read before due packets are released again.
READ_BATCH = 64

_VERDICT = struct.Struct(">II")


class EngineConfig(msgspec.Struct, forbid_unknown_fields=True):
    """What the testbed tells a new engine (a JSON file)."""

    hosts: int
    ip_base: int
    matrix_path: str
    control_path: str
    log_path: str
    queue: int = 0
    seed: int = 0
    max_queued: int = 262_144
    realtime_priority: int = 20
    path_offset_s: float = 0.0
    floor_one_way_s: float = 0.0
    stats_interval_s: float = 5.0
    # "auto": the compiled data path (fastpath.c) when it is built, else Python;
    # "c" refuses to start without it; "python" is the reference implementation.
    datapath: str = "auto"
    # Netfilter queues queue..queue+queues-1, each read by a data thread of its own
    # (the compiled data path only; the testbed's rule spreads packets over them).
    queues: int = 1


def _percentiles_us(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"samples": 0}
    values = sorted(values)
    last = len(values) - 1

    def q(p: float) -> float:
        return round(values[min(last, round(p * last))] * 1e6, 1)

    return {
        "samples": len(values),
        "p1": q(0.01),
        "p50": q(0.5),
        "p99": q(0.99),
        "max": round(values[-1] * 1e6, 1),
    }


class DelayEngine:
    """The engine: bind the queue, then serve() until shutdown or a signal."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.n = config.hosts
        self.floor_one_way_s = config.floor_one_way_s
        self.model = LinkModel(read_delay_file(config.matrix_path, self.n))
        self.core: DelayCore | _fast.FastCores
        self.datapath, self.datapath_note = _choose_datapath(config.datapath)
        if config.queues > 1 and self.datapath != "c":
            raise RuntimeError(
                f"{config.queues} queues need the compiled data path ({self.datapath_note})"
            )
        if self.datapath == "c":
            self.core = _fast.FastCores(
                self.model,
                ip_base=config.ip_base,
                seed=config.seed,
                path_offset_s=config.path_offset_s,
                queue=config.queue,
                queues=config.queues,
            )
        else:
            self.core = DelayCore(
                self.model,
                ip_base=config.ip_base,
                rng=random.Random(config.seed),
                path_offset_s=config.path_offset_s,
            )
        self.early_s = 0.0
        self.lead_s = 0.0
        self.started = time.time()
        self.realtime = False
        self._stopping = False
        self._clients: dict[int, tuple[socket.socket, bytearray]] = {}
        self._log = open(config.log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed in serve()
        self._ops = {name[4:]: getattr(self, name) for name in dir(self) if name.startswith("_op_")}

    # -- logging ----------------------------------------------------------------------------------

    def log(self, kind: str, **fields: Any) -> None:
        self._log.write(
            json.dumps({"t": round(time.time(), 6), "kind": kind, **fields}, separators=(",", ":"))
            + "\n"
        )

    # -- set-up -------------------------------------------------------------------------------------

    def _tune_process(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
        if self.config.realtime_priority > 0:
            try:
                os.sched_setscheduler(
                    0, os.SCHED_FIFO, os.sched_param(self.config.realtime_priority)
                )
                self.realtime = True
            except OSError as exc:
                self.log(
                    "warning",
                    message=f"no real-time scheduling ({exc}); release times will be noisier under load",
                )

    def serve(self, ready_fd: int | None = None) -> None:
        """Run until a shutdown request or SIGTERM/SIGINT; always cleans up."""
        self._tune_process()
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        signal.set_wakeup_fd(wake_w.fileno())
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        # Kernel arrival timestamps on skbs are only taken while some socket
        # asks for them; this one does, for as long as the engine runs.
        stamp_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        stamp_sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if os.path.exists(self.config.control_path):
                os.unlink(self.config.control_path)
            listener.bind(self.config.control_path)
            os.chmod(self.config.control_path, 0o600)  # its owner only (as the peers')
            listener.listen(16)
            listener.setblocking(False)
            with contextlib.ExitStack() as stack:
                queues = [
                    stack.enter_context(
                        NfQueue(self.config.queue + k, max_queued=self.config.max_queued)
                    )
                    for k in range(self.config.queues)
                ]
                nfq = queues[0]
                self.log(
                    "start",
                    pid=os.getpid(),
                    hosts=self.n,
                    queue=self.config.queue,
                    realtime=self.realtime,
                    datapath=self.datapath,
                    **({"datapath_note": self.datapath_note} if self.datapath_note else {}),
                )
                if ready_fd is not None:
                    os.write(ready_fd, f"READY {os.getpid()}\n".encode())
                    os.close(ready_fd)
                if isinstance(self.core, _fast.FastCores):
                    self._serve_fast(self.core, queues, listener, wake_r)
                    return
                try:
                    self._loop(nfq, listener, wake_r)
                finally:
                    dropped = self.core.drain_all()
                    if dropped:
                        nfq.send_verdicts(
                            b"".join(nfq.prefix + _VERDICT.pack(NF_DROP, pid) for pid in dropped)
                        )
                    self.log("stop", stats=self._op_stats({}), dropped_in_flight=len(dropped))
        finally:
            for sock, _ in self._clients.values():
                sock.close()
            listener.close()
            stamp_sock.close()
            signal.set_wakeup_fd(-1)
            wake_r.close()
            wake_w.close()
            try:
                os.unlink(self.config.control_path)
            except FileNotFoundError:
                pass
            self._log.close()

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._stopping = True

    # -- the loops ----------------------------------------------------------------------------------

    def _serve_fast(
        self,
        core: _fast.FastCores,
        queues: list[NfQueue],
        listener: socket.socket,
        wake_r: socket.socket,
    ) -> None:
        """The compiled data path reads each queue in a thread of its own; this
        one serves control requests, stats and signals."""
        outcome: dict[int, int] = {}
        threads = []
        for k, (shard, nfq) in enumerate(zip(core.shards, queues, strict=True)):
            shard.attach(nfq.fileno())

            def data(k: int = k, shard: _fast.FastCore = shard) -> None:
                outcome[k] = shard.run()  # held packets are dropped when it returns

            threads.append(threading.Thread(target=data, name=f"datapath-{k}", daemon=True))
        for thread in threads:
            thread.start()
        try:
            self._control_loop(listener, wake_r, threads)
        finally:
            held_before = core.held
            for shard in core.shards:
                shard.stop()
            for thread in threads:
                thread.join()
            for k, code in sorted(outcome.items()):
                if code:
                    self.log(
                        "error",
                        message=f"reading queue {core.queues[k]} failed: {os.strerror(code)}",
                    )
            self.log("stop", stats=self._op_stats({}), dropped_in_flight=held_before)

    def _control_loop(
        self, listener: socket.socket, wake_r: socket.socket, threads: list[threading.Thread]
    ) -> None:
        next_stats = time.time() + self.config.stats_interval_s
        while not self._stopping and all(thread.is_alive() for thread in threads):
            # At most 1 s: a data thread that ended on an error is noticed soon.
            timeout = min(1.0, max(0.0, next_stats - time.time()))
            readable, _, _ = select.select([listener, wake_r, *self._clients], [], [], timeout)
            self._serve_readable(readable, listener, wake_r)
            if time.time() >= next_stats:
                self.log("stats", **self._op_stats({}))
                next_stats = time.time() + self.config.stats_interval_s
        self.log("shutdown", reason="request or signal" if self._stopping else "data path ended")

    # -- the Python data path -----------------------------------------------------------------------

    def _loop(self, nfq: NfQueue, listener: socket.socket, wake_r: socket.socket) -> None:
        core = self.core
        clock = time.time
        prefix = nfq.prefix
        pack = _VERDICT.pack
        parse = parse_packet_untrusted
        buf = bytearray(65536)
        nfq_fd = nfq.fileno()
        next_stats = clock() + self.config.stats_interval_s
        while not self._stopping:
            now = clock()
            released = core.release_due(now + RELEASE_SLACK_S + self.lead_s, now)
            if released:
                nfq.send_verdicts(b"".join([prefix + pack(v, pid) for pid, v in released]))
                error = core.last_release_error_s
                if error is not None:
                    self.lead_s = min(LEAD_MAX_S, max(0.0, self.lead_s + LEAD_GAIN * error))
            due = core.next_due()
            wake_at = (
                next_stats if due is None else min(next_stats, due - self.lead_s - self.early_s)
            )
            timeout = max(0.0, wake_at - clock())
            rlist = [nfq_fd, listener, wake_r, *self._clients]
            readable, _, _ = select.select(rlist, [], [], timeout)
            woke = clock()
            if not readable:
                if due is not None and wake_at < next_stats:
                    # Learn how late select() returns, to wake that much earlier next time.
                    oversleep = woke - wake_at
                    self.early_s = min(
                        EARLY_MAX_S,
                        max(0.0, self.early_s + EARLY_GAIN * (oversleep - self.early_s)),
                    )
                if woke >= next_stats:
                    self.log("stats", **self._op_stats({}))
                    next_stats = woke + self.config.stats_interval_s
                continue
            if nfq_fd in readable:
                immediate = []
                for _ in range(READ_BATCH):
                    length = nfq.recv_into(buf)
                    if not length:
                        break
                    packet = parse(buf, length)
                    if packet is None:
                        continue
                    packet_id, stamp, saddr, daddr, size = packet
                    verdict = core.packet_in(packet_id, stamp, saddr, daddr, size, clock())
                    if verdict is not None:
                        immediate.append(prefix + pack(verdict, packet_id))
                if immediate:
                    nfq.send_verdicts(b"".join(immediate))
            self._serve_readable(readable, listener, wake_r)
        self.log("shutdown", reason="request or signal")

    # -- control ------------------------------------------------------------------------------------

    def _serve_readable(
        self, readable: list[Any], listener: socket.socket, wake_r: socket.socket
    ) -> None:
        """Drain the signal wake-up, accept clients and answer their requests."""
        if wake_r in readable:
            try:
                wake_r.recv(64)
            except BlockingIOError:
                pass
        if listener in readable:
            self._accept(listener)
        for fd in readable:
            if isinstance(fd, int) and fd in self._clients:
                self._read_client(fd)

    def _accept(self, listener: socket.socket) -> None:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return
        conn.settimeout(5.0)
        self._clients[conn.fileno()] = (conn, bytearray())

    def _read_client(self, fd: int) -> None:
        conn, pending = self._clients[fd]
        try:
            chunk = conn.recv(1 << 20)
        except OSError:
            chunk = b""
        if not chunk:
            del self._clients[fd]
            conn.close()
            return
        pending += chunk
        while b"\n" in pending:
            line, _, rest = bytes(pending).partition(b"\n")
            pending[:] = rest
            answer = self.handle_request(line)
            try:
                conn.sendall(json.dumps(answer, separators=(",", ":")).encode() + b"\n")
            except OSError:
                del self._clients[fd]
                conn.close()
                return
        if len(pending) > MAX_LINE_BYTES:
            del self._clients[fd]
            conn.close()

    def handle_request(self, line: bytes) -> dict[str, Any]:
        """Decode, validate and apply one request; return the answer. Raises nothing."""
        op = None
        try:
            try:
                request = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                raise ControlError("?", "the request is not valid JSON") from None
            if not isinstance(request, dict) or not isinstance(request.get("op"), str):
                raise ControlError("?", 'a request is a JSON object with an "op" string')
            op = request.pop("op")
            handler = self._ops.get(op)
            if handler is None:
                raise ControlError(op, f"unknown operation; known: {', '.join(sorted(self._ops))}")
            result = handler(request)
            if isinstance(self.core, _fast.FastCores) and self.core.synced != self.model.version:
                self.core.sync()
        except ControlError as exc:
            if exc.op not in ("stats", "counters", "ping", "describe", "one_way"):
                self.log("control", op=op, ok=False, error=str(exc))
            # The reason alone: the client's ControlError adds "op: field: " again.
            return {"ok": False, "error": exc.reason, "op": exc.op, "field": exc.field}
        if op not in ("stats", "counters", "ping", "describe", "one_way"):
            self.log(
                "control",
                op=op,
                ok=True,
                args=_named(request) if op != "load_matrix" else {"path": request.get("path")},
                result=result,
            )
        return {"ok": True, "result": result}

    @staticmethod
    def _args(
        op: str, args: dict[str, Any], **spec: tuple[type | tuple[type, ...], Any]
    ) -> list[Any]:
        """Check argument names and types; returns values in spec order (default if absent)."""
        for key in args:
            if key not in spec:
                raise ControlError(
                    op, f"unknown argument; expected {', '.join(spec) or 'none'}", field=key
                )
        values = []
        for key, (types, default) in spec.items():
            value = args.get(key, default)
            if value is ...:
                raise ControlError(op, "missing argument", field=key)
            allowed = types if isinstance(types, tuple) else (types,)
            # bool is an int subclass; only accept it where bool is asked for.
            if value is not None and (
                not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)
            ):
                expected = " or ".join(t.__name__ for t in allowed)
                raise ControlError(
                    op, f"expected {expected}, got {type(value).__name__}", field=key
                )
            values.append(value)
        return values

    def _hosts_arg(self, op: str, field: str, value: Any) -> list[int] | None:
        if value is None:
            return None
        if not isinstance(value, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in value
        ):
            raise ControlError(op, "expected a list of host indices", field=field)
        for h in value:
            if not 0 <= h < self.n:
                raise ControlError(
                    op,
                    f"no host h{h + 1} (index {h}); hosts are h1..h{self.n}",
                    field=field,
                )
        return value

    def _apply_floor(self, op: str, matrix: np.ndarray, clamp: bool) -> int:
        """Raise entries below the floor if clamp, else refuse. Mutates `matrix`; returns the count raised."""
        # A relative tolerance: the testbed computes clamped values in ms and we compare in s.
        low = matrix < self.floor_one_way_s * (1 - 1e-9)
        np.fill_diagonal(low, False)
        count = int(low.sum())
        if not count:
            return 0
        if not clamp:
            shown = ", ".join(
                f"h{i + 1}->h{j + 1} {matrix[i, j] * 1e3:.3f} ms" for i, j in np.argwhere(low)[:6]
            )
            more = f" and {count - 6} more" if count > 6 else ""
            raise ControlError(
                op,
                f"{count} one-way delay(s) below the engine's measured floor of "
                f"{self.floor_one_way_s * 1e3:.3f} ms: {shown}{more}; pass clamp=true to raise them to the floor",
            )
        matrix[low] = self.floor_one_way_s
        return count

    def _op_ping(self, args: dict[str, Any]) -> dict[str, Any]:
        self._args("ping", args)
        return {"pid": os.getpid(), "hosts": self.n}

    def _op_stats(self, args: dict[str, Any]) -> dict[str, Any]:
        self._args("stats", args)
        core = self.core
        if isinstance(core, _fast.FastCores):
            figures = core.figures()
            early_s, lead_s = figures.pop("early_s"), figures.pop("lead_s")
        else:
            figures = {
                "packets_in": core.packets_in,
                "forwarded": core.forwarded(),
                "foreign": core.foreign,
                "no_timestamp": core.no_timestamp,
                "held": core.held,
                "max_held": core.max_held,
                "drops": dict(core.drops),
            }
            early_s, lead_s = self.early_s, self.lead_s
        return {
            "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started, 3),
            "hosts": self.n,
            "realtime": self.realtime,
            "datapath": self.datapath,
            **figures,
            "lateness_us": _percentiles_us(core.lateness_s()),
            "immediate_us": _percentiles_us(core.immediate_s()),
            "early_us": round(early_s * 1e6, 1),
            "lead_us": round(lead_s * 1e6, 1),
            "path_offset_us": round(core.path_offset_s * 1e6, 1),
            "floor_one_way_us": round(self.floor_one_way_s * 1e6, 1),
            "kernel": _kernel_queue_stats(self.config.queue, self.config.queues),
        }

    def _op_counters(self, args: dict[str, Any]) -> dict[str, Any]:
        (reset,) = self._args("counters", args, reset=(bool, False))
        result = self.core.counters()
        if reset:
            self.core.reset_counters()
        return result

    def _op_describe(self, args: dict[str, Any]) -> dict[str, Any]:
        self._args("describe", args)
        return {**self.model.describe(), "one_way_s": self.model.delay_matrix_s()}

    def _op_one_way(self, args: dict[str, Any]) -> dict[str, Any]:
        """The configured one-way delays (s) of the listed [src, dst] pairs: what a
        fidelity sample compares with, without the whole matrix."""
        (pairs,) = self._args("one_way", args, pairs=(list, ...))
        if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise ControlError("one_way", "expected a list of [src, dst] pairs", field="pairs")
        flat = self._hosts_arg("one_way", "pairs", [h for p in pairs for h in p]) or []
        model = self.model
        return {
            "one_way_s": [model.one_way_s(flat[k], flat[k + 1]) for k in range(0, len(flat), 2)]
        }

    def _op_set_delay(self, args: dict[str, Any]) -> dict[str, Any]:
        one_way_s, src, dst, clamp = self._args(
            "set_delay",
            args,
            one_way_s=((int, float), ...),
            src=(list, None),
            dst=(list, None),
            clamp=(bool, False),
        )
        src = self._hosts_arg("set_delay", "src", src)
        dst = self._hosts_arg("set_delay", "dst", dst)
        if not (math.isfinite(one_way_s) and 0 <= one_way_s <= MAX_ONE_WAY_S):
            raise ControlError(
                "set_delay",
                f"{one_way_s!r} s is not a delay in 0..{MAX_ONE_WAY_S} s",
                field="one_way_s",
            )
        clamped = 0
        if one_way_s < self.floor_one_way_s * (1 - 1e-9):
            if not clamp:
                raise ControlError(
                    "set_delay",
                    f"{one_way_s * 1e3:.3f} ms is below the engine's measured floor of {self.floor_one_way_s * 1e3:.3f} ms "
                    "one way; pass clamp=true to use the floor",
                    field="one_way_s",
                )
            one_way_s = self.floor_one_way_s
            clamped = 1
        pairs = self.model.set_delay(one_way_s, src, dst)
        return {"pairs": pairs, "clamped": clamped * pairs}

    def _op_scale(self, args: dict[str, Any]) -> dict[str, Any]:
        factor, clamp = self._args("scale", args, factor=((int, float), ...), clamp=(bool, False))
        if not (math.isfinite(factor) and factor > 0):
            raise ControlError(
                "scale", f"factor must be a positive number, not {factor!r}", field="factor"
            )
        matrix = self.model.delay_array_s() * factor
        clamped = self._apply_floor("scale", matrix, clamp)
        self.model.load(matrix)
        return {"clamped": clamped}

    def _op_load_matrix(self, args: dict[str, Any]) -> dict[str, Any]:
        path, clamp = self._args("load_matrix", args, path=(str, ...), clamp=(bool, False))
        try:
            matrix = read_delay_file(path, self.n)
        except OSError as exc:
            raise ControlError(
                "load_matrix", f"cannot read {path}: {exc.strerror}", field="path"
            ) from None
        LinkModel._check_matrix("load_matrix", matrix, self.n)
        clamped = self._apply_floor("load_matrix", matrix, clamp)
        self.model.load(matrix)
        return {"clamped": clamped}

    def _op_set_loss(self, args: dict[str, Any]) -> dict[str, Any]:
        rate, src, dst = self._args(
            "set_loss", args, rate=((int, float), ...), src=(list, None), dst=(list, None)
        )
        pairs = self.model.set_loss(
            rate, self._hosts_arg("set_loss", "src", src), self._hosts_arg("set_loss", "dst", dst)
        )
        return {"pairs": pairs}

    def _op_set_jitter(self, args: dict[str, Any]) -> dict[str, Any]:
        spec, src, dst = self._args(
            "set_jitter", args, jitter=(dict, ...), src=(list, None), dst=(list, None)
        )
        jitter = None
        if spec is not None:
            jitter = Jitter.from_dict(spec)
        pairs = self.model.set_jitter(
            jitter,
            self._hosts_arg("set_jitter", "src", src),
            self._hosts_arg("set_jitter", "dst", dst),
        )
        return {"pairs": pairs}

    def _op_set_reorder(self, args: dict[str, Any]) -> dict[str, Any]:
        rate, gap_ms, src, dst = self._args(
            "set_reorder",
            args,
            rate=((int, float), ...),
            gap_ms=((int, float), None),
            src=(list, None),
            dst=(list, None),
        )
        src = self._hosts_arg("set_reorder", "src", src)
        dst = self._hosts_arg("set_reorder", "dst", dst)
        reorder = None
        if rate:
            if gap_ms is None:
                raise ControlError("set_reorder", "missing argument", field="gap_ms")
            reorder = Reorder(rate, gap_ms)
        elif not (isinstance(rate, int | float) and rate == 0):
            raise ControlError("set_reorder", f"must be within 0..1, not {rate!r}", field="rate")
        return {"pairs": self.model.set_reorder(reorder, src, dst)}

    def _needs_c(self, op: str) -> None:
        if self.datapath != "c":
            raise ControlError(
                op,
                f"needs the compiled data path, and this engine runs the Python one ({self.datapath_note})",
            )

    def _op_set_duplicate(self, args: dict[str, Any]) -> dict[str, Any]:
        rate, src, dst = self._args(
            "set_duplicate", args, rate=((int, float), ...), src=(list, None), dst=(list, None)
        )
        src = self._hosts_arg("set_duplicate", "src", src)
        dst = self._hosts_arg("set_duplicate", "dst", dst)
        if rate:
            self._needs_c("set_duplicate")
        return {"pairs": self.model.set_duplicate(rate, src, dst)}

    def _op_set_bandwidth(self, args: dict[str, Any]) -> dict[str, Any]:
        rate, queue_bytes, queue_packets, ecn_bytes, src, dst = self._args(
            "set_bandwidth",
            args,
            rate_mbit=((int, float), None),
            queue_bytes=(int, 0),
            queue_packets=(int, 0),
            ecn_bytes=(int, 0),
            src=(list, None),
            dst=(list, None),
        )
        src = self._hosts_arg("set_bandwidth", "src", src)
        dst = self._hosts_arg("set_bandwidth", "dst", dst)
        bandwidth = None
        if rate is not None:
            bandwidth = Bandwidth(rate, queue_bytes, queue_packets, ecn_bytes)
            self._needs_c("set_bandwidth")
        elif queue_bytes or queue_packets or ecn_bytes:
            raise ControlError(
                "set_bandwidth",
                "a queue without a rate (rate_mbit=null removes it)",
                field="rate_mbit",
            )
        return {"pairs": self.model.set_bandwidth(bandwidth, src, dst)}

    def _op_partition(self, args: dict[str, Any]) -> dict[str, Any]:
        (groups,) = self._args("partition", args, groups=(list, ...))
        checked = [self._hosts_arg("partition", "groups", g) for g in groups]
        self.model.partition([g for g in checked if g is not None])
        return {"groups": len(groups)}

    def _op_heal(self, args: dict[str, Any]) -> dict[str, Any]:
        self._args("heal", args)
        self.model.heal()
        return {}

    def _op_host_down(self, args: dict[str, Any]) -> dict[str, Any]:
        (host,) = self._args("host_down", args, host=(int, ...))
        self.model.set_down(host, True)
        return {}

    def _op_host_up(self, args: dict[str, Any]) -> dict[str, Any]:
        (host,) = self._args("host_up", args, host=(int, ...))
        self.model.set_down(host, False)
        return {}

    def _op_set_calibration(self, args: dict[str, Any]) -> dict[str, Any]:
        offset, floor = self._args(
            "set_calibration",
            args,
            path_offset_s=((int, float), ...),
            floor_one_way_s=((int, float), ...),
        )
        for name, value in (("path_offset_s", offset), ("floor_one_way_s", floor)):
            if not (math.isfinite(value) and 0 <= value < 0.1):
                raise ControlError(
                    "set_calibration", f"{value!r} is not within 0..0.1 s", field=name
                )
        self.core.path_offset_s = float(offset)
        self.floor_one_way_s = float(floor)
        return {}

    def _op_shutdown(self, args: dict[str, Any]) -> dict[str, Any]:
        self._args("shutdown", args)
        self._stopping = True
        return {}


def _choose_datapath(wanted: str) -> tuple[str, str | None]:
    """("c" or "python", a note when the choice was not the asked one)."""
    if wanted not in ("auto", "c", "python"):
        raise ValueError(f"datapath must be auto, c or python, not {wanted!r}")
    if wanted == "python":
        return "python", "asked for"
    lib, why = _fast.load()
    if lib is not None:
        return "c", None
    if wanted == "c":
        raise RuntimeError(f"the compiled data path is asked for: {why}")
    return "python", why


def _kernel_queue_stats(queue: int, queues: int = 1) -> dict[str, int]:
    """This namespace's counters for our queues, summed (/proc/net/netfilter/nfnetlink_queue)."""
    try:
        text = Path("/proc/net/netfilter/nfnetlink_queue").read_text()
    except OSError:
        return {}
    total: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 8 and queue <= int(fields[0]) < queue + queues:
            for name, value in (
                ("queued", fields[2]),
                ("queue_dropped", fields[5]),
                ("user_dropped", fields[6]),
            ):
                total[name] = total.get(name, 0) + int(value)
    return total


def main(argv: list[str] | None = None) -> int:
    """Entry point: python -m testbed.net.delay CONFIG.json [--ready-fd FD]."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m testbed.net.delay CONFIG.json [--ready-fd FD]", file=sys.stderr)
        return 2
    ready_fd = None
    if len(argv) == 3 and argv[1] == "--ready-fd":
        ready_fd = int(argv[2])
    try:
        config = msgspec.json.decode(Path(argv[0]).read_bytes(), type=EngineConfig)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        print(f"delay engine: bad config {argv[0]}: {exc}", file=sys.stderr)
        return 2
    engine = DelayEngine(config)
    engine.serve(ready_fd)
    return 0


def _named(args: dict[str, Any]) -> dict[str, Any]:
    """A request's arguments for the log, hosts by name (index k is h<k+1>), as users name them."""

    def names(value: Any) -> Any:
        if isinstance(value, list):
            return [names(v) for v in value]
        if isinstance(value, int) and not isinstance(value, bool):
            return f"h{value + 1}"
        return value

    return {
        k: names(v) if k in ("src", "dst", "groups", "host", "pairs") else v
        for k, v in args.items()
    }
