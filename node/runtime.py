# The trio driver of one peer: a UDP socket, the clock, the timer, the event
# log and the local control API, around the sans-IO Peer (STYLE.md §2).
#
# Theory of operation
#   Three tasks share the Peer: the receiver feeds it datagrams, the timer
#   task calls handle_timer() when get_timer() is due, and control
#   connections feed it commands. Every input is followed, with no await in
#   between, by a drain: events go to the log (written and flushed as they
#   happen), datagrams go to the sender task through a bounded channel (a
#   full channel drops and counts, so a slow socket never blocks the
#   receiver), and the timer's deadline is reset. Time comes only from
#   trio.current_time(), shifted so that the peer's clock starts at 0.
#
# Control API: a Unix stream socket; one JSON object per line in each
# direction. Requests: {"op": "join", "bootstraps": [["10.0.0.1", 7000]]},
# {"op": "leave"}, {"op": "dump"}, {"op": "stats"}, {"op": "status"},
# {"op": "cluster", "candidates": [["10.0.0.2", 7000]]}, {"op": "exit"},
# {"op": "sched", "members": [["10.0.0.2", 7000], ...]} (our cluster for jobs),
# {"op": "submit", "job": {"id": 7, "size": 4, "runtime_s": 3.5, "order": 120.0,
# "point": [4, 1.0, 0.3]}}. Answers: {"ok": true, ...} or {"ok": false, "error": ...}.
#
# Ranks: a job's rank that the scheduler starts here runs as a child process
# (`python -m node.mpi`, or the configured command) in the peer's nursery;
# its end is reported to the peer, a kill cancels it (SIGTERM, then SIGKILL).
#
# Lifetime: the process exits after a graceful leave has completed, on
# {"op": "exit"}, or after SIGTERM/SIGINT (which first leave gracefully,
# bounded by leave_timeout_s; a second signal exits at once).

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shlex
import signal
import socket
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

import trio

from node.drive import drain
from node.peer import Address, Peer
from node.sched.agent import KillTask, RunTask
from node.wire import MAX_DATAGRAM_BYTES, JobInfo

__all__ = ["NodeRuntime", "serve_control"]

# Datagrams the core has produced but the socket has not taken yet. The core
# never produces more than a few hundred per input; past this the socket is
# not keeping up and dropping (counted) is better than growing.
SEND_QUEUE = 4096
# A control request line longer than this is refused (the answer to dump is
# large; requests are not).
MAX_CONTROL_REQUEST_BYTES = 64 * 1024
RECV_BUFFER_BYTES = 4 * 1024 * 1024
DRAIN_TIMEOUT_S = 2.0  # at exit, how long queued datagrams may take to go out
MAX_RESULT_BYTES = 4096  # of a rank program's output, the tail its result is read from
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # Linux; not exported by Python
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux: receive time as a timespec
TIMESTAMP_CMSG_BYTES = socket.CMSG_SPACE(16)
RECV_BATCH = 64  # datagrams read at one wake-up before the outputs are drained


