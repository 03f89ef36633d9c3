# Measuring what the emulated WAN delivers: ICMP echo RTT between hosts.
#
# One process, one raw ICMP socket per host namespace. The destination's kernel
# answers the echo request itself, so no user-space responder adds its own
# scheduling delay. Arrival is timed by the kernel (SO_TIMESTAMPNS on the
# reply); departure is read just before sendto(). Probes are paced at a
# configured rate so that the measurement also loads the delay engine.
#
# parse_reply_untrusted() may only return None for anything that is not one of
# our replies: other ICMP, truncated packets, replies of another prober.

from __future__ import annotations

import ctypes
import os
import random
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from testbed.net._netns import entered_netns
from testbed.net.delay import load_library

__all__ = ["IcmpProber", "ProbeResult", "icmp_checksum", "native_prober"]

_PINGER = Path(__file__).resolve().parent / "_pinger.so"
_PINGER_SOURCE = _PINGER.with_name("pinger.c")
_native: ctypes.CDLL | None = None
_native_why: str | None = None
_native_loaded = False


def native_prober() -> tuple[ctypes.CDLL | None, str | None]:
    """The compiled send/receive loop (pinger.c), or None and why not."""
    global _native, _native_why, _native_loaded
    if _native_loaded:
        return _native, _native_why
    _native_loaded = True
    lib, _native_why = load_library(_PINGER, _PINGER_SOURCE)
    if lib is not None:
        P = ctypes.c_void_p
        lib.pg_probe.restype = ctypes.c_int64
        lib.pg_probe.argtypes = [
            ctypes.c_int, P, P, ctypes.c_int64, P, P, ctypes.c_uint32,
            ctypes.c_double, ctypes.c_double, ctypes.c_uint32, P, P, P, P, P, ctypes.c_int,
        ]  # fmt: skip
        _native = lib
    return _native, _native_why


ICMP_ECHO_REQUEST = 8
ICMP_ECHO_REPLY = 0
SOL_RAW = 255
ICMP_FILTER = 1
SO_TIMESTAMPNS = 35
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
# The compiled loop's SCHED_FIFO priority (0: a normal process). 10 (below the delay
# engine's 20) was tried: at 70,000 probes/s offered it changed neither the achieved
# rate (89.7 k packets/s: the two cores are full) nor the error, so it stays normal.
PROBER_PRIORITY = 0
SCM_TIMESTAMPNS = SO_TIMESTAMPNS

_ICMP_HEADER = struct.Struct("!BBHHH")
_PAYLOAD = struct.Struct("!II")  # session, probe number
_TIMESPEC = struct.Struct("@qq")


