# One task (rank) of an MPI-like job, over real sockets.
#
# Theory of operation
#   The job's ranks know each other's addresses (rank order). Each listens on
#   its own address; rank r connects to every lower rank and accepts every
#   higher one (a full mesh of TCP connections, each opened by a hello naming
#   the rank and the job's token, answered by a welcome: a connection from a
#   rank of another job -- a killed attempt still exiting -- is turned away).
#   An opening barrier aligns the ranks; then the program runs `rounds` times: a compute phase (`compute_s` / rounds, slept: the
#   trace's runtime, scaled, without loading the host's CPU) and a collective
#   through rank 0: every other rank sends its part (`payload_bytes`), rank 0
#   combines them (allreduce: the element-wise sum of float64 vectors; barrier:
#   nothing) and sends the result back. A round costs a round trip between
#   rank 0 and the farthest rank, so a job spread over a high-latency set of
#   hosts runs measurably slower than the same job inside a cluster.
#
# Frames are a 4-byte big-endian length and the bytes. Blocking sockets and
# one thread: a task is a small process, and hundreds must fit on a host.

from __future__ import annotations

import array
import errno
import socket
import struct
import time
from dataclasses import dataclass, field

__all__ = ["Job", "TaskError", "run_task"]

Address = tuple[str, int]
_LENGTH = struct.Struct("!I")
MAX_FRAME = 64 << 20
MAX_TOKEN_BYTES = 256
WELCOME = b"welcome"
COLLECTIVES = ("allreduce", "barrier")


class TaskError(Exception):
    """The job cannot go on (a peer did not connect in time, a socket broke)."""


@dataclass(frozen=True)
class Job:
    """What every rank of a job runs."""

    peers: tuple[Address, ...]  # every rank's address, in rank order
    rounds: int = 10
    compute_s: float = 1.0  # all compute phases together
    collective: str = "allreduce"
    payload_bytes: int = 8  # per rank per round (allreduce: a multiple of 8)
    connect_timeout_s: float = 30.0
    # Names the job in every hello: a rank of another job (a killed attempt
    # still exiting on the same port) is turned away, not taken into the mesh.
    token: str = ""

    def __post_init__(self) -> None:
        if len(self.peers) < 1:
            raise ValueError("a job has at least one rank")
        if self.rounds < 0 or self.compute_s < 0:
            raise ValueError("rounds and compute_s must not be negative")
        if self.collective not in COLLECTIVES:
            raise ValueError(f"collective must be one of {COLLECTIVES}, not {self.collective!r}")
        if self.payload_bytes < 0 or self.payload_bytes % 8 or self.payload_bytes > MAX_FRAME:
            raise ValueError("payload_bytes must be a multiple of 8 below 64 MiB")
        if len(self.token.encode()) > MAX_TOKEN_BYTES:
            raise ValueError(f"token must be at most {MAX_TOKEN_BYTES} bytes")