class NodeRuntime:
    """Drives one Peer on a bound trio UDP socket; see the module comment."""

    def __init__(
        self, peer: Peer, sock: trio.socket.SocketType, *, name: str, log: IO[str] | None
    ) -> None:
        self.peer = peer
        self.sock = sock
        self.name = name
        self.counters = Counter[str]()
        self._log = log
        self._t0 = trio.current_time()
        self._send, self._outgoing = trio.open_memory_channel[tuple[bytes, Address]](SEND_QUEUE)
        # The same socket, for sends that need not wait (_send_now); closed by run().
        self._direct: socket.socket | None = None
        with contextlib.suppress(OSError, ValueError):
            self._direct = socket.socket(fileno=os.dup(sock.fileno()))
            self._direct.setblocking(False)
        self._timer_scope = trio.CancelScope()
        self._status_changed = trio.Event()
        self.done = trio.Event()  # set when the node should exit
        self.finished = trio.Event()  # set once run() has drained and stopped
        # RTT measurements a control request waits for: request number -> (event, record)
        self._rtt_waiting: dict[int, tuple[trio.Event, dict[str, Any]]] = {}
        self._nursery: trio.Nursery | None = None  # where ranks run
        self._ranks: dict[tuple[int, int], trio.CancelScope] = {}
        self._wrote = False  # flush(): an event was logged
        self._reported_at_once = False  # flush(): a rank was reported finished in on_action

    def now(self) -> float:
        return trio.current_time() - self._t0

    # -- the step after every input --------------------------------------------------------------------

    def flush(self) -> None:
        """Drain the peer's outputs (node/drive.py, the step the simulator takes too).
        Synchronous on purpose: no other task runs between an input and this."""
        self._reported_at_once = False
        drain(self.peer, self.now(), self)
        while self._reported_at_once:  # a rank that could not start was reported finished
            self._reported_at_once = False
            drain(self.peer, self.now(), self)
        # Whatever was logged since the last flush, by the drain or before it (a rank's
        # record): a peer crashed with kill -9 must not lose lines it already wrote.
        if self._wrote and self._log is not None:
            self._log.flush()
        self._wrote = False
        if not self._status_changed.is_set():
            self._status_changed.set()

    # The drive step's outputs (node.drive.Outputs).

    def on_event(self, record: dict[str, Any]) -> None:
        self.write(record)
        if record["kind"] == "left":
            self.done.set()
        elif record["kind"] == "rtt" and record["request"] in self._rtt_waiting:
            done, slot = self._rtt_waiting.pop(record["request"])
            slot.update(record)
            done.set()

    def on_action(self, action: RunTask | KillTask) -> None:
        key = (action.job, action.attempt)
        if isinstance(action, KillTask):
            if key in self._ranks:
                self._ranks.pop(key).cancel()
        elif self._nursery is None:
            self.peer.task_finished(action.job, action.attempt, False, "not running", self.now())
            self._reported_at_once = True
        else:
            self._ranks[key] = trio.CancelScope()
            self._nursery.start_soon(self._run_rank, action, self._ranks[key])

    def on_datagram(self, data: bytes, addr: Address) -> None:
        datagram = (data, addr)
        if self._send_now(datagram):
            return
        try:
            self._send.send_nowait(datagram)
        except trio.WouldBlock:
            self.counters["tx_queue_full"] += 1
        except trio.ClosedResourceError:
            self.counters["tx_after_close"] += 1

    def on_timer(self, deadline: float | None) -> None:
        self._timer_scope.deadline = math.inf if deadline is None else deadline + self._t0

    def _send_now(self, datagram: tuple[bytes, Address]) -> bool:
        """Send at once if the socket takes it without waiting and nothing is
        queued before it (a Pong or a Ping leaves as its time is taken, not when
        the sender task next runs). False: queue it for the sender task."""
        if self._direct is None or self._outgoing.statistics().current_buffer_used:
            return False
        data, addr = datagram
        for attempt in range(4):
            try:
                self._direct.sendto(data, addr)
            except BlockingIOError:
                return False
            except (ConnectionRefusedError, ConnectionResetError):
                # an ICMP error for an earlier datagram, reported on this send
                self.counters["rx_icmp_error"] += 1
                if attempt < 3:
                    continue  # each pending error is reported once
                self.counters["tx_error.ECONNREFUSED"] += 1
            except OSError as exc:  # unreachable, no buffer space: UDP is lossy anyway
                self.counters[f"tx_error.{errno.errorcode.get(exc.errno or 0, exc.errno)}"] += 1
            except (OverflowError, ValueError, TypeError):  # not an address at all
                self.counters["tx_error.bad_address"] += 1
            return True
        return True

    def write(self, record: dict[str, Any]) -> None:
        if self._log is not None:
            line = {"host": self.name, "wall": round(time.time(), 6), **record}
            self._log.write(json.dumps(line, separators=(",", ":")) + "\n")
            self._wrote = True

    async def _run_rank(self, action: RunTask, scope: trio.CancelScope) -> None:
        config = self.peer.config.sched
        assert config is not None
        peers = ",".join(f"{host}:{port}" for host, port in action.peers)
        env = {
            **os.environ,
            "TESTBED_RANK": str(action.rank),
            "TESTBED_SIZE": str(len(action.peers)),
            "TESTBED_PEERS": peers,
            "TESTBED_COMPUTE_S": repr(action.compute_s),
            "TESTBED_JOB": f"{action.job}/{action.attempt}/{action.round}",
        }
        argv = shlex.split(config.command) or [
            sys.executable, "-m", "node.mpi",
            "--rounds", str(config.rounds),
            "--compute-s", repr(action.compute_s),
            "--collective", config.collective,
            "--payload-bytes", str(config.payload_bytes),
        ]  # fmt: skip
        started, spawned = self.now(), time.time()
        ok, reason = False, "killed"
        result: dict[str, Any] | None = None
        with scope:
            try:
                done = await trio.run_process(
                    argv, env=env, capture_stdout=True, capture_stderr=True, check=False
                )
            except OSError as exc:
                reason = f"cannot start {argv[0]}: {exc.strerror or exc}"
            else:
                ok = done.returncode == 0
                lines = done.stderr.decode(errors="replace").strip().splitlines()
                reason = "" if ok else (lines[-1] if lines else f"exit status {done.returncode}")
                result = _last_json(done.stdout)
        if self._ranks.get((action.job, action.attempt)) is scope:
            del self._ranks[(action.job, action.attempt)]
        self.write(
            {
                "t": round(self.now(), 6),
                "kind": "rank",
                "job": action.job,
                "attempt": action.attempt,
                "rank": action.rank,
                "ok": ok,
                "reason": reason,
                "wall_s": round(self.now() - started, 6),
                # with the rank's began_wall and ended_wall: its start-up and its exit
                "spawned_wall": round(spawned, 6),
                **({"result": result} if result is not None else {}),
            }
        )
        if not scope.cancelled_caught:
            self.peer.task_finished(action.job, action.attempt, ok, reason, self.now())
        self.flush()

    # -- tasks -------------------------------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[Address] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run until done is set; reports the bound address once ready."""
        sent_all = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._receiver)
            nursery.start_soon(self._sender, sent_all)
            nursery.start_soon(self._timer)
            self.flush()
            task_status.started(self.sock.getsockname())
            await self.done.wait()
            # What the last input produced must still go out: a leaver's MERGE
            # commit is exactly that. Let the sender drain, briefly.
            self._send.close()
            with trio.move_on_after(DRAIN_TIMEOUT_S):
                await sent_all.wait()
            nursery.cancel_scope.cancel()
        if self._direct is not None:
            self._direct.close()
            self._direct = None
        self.finished.set()

    async def _receiver(self) -> None:
        """Reads what is queued at each wake-up, up to RECV_BATCH datagrams without
        yielding to trio, then drains the outputs once: a wake-up costs ~100 us of
        CPU whatever it brings (trio's scheduler and epoll), so a burst or a flood
        the peer falls behind on (even one it drops unread) costs a syscall and a
        table lookup per datagram instead."""
        raw = self._direct
        while True:
            if raw is None:  # no second handle on the socket: one datagram per wake-up
                try:
                    got = await self.sock.recvmsg(MAX_DATAGRAM_BYTES + 1024, TIMESTAMP_CMSG_BYTES)
                except (ConnectionRefusedError, ConnectionResetError):
                    self.counters["rx_icmp_error"] += 1  # an ICMP error for an earlier send
                    continue
                self._take(got[0], got[1], got[3])
                self.flush()
                continue
            await trio.lowlevel.wait_readable(raw)
            taken = 0
            while taken < RECV_BATCH:
                try:
                    data, ancillary, _flags, addr = raw.recvmsg(
                        MAX_DATAGRAM_BYTES + 1024, TIMESTAMP_CMSG_BYTES
                    )
                except BlockingIOError:
                    break
                except (ConnectionRefusedError, ConnectionResetError):
                    # An ICMP error for an earlier send: information, not a failure.
                    self.counters["rx_icmp_error"] += 1
                    continue
                taken += 1
                self._take(data, ancillary, addr)
            if taken > 1:
                self.counters["rx_batches"] += 1  # wake-ups that found more than one
            self.flush()

    def _take(self, data: bytes, ancillary: list[tuple[int, int, bytes]], addr: Any) -> None:
        wall, now = time.time(), self.now()  # together: their gap would count as waiting
        host, port = cast("tuple[str, int]", addr)[:2]  # IPv4: (host, port)
        self.peer.receive_datagram(data, (host, port), now, self._arrival(ancillary, wall, now))

    def _arrival(self, ancillary: list[tuple[int, int, bytes]], wall: float, now: float) -> float:
        """When the datagram reached the socket, on our clock: the kernel's
        receive timestamp (wall clock) moved back from `now` by how long it waited
        for us. RTT samples start and end there, not when this task got to run."""
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
                seconds, nanoseconds = struct.unpack_from("qq", payload)
                waited: float = wall - (seconds + nanoseconds * 1e-9)
                return now - min(max(waited, 0.0), 1.0)
        self.counters["rx_no_timestamp"] += 1
        return now

    async def _sender(self, sent_all: trio.Event) -> None:
        async for data, addr in self._outgoing:
            try:
                await self.sock.sendto(data, addr)
            except OSError as exc:  # unreachable, refused, no buffer space: UDP is lossy anyway
                self.counters[f"tx_error.{errno.errorcode.get(exc.errno or 0, exc.errno)}"] += 1
            except (OverflowError, ValueError, TypeError):  # not an address at all
                self.counters["tx_error.bad_address"] += 1
        sent_all.set()

    async def _timer(self) -> None:
        while True:
            with self._timer_scope:
                await trio.sleep_forever()
            deadline = self._timer_scope.deadline
            self._timer_scope = trio.CancelScope(deadline=deadline)
            if self._timer_scope.deadline <= trio.current_time():
                self.peer.handle_timer(max(deadline - self._t0, self.now()))
                self.flush()

    # -- commands ---------------------------------------------------------------------------------------

    def command(self, request: Any) -> dict[str, Any]:
        """Apply one control request; returns the answer. Never raises on bad input."""
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            return {"ok": False, "error": 'expected an object like {"op": "status"}'}
        op = request["op"]
        handler = self._commands().get(op)
        if handler is None:
            return {"ok": False, "error": f"unknown op {op!r} (known: {sorted(self._commands())})"}
        try:
            answer = handler(request)
        except (TypeError, ValueError, KeyError) as exc:
            return {"ok": False, "error": f"{op}: {exc}"}
        self.flush()
        return {"ok": True, **answer}

    def _commands(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        return {
            "join": self._join,
            "leave": self._leave,
            "dump": lambda _: {"dump": {"host": self.name, **self.peer.dump(self.now())}},
            "stats": lambda _: {"stats": self.stats()},
            "status": lambda _: {"status": self.peer.status, "id": self.peer.can.id},
            "cluster": self._cluster,
            "sched": self._sched,
            "submit": self._submit,
            "exit": self._exit,
        }

    def _cluster(self, request: dict[str, Any]) -> dict[str, Any]:
        """{"op": "cluster", "candidates": [["10.0.0.2", 7000], ...]}: the peers
        predicted near us, nearest first (the head solicits from them)."""
        if not isinstance(request.get("candidates"), list):
            raise ValueError('candidates must be a list like [["10.0.0.2", 7000]]')
        self.peer.set_cluster_candidates([_address(c) for c in request["candidates"]], self.now())
        return {}

    def _sched(self, request: dict[str, Any]) -> dict[str, Any]:
        """{"op": "sched", "members": [["10.0.0.2", 7000], ...]}: our cluster."""
        if not isinstance(request.get("members"), list):
            raise ValueError('members must be a list like [["10.0.0.2", 7000]]')
        self.peer.set_sched_cluster([_address(m) for m in request["members"]], self.now())
        return {}

    def _submit(self, request: dict[str, Any]) -> dict[str, Any]:
        """{"op": "submit", "job": {...}}: take a job as its entry."""
        job = request.get("job")
        fields = ("id", "size", "runtime_s", "order", "point")
        if not isinstance(job, dict) or set(job) != set(fields):
            raise ValueError(f"job must be an object with exactly {', '.join(fields)}")
        point = job["point"]
        if not isinstance(point, list) or not all(isinstance(x, int | float) for x in point):
            raise ValueError("job.point must be a list of numbers")
        if not all(isinstance(job[f], int) for f in ("id", "size")) or not all(
            isinstance(job[f], int | float) for f in ("runtime_s", "order")
        ):
            raise ValueError("job.id and job.size are integers, runtime_s and order numbers")
        info = JobInfo(
            job["id"],
            job["size"],
            float(job["runtime_s"]),
            float(job["order"]),
            tuple(float(x) for x in point),
        )
        self.peer.submit(info, self.now())
        return {}

    def _join(self, request: dict[str, Any]) -> dict[str, Any]:
        bootstraps = [_address(b) for b in request.get("bootstraps", [])]
        self.peer.join(bootstraps, self.now())
        return {"status": self.peer.status}

    def _leave(self, _: dict[str, Any]) -> dict[str, Any]:
        if self.peer.member:
            self.peer.leave(self.now())
        else:
            self.done.set()  # nothing to hand over
        return {"status": self.peer.status}

    def _exit(self, _: dict[str, Any]) -> dict[str, Any]:
        self.done.set()
        return {}

    async def measure(self, request: dict[str, Any]) -> dict[str, Any]:
        """The "rtt" control request: measure every target with the prober (under
        its budget) and answer when all are in."""
        try:
            if not isinstance(request.get("targets"), list):
                raise ValueError('targets must be a list like [["10.0.0.2", 7000]]')
            targets = [_address(t) for t in request["targets"]]
            samples = request.get("samples")
            if samples is not None and not (isinstance(samples, int) and 1 <= samples <= 1000):
                raise ValueError(f"samples must be an integer in 1..1000, not {samples!r}")
        except ValueError as exc:
            return {"ok": False, "error": f"rtt: {exc}"}
        slots: list[dict[str, Any]] = []
        events: list[trio.Event] = []
        for index, addr in enumerate(targets):
            # The prober refuses past max_pending; it has no event for "a slot is
            # free", and every measurement ends within samples x timeout.
            while (number := self.peer.measure_rtt(index, addr, self.now(), samples)) is None:  # noqa: ASYNC110
                await trio.sleep(0.05)
            slot: dict[str, Any] = {}
            events.append(trio.Event())
            self._rtt_waiting[number] = (events[-1], slot)
            slots.append(slot)
            self.flush()  # the Pings go out; the event is drained into the slot
        for done in events:
            await done.wait()
        return {
            "ok": True,
            "rtts_s": [slot["rtts"] for slot in slots],
            "lost": [slot["lost"] for slot in slots],
        }

    def stats(self) -> dict[str, Any]:
        return {
            **self.peer.stats(),
            **{f"runtime.{k}": v for k, v in sorted(self.counters.items())},
            "status": self.peer.status,
            "uptime_s": round(self.now(), 3),
            "rss_kb": _rss_kb(),
        }

    async def leave_gracefully(self, timeout_s: float) -> None:
        """Leave (if a member) and wait until done, at most timeout_s."""
        if not self.peer.member:
            self.done.set()
            return
        self.peer.leave(self.now())
        self.flush()
        with trio.move_on_after(timeout_s):
            await self.done.wait()
        self.done.set()


def _last_json(output: bytes) -> dict[str, Any] | None:
    """A rank program's result: the JSON object on its last line (at most
    MAX_RESULT_BYTES of it), or None."""
    lines = output[-MAX_RESULT_BYTES:].decode(errors="replace").strip().splitlines()
    try:
        value = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _address(value: Any) -> Address:
    if not (isinstance(value, list | tuple) and len(value) == 2):
        raise ValueError(f"an address is [host, port], not {value!r}")
    host, port = value
    if not isinstance(host, str) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"an address is [host, port], not {value!r}")
    return (host, port)