def icmp_checksum(data: bytes) -> int:
    """RFC 1071 Internet checksum."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def echo_request(ident: int, seq: int, session: int, probe: int) -> bytes:
    payload = _PAYLOAD.pack(session, probe)
    header = _ICMP_HEADER.pack(ICMP_ECHO_REQUEST, 0, 0, ident, seq)
    checksum = icmp_checksum(header + payload)
    return _ICMP_HEADER.pack(ICMP_ECHO_REQUEST, 0, checksum, ident, seq) + payload


def parse_reply_untrusted(packet: bytes, session: int) -> int | None:
    """Return the probe number of one of our echo replies (IPv4 header included), else None."""
    if len(packet) < 20:
        return None
    header_len = (packet[0] & 0x0F) * 4
    body = packet[header_len:]
    if len(body) < _ICMP_HEADER.size + _PAYLOAD.size:
        return None
    kind, _code, _sum, _ident, _seq = _ICMP_HEADER.unpack_from(body)
    if kind != ICMP_ECHO_REPLY:
        return None
    their_session, probe = _PAYLOAD.unpack_from(body, _ICMP_HEADER.size)
    if their_session != session:
        return None
    return probe


@dataclass
class ProbeResult:
    """RTT samples per probed pair (seconds), in the order the pairs were given."""

    pairs: list[tuple[int, int]]
    rtts_s: list[list[float]]
    sent: int
    received: int
    started: float
    duration_s: float
    late_or_foreign: int = 0

    @property
    def lost(self) -> int:
        return self.sent - self.received


class IcmpProber:
    """Raw ICMP sockets in each host's namespace. Close it (or use `with`)."""

    def __init__(
        self, netns_by_host: Sequence[str], ips: Sequence[str], *, native: bool | None = None
    ) -> None:
        """native: use the compiled loop (None: when it is built; True: insist)."""
        lib, why = native_prober()
        if native and lib is None:
            raise RuntimeError(f"the compiled prober is asked for: {why}")
        self.native = lib is not None if native is None else native
        self.ips = list(ips)
        self.socks: list[socket.socket] = []
        self.session = random.getrandbits(32)
        self.foreign = 0  # replies that were not ours, or late, or duplicated
        self._next_probe = 0
        self._poller: select.epoll | None = None
        self._fd_host: dict[int, int] = {}
        try:
            for name in netns_by_host:
                with entered_netns(name):
                    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
                sock.setblocking(False)
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                # Requests held by the delay engine still count against the sender's
                # buffer, and at 50,000 probes/s replies come in bursts: default
                # buffers overflow (sends fail, replies are dropped).
                for force, plain in (
                    (SO_SNDBUFFORCE, socket.SO_SNDBUF),
                    (SO_RCVBUFFORCE, socket.SO_RCVBUF),
                ):
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, force, 16 << 20)
                    except PermissionError:
                        sock.setsockopt(socket.SOL_SOCKET, plain, 16 << 20)
                # Deliver echo replies only (bit set = type filtered out).
                sock.setsockopt(
                    SOL_RAW, ICMP_FILTER, struct.pack("I", 0xFFFFFFFF & ~(1 << ICMP_ECHO_REPLY))
                )
                self.socks.append(sock)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._poller is not None:
            self._poller.close()
            self._poller = None
        for sock in self.socks:
            sock.close()
        self.socks.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, src: int, dst: int, probe: int) -> float:
        """Send one echo request from host src to host dst; returns the send time (time.time()).

        Returns 0.0 if the kernel refused to send it (it then counts as lost).
        """
        packet = echo_request(src & 0xFFFF, probe & 0xFFFF, self.session, probe)
        sent_at = time.time()
        try:
            self.socks[src].sendto(packet, (self.ips[dst], 0))
        except OSError:
            return 0.0
        return sent_at

    def receive(self, timeout_s: float) -> list[tuple[int, float]]:
        """Wait up to timeout_s for replies; returns (probe number, kernel arrival time) pairs."""
        if self._poller is None:
            self._poller = select.epoll()
            for host, sock in enumerate(self.socks):
                self._poller.register(sock.fileno(), select.EPOLLIN)
                self._fd_host[sock.fileno()] = host
        out = []
        for fd, _ in self._poller.poll(timeout_s):
            sock = self.socks[self._fd_host[fd]]
            while True:
                try:
                    data, ancillary, _flags, _addr = sock.recvmsg(2048, 64)
                except BlockingIOError:
                    break
                probe = parse_reply_untrusted(data, self.session)
                if probe is None:
                    self.foreign += 1
                    continue
                out.append((probe, _kernel_time(ancillary)))
        return out

    def probe(
        self,
        pairs: Sequence[tuple[int, int]],
        *,
        samples: int,
        rate_per_s: float,
        timeout_s: float,
        seed: int = 0,
        on_sent: Callable[[int], None] | None = None,
    ) -> ProbeResult:
        """Send `samples` echo requests per pair, paced at `rate_per_s` overall.

        Within each round the pairs go in a seeded random order, so no pair is
        always measured first. Replies later than `timeout_s` after the last send
        count as lost. The duration runs from the first send to the last reply.
        """
        pairs = list(pairs)
        for src, dst in pairs:  # the compiled loop indexes its arrays with them unchecked
            if not (0 <= src < len(self.socks) and 0 <= dst < len(self.ips)):
                raise ValueError(
                    f"probe pair ({src}, {dst}): the source must be one of the "
                    f"{len(self.socks)} sockets and the destination one of the {len(self.ips)} "
                    "addresses"
                )
        order = list(range(len(pairs)))
        rng = random.Random(seed)
        schedule: list[int] = []
        for _ in range(samples):
            rng.shuffle(order)
            schedule.extend(order)
        if self.native:
            return self._probe_native(pairs, schedule, rate_per_s, timeout_s, on_sent)
        total = len(schedule)
        rtts: list[list[float]] = [[] for _ in pairs]
        sent_at = [0.0] * total
        base = self._next_probe
        self._next_probe += total
        received = 0
        foreign_before = self.foreign
        interval = 1.0 / rate_per_s
        start = time.time()
        last_reply = start
        next_send = time.monotonic()
        sent = 0
        deadline = None
        while True:
            now = time.monotonic()
            while sent < total and next_send <= now:
                src, dst = pairs[schedule[sent]]
                sent_at[sent] = self.send(src, dst, base + sent)
                sent += 1
                next_send += interval
                if on_sent is not None and sent % 256 == 0:
                    on_sent(256)
            if sent == total and deadline is None:
                deadline = time.monotonic() + timeout_s
                if on_sent is not None and total % 256:
                    on_sent(total % 256)
            if deadline is not None and (received == total or time.monotonic() >= deadline):
                break
            wait = max(0.0, next_send - time.monotonic()) if sent < total else 0.05
            for probe, arrived in self.receive(wait):
                k = probe - base
                if not 0 <= k < sent or sent_at[k] <= 0:
                    self.foreign += 1  # a duplicate, or a reply to an earlier batch
                    continue
                rtts[schedule[k]].append(arrived - sent_at[k])
                sent_at[k] = 0.0
                received += 1
                last_reply = max(last_reply, arrived)
        return ProbeResult(
            pairs, rtts, total, received, start, last_reply - start, self.foreign - foreign_before
        )

    def _probe_native(
        self,
        pairs: list[tuple[int, int]],
        schedule: list[int],
        rate_per_s: float,
        timeout_s: float,
        on_sent: Callable[[int], None] | None,
    ) -> ProbeResult:
        lib, _ = native_prober()
        assert lib is not None
        total = len(schedule)
        n = len(self.socks)
        fds = (ctypes.c_int * n)(*(s.fileno() for s in self.socks))
        # Destinations may outnumber the sockets (hosts on other machines have none here).
        ips = (ctypes.c_uint32 * len(self.ips))(
            *(struct.unpack("=I", socket.inet_aton(ip))[0] for ip in self.ips)
        )
        srcs = (ctypes.c_int32 * total)(*(pairs[k][0] for k in schedule))
        dsts = (ctypes.c_int32 * total)(*(pairs[k][1] for k in schedule))
        sent_at = (ctypes.c_double * total)()
        rtt = (ctypes.c_double * total)()
        times = (ctypes.c_double * 2)()
        foreign = ctypes.c_int64()
        progress = ctypes.c_int64()
        base = self._next_probe
        self._next_probe += total
        result: list[int] = []

        def run() -> None:
            result.append(
                lib.pg_probe(
                    n, fds, ips, total, srcs, dsts, base & 0xFFFFFFFF, rate_per_s, timeout_s,
                    self.session, sent_at, rtt, times, ctypes.byref(foreign),
                    ctypes.byref(progress), PROBER_PRIORITY,
                )
            )  # fmt: skip

        thread = threading.Thread(target=run, name="prober")
        thread.start()
        reported = 0
        while thread.is_alive():
            thread.join(0.2)
            if on_sent is not None and progress.value > reported:
                on_sent(progress.value - reported)
                reported = progress.value
        received = result[0]
        if received < 0:
            raise OSError(-received, f"probing failed: {os.strerror(-received)}")
        rtts: list[list[float]] = [[] for _ in pairs]
        for k, pair in enumerate(schedule):
            if rtt[k] >= 0.0:
                rtts[pair].append(rtt[k])
        self.foreign += foreign.value
        return ProbeResult(
            pairs, rtts, total, received, times[0], times[1] - times[0], foreign.value
        )


def _kernel_time(ancillary: list[tuple[int, int, bytes]]) -> float:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return sec + nsec * 1e-9
    return time.time()