@dataclass
class Result:
    rank: int
    size: int
    wall_s: float = 0.0  # from the end of the opening barrier to the end of the last round
    connect_s: float = 0.0
    round_s: list[float] = field(default_factory=list)  # each round's collective
    checksum: float = 0.0  # allreduce: the sum of the last result (every rank must agree)

    def to_dict(self) -> dict[str, object]:
        rounds = sorted(self.round_s)
        return {
            "rank": self.rank,
            "size": self.size,
            "wall_s": round(self.wall_s, 6),
            "connect_s": round(self.connect_s, 6),
            "collective_s": round(sum(self.round_s), 6),
            "round_p50_s": round(rounds[len(rounds) // 2], 6) if rounds else None,
            "round_max_s": round(rounds[-1], 6) if rounds else None,
            "checksum": self.checksum,
        }


def _send(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_LENGTH.pack(len(data)) + data)


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        chunk = sock.recv(count - len(chunks))
        if not chunk:
            raise TaskError("a peer closed its connection")
        chunks += chunk
    return bytes(chunks)


def _recv(sock: socket.socket) -> bytes:
    (length,) = _LENGTH.unpack(_recv_exactly(sock, _LENGTH.size))
    if length > MAX_FRAME:
        raise TaskError(f"a frame of {length} bytes")
    return _recv_exactly(sock, length)


def _listen(address: Address, backlog: int, deadline: float) -> socket.socket:
    """Our rank's listener; the port may still be held by a rank of an earlier
    job that is being stopped, so a busy port is tried again until the deadline."""
    while True:
        try:
            return socket.create_server(address, backlog=backlog)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise TaskError(f"cannot listen on {address}: {exc.strerror or exc}") from None
            time.sleep(0.05)


def _dial(rank: int, other: int, job: Job, deadline: float) -> socket.socket:
    """A link to a lower rank: connect, say hello (our rank and the job's
    token), wait for its welcome; anything else (nobody listening yet, a rank
    of another job) is tried again until the deadline."""
    hello = rank.to_bytes(4, "big") + job.token.encode()
    while True:
        sock = None
        try:
            sock = socket.create_connection(job.peers[other], timeout=2.0)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _send(sock, hello)
            sock.settimeout(max(0.1, deadline - time.monotonic()))  # it may be dialling too
            if _recv(sock) == WELCOME:
                sock.settimeout(None)
                return sock
        except (OSError, TaskError):
            pass
        if sock is not None:
            sock.close()
        if time.monotonic() > deadline:
            raise TaskError(f"rank {other} at {job.peers[other]} never listened") from None
        time.sleep(0.05)


def _connect_mesh(rank: int, job: Job) -> dict[int, socket.socket]:
    size = len(job.peers)
    deadline = time.monotonic() + job.connect_timeout_s
    listener = _listen(job.peers[rank], size, deadline)
    links: dict[int, socket.socket] = {}
    token = job.token.encode()
    try:
        for other in range(rank):  # lower ranks listen first, or soon
            links[other] = _dial(rank, other, job, deadline)
        while len(links) < size - 1:
            listener.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                missing = sorted(set(range(size)) - set(links) - {rank})
                raise TaskError(f"ranks {missing} never connected") from None
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                hello = _recv(sock)
            except (OSError, TaskError):
                sock.close()
                continue
            other = int.from_bytes(hello[:4], "big")
            if hello[4:] != token or not rank < other < size:
                sock.close()  # another job's rank, or nonsense: not ours
                continue
            if other in links:  # it gave up on an earlier try: the newest one counts
                links.pop(other).close()
            _send(sock, WELCOME)
            sock.settimeout(None)
            links[other] = sock
    except BaseException:
        for sock in links.values():
            sock.close()
        raise
    finally:
        listener.close()
    return links


def _collective(rank: int, links: dict[int, socket.socket], part: bytes, op: str) -> bytes:
    if rank != 0:
        _send(links[0], part)
        return _recv(links[0])
    total = array.array("d", part) if op == "allreduce" else None
    for other in sorted(links):
        data = _recv(links[other])
        if total is not None:
            values = array.array("d", data)
            if len(values) != len(total):
                raise TaskError(f"rank {other} sent {len(values)} values, not {len(total)}")
            for k, v in enumerate(values):
                total[k] += v
    result = total.tobytes() if total is not None else b""
    for other in sorted(links):
        _send(links[other], result)
    return result


def run_task(rank: int, job: Job) -> Result:
    """Run rank `rank` of `job` to the end; raises TaskError if the job breaks."""
    size = len(job.peers)
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in 0..{size - 1}")
    result = Result(rank, size)
    started = time.monotonic()
    links = _connect_mesh(rank, job)
    try:
        result.connect_s = time.monotonic() - started
        _collective(rank, links, b"", "barrier")  # everyone is here
        t0 = time.monotonic()
        values = job.payload_bytes // 8
        part = array.array("d", [float(rank + 1)] * values).tobytes()
        phase = job.compute_s / job.rounds if job.rounds else 0.0
        reduced = b""
        for _ in range(job.rounds):
            time.sleep(phase)
            before = time.monotonic()
            reduced = _collective(
                rank, links, part if job.collective == "allreduce" else b"", job.collective
            )
            result.round_s.append(time.monotonic() - before)
        result.wall_s = time.monotonic() - t0
        if reduced:
            result.checksum = sum(array.array("d", reduced))
        _collective(rank, links, b"", "barrier")  # nobody closes while others still read
    except OSError as exc:
        raise TaskError(f"rank {rank}: {exc}") from exc
    finally:
        for sock in links.values():
            sock.close()
    return result