def _rss_kb() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


async def serve_control(
    runtime: NodeRuntime,
    path: str,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the control API on a Unix socket at `path` (replacing a stale one)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(path)
    os.chmod(path, 0o600)  # the control API answers its owner only (a Unix socket's mode)
    sock.listen(16)
    listener = trio.SocketListener(sock)

    async def handle(stream: trio.SocketStream) -> None:
        await _control_connection(runtime, stream)

    try:
        async with trio.open_nursery() as nursery:
            task_status.started(path)
            await trio.serve_listeners(handle, [listener], handler_nursery=nursery)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


async def _control_connection(runtime: NodeRuntime, stream: trio.SocketStream) -> None:
    buffer = b""
    async with stream:
        try:
            while True:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    try:
                        request = json.loads(line)
                    except ValueError:
                        answer = {"ok": False, "error": "request is not JSON"}
                    else:
                        if isinstance(request, dict) and request.get("op") == "rtt":
                            answer = await runtime.measure(request)
                        else:
                            answer = runtime.command(request)
                    await stream.send_all(json.dumps(answer).encode() + b"\n")
                if len(buffer) > MAX_CONTROL_REQUEST_BYTES:
                    await stream.send_all(b'{"ok": false, "error": "request too long"}\n')
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return


async def open_udp(bind: Address) -> trio.socket.SocketType:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # A burst of updates must not overflow the default ~200 KB buffer; as root
    # SO_RCVBUFFORCE passes net.core.rmem_max, otherwise we get what it allows.
    for option in (SO_RCVBUFFORCE, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, RECV_BUFFER_BYTES)
            break
        except OSError:
            continue
    # The kernel stamps each datagram as it arrives (NodeRuntime._arrival).
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    await sock.bind(bind)
    return sock


async def main_async(
    peer: Peer,
    *,
    name: str,
    bind: Address,
    control: str | None,
    log: IO[str] | None,
    bootstraps: list[Address] | None,
    leave_timeout_s: float,
    ready: Callable[[Address], None] | None = None,
) -> dict[str, Any]:
    """The whole life of a peer process. Returns its final stats."""
    sock = await open_udp(bind)
    with sock:
        runtime = NodeRuntime(peer, sock, name=name, log=log)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                address = await nursery.start(runtime.run)
                if control is not None:
                    await nursery.start(serve_control, runtime, control)
                runtime.write(
                    {"t": 0.0, "kind": "started", "address": list(address), "pid": os.getpid()}
                )
                if log is not None:
                    log.flush()
                if bootstraps is not None:
                    runtime.command({"op": "join", "bootstraps": [list(b) for b in bootstraps]})
                if ready is not None:
                    ready(address)

                async def on_signals() -> None:
                    async for signum in signals:
                        runtime.write(
                            {"t": round(runtime.now(), 6), "kind": "signal", "signal": signum}
                        )
                        nursery.start_soon(runtime.leave_gracefully, leave_timeout_s)
                        break
                    async for _ in signals:
                        runtime.done.set()  # second signal: no more waiting

                nursery.start_soon(on_signals)
                await runtime.finished.wait()  # not done: run() still drains its sends
                nursery.cancel_scope.cancel()
            # Still inside the signal receiver: a SIGTERM that comes now (a teardown's,
            # right after its "exit") waits, and is re-delivered as we leave it, after
            # the final record is on disk. Written after the receiver, the record was
            # lost to such a signal, and with it the peer's last counters.
            stats = runtime.stats()
            runtime.write({"t": round(runtime.now(), 6), "kind": "exit", "stats": stats})
            if log is not None:
                log.flush()
        return stats
