# Fuzzing a live peer: random and mutated datagrams at a real `python -m node`
# process, then proof that it survived and counted every one.
#
# Theory of operation
#   Datagrams come from a seeded generator mixing: random bytes, well-formed
#   messages of every type with random (often absurd: NaN, infinite, wrong
#   dimension count, long paths) contents, and mutations of well-formed
#   datagrams (truncation, bit flips, inserted or deleted bytes, a changed
#   header field, a wrong or missing HMAC), exact replays, and oversized
#   datagrams. They are sent in small batches; after each batch the fuzzer
#   waits until the peer's `rx` counter has caught up, so that a kernel
#   buffer overflow cannot pass for a datagram the peer failed to count.
#
#   At the end: the peer must still run and answer, rx must have grown by
#   exactly the number sent, and every received datagram must be either
#   accepted or dropped with a reason (accepted + sum(drop.*) == rx).

from __future__ import annotations

import dataclasses
import math
import random
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from node import wire
from node.sched.config import SchedConfig
from node.wire import (
    ClusterBeat,
    Codec,
    Commit,
    Confirm,
    Endpoint,
    Evicted,
    JobAck,
    JobCancel,
    JobEnd,
    JobHandover,
    JobInfo,
    JobRehome,
    JobRoute,
    JobTaken,
    JobWatch,
    JoinAccept,
    JoinAck,
    JoinRequest,
    JoinRetry,
    Lookup,
    Message,
    PathEntry,
    PeerInfo,
    Ping,
    Pong,
    Probe,
    ProbeReply,
    Propose,
    ProposeOK,
    Release,
    Roster,
    RttReport,
    SchedBeat,
    Solicit,
    SolicitAnswer,
    TaskCancel,
    TaskDone,
    TaskOffer,
    TaskReady,
    TaskStart,
    Tombstone,
    Update,
)
from testbed.engines.local import LocalPeer
from testbed.engines.peers import build_node_config
from testbed.spec import NodeSpec

__all__ = [
    "FuzzResult",
    "counters_after",
    "datagrams",
    "fuzz_local_peer",
    "fuzz_peer",
    "fuzz_result",
]

BATCH = 256  # datagrams between two checks of the peer's counters

KINDS = {  # kind -> weight
    "random": 10,
    "message": 25,
    "truncated": 10,
    "bitflip": 15,
    "splice": 10,
    "header": 10,
    "auth": 5,
    "replay": 10,
    "oversized": 2,
    "short": 3,
}


def _float(rng: random.Random, lo: float, hi: float) -> float:
    roll = rng.random()
    if roll < 0.03:
        return rng.choice([math.nan, math.inf, -math.inf, 1e308, -0.0])
    if roll < 0.1:
        return rng.uniform(lo - (hi - lo), hi + (hi - lo))  # outside the space
    return rng.uniform(lo, hi)


def _vector(rng: random.Random, dims: int, space: list[tuple[float, float]]) -> tuple[float, ...]:
    n = dims if rng.random() > 0.05 else rng.randrange(0, dims + 3)
    return tuple(_float(rng, *space[i % len(space)]) for i in range(n))


def _info(rng: random.Random, dims: int, space: list[tuple[float, float]]) -> PeerInfo:
    lo = _vector(rng, dims, space)
    hi = tuple(x + abs(_float(rng, 0, 10)) for x in lo)
    path = tuple(
        PathEntry(
            rng.getrandbits(48), rng.randrange(-1, dims + 1), _float(rng, 0, 1), rng.random() < 0.5
        )
        for _ in range(rng.choice([0, 1, 3, 8, 40]))
    )
    return PeerInfo(
        rng.getrandbits(rng.choice([8, 48, 63])),
        rng.choice(["127.0.0.1", "127.0.0.9", "", "not an address", "::1"]),
        rng.choice([0, 7000, 65535, 70000, -1]),
        rng.randrange(0, 1 << rng.choice([4, 31, 62])),
        _vector(rng, dims, space),
        lo,
        hi,
        path,
        rng.choice([0, 0, 1, 5, 1000]),
    )


def _endpoints(rng: random.Random) -> tuple[Endpoint, ...]:
    """Members of a roster or confirmation, a job's ranks: plausible, empty, or
    too many (loopback addresses: the fuzzed peer may answer or connect to them)."""
    count = rng.choice([0, 1, 5, 64, 2000])
    return tuple(Endpoint(f"127.0.{k // 250}.{k % 250 + 1}", 7000) for k in range(count))


def _job(rng: random.Random, dims: int, space: list[tuple[float, float]]) -> JobInfo:
    return JobInfo(
        rng.choice([0, 1, 7, -1, 1 << 62, rng.getrandbits(63)]),
        rng.choice([0, 1, 2, 4, 64, 5000, -3]),
        rng.choice([0.0, 0.01, 1.5, -1.0, math.inf, math.nan, 1e9]),
        _float(rng, -10, 1e6),
        _vector(rng, dims, space),
    )


def random_message(rng: random.Random, dims: int, space: list[tuple[float, float]]) -> Message:
    """A message of a random type with random, often absurd, contents."""
    info = _info(rng, dims, space)
    many = tuple(_info(rng, dims, space) for _ in range(rng.choice([0, 1, 4, 20])))
    small = rng.getrandbits(rng.choice([8, 32, 63]))
    job = _job(rng, dims, space)
    ends = [Endpoint("127.0.0.1", 7000), Endpoint("127.0.0.9", rng.choice([0, 7000, 70000]))]
    # One table of every type (its order is part of the seeded stream), built
    # by role; the contents are drawn only for the type chosen.
    factories = [
        *_overlay_messages(rng, dims, space, info, many, small),
        *_probe_and_cluster_messages(rng, small),
        *_job_messages(rng, dims, small, job, ends),
    ]
    return rng.choice(factories)()


def _overlay_messages(
    rng: random.Random,
    dims: int,
    space: list[tuple[float, float]],
    info: PeerInfo,
    many: tuple[PeerInfo, ...],
    small: int,
) -> list[Callable[[], Message]]:
    """The CAN overlay's messages (membership, joins, takeover, routing, merging)."""

    def root() -> wire.Root:
        return wire.Root(
            rng.choice([0, 1, -1, small]),
            rng.choice([0, small, -1, 2**63]),
            rng.choice([0, small]),
            _float(rng, 0, 1e4),
        )

    def load() -> wire.NeighbourLoad | None:
        if rng.random() < 0.2:
            return None
        return wire.NeighbourLoad(
            rng.choice([-2, -1, 0, 3, small]),
            rng.choice([0, 1, 64, small]),
            rng.choice([-1, 0, 2, small]),
            rng.choice([-1, 0, 9, small]),
            tuple(_float(rng, -5, 1e6) for _ in range(rng.choice([0, 2 * dims, 7, 300]))),
        )

    return [
        lambda: Update(
            info,
            many,
            tuple(
                Tombstone(rng.getrandbits(48), small, info.lo, info.hi, info.path)
                for _ in range(rng.choice([0, 2]))
            ),
            rng.choice([None, root()]),
        ),
        lambda: wire.Reunite(
            small, rng.choice([None, root()]), rng.choice([None, info]), rng.random() < 0.5
        ),
        lambda: wire.LoadedUpdate(
            info, rng.choice([(), many]), (), None, rng.choice([0, small]), load()
        ),
        lambda: wire.Dissolve(root(), many),
        lambda: JoinRequest(small, info, rng.randrange(0, 1000), rng.choice([0, 1, 7, -1, small])),
        lambda: JoinAccept(small, info, many),
        lambda: JoinRetry(small, rng.choice(["busy", "conflict", "x" * 500])),
        lambda: JoinAck(small),
        lambda: Propose(small, rng.choice([0, 1, 9, -1, small]), rng.randrange(-1, 4)),
        lambda: ProposeOK(small, rng.random() < 0.5, rng.choice(["", "neighbour busy", "x" * 500])),
        lambda: Commit(small, rng.randrange(-1, 4), info, rng.choice([None, info]), many),
        lambda: Probe(small),
        lambda: ProbeReply(small, rng.choice([None, info])),
        lambda: Evicted(small),
        lambda: Lookup(small, _vector(rng, dims, space), info, rng.randrange(0, 1000)),
    ]


def _probe_and_cluster_messages(rng: random.Random, small: int) -> list[Callable[[], Message]]:
    """The prober's and the cluster agent's messages."""
    return [
        lambda: Ping(small),
        lambda: Pong(small),
        lambda: Solicit(small, rng.choice([0, 64, -1, small]), rng.choice([0, 3, -5])),
        lambda: SolicitAnswer(small, rng.randrange(-1, 5)),
        lambda: Roster(small, _endpoints(rng)),
        lambda: RttReport(
            small, tuple(rng.choice([-1, 0, 7, small]) for _ in range(rng.choice([0, 3, 64])))
        ),
        lambda: Confirm(small, _endpoints(rng)),
        lambda: Release(small),
        lambda: ClusterBeat(small),
    ]


def _job_messages(
    rng: random.Random, dims: int, small: int, job: JobInfo, ends: list[Endpoint]
) -> list[Callable[[], Message]]:
    """The scheduler's messages (jobs, tasks, load beats, handovers)."""
    return [
        lambda: JobRoute(
            job,
            small,
            rng.choice(ends),
            rng.randrange(-1, 70),
            rng.randrange(-1, 4),
            rng.choice([None, *ends]),
            rng.choice([-1, 0, 5, small]),
            rng.random() < 0.5,
        ),
        lambda: JobAck(small, small, rng.random() < 0.5),
        lambda: JobEnd(
            small, small, rng.random() < 0.5, rng.choice(["", "x" * 500]), _float(rng, -1, 1e6)
        ),
        lambda: JobCancel(small, small),
        lambda: TaskOffer(job, small, rng.randrange(-1, 5)),
        lambda: TaskReady(small, small, rng.randrange(-1, 5), rng.random() < 0.5),
        lambda: TaskStart(
            small, small, rng.randrange(-1, 5), rng.randrange(-1, 70), _endpoints(rng)
        ),
        lambda: TaskCancel(small, small, rng.randrange(-1, 5)),
        lambda: TaskDone(
            small, small, rng.randrange(-1, 5), rng.random() < 0.5, "x" * rng.choice([0, 500])
        ),
        lambda: SchedBeat(
            rng.choice([-1, 0, 3, small]),
            rng.choice([0, 1, 64, small]),
            rng.choice([-1, 0, 2, small]),
            rng.choice([-1, 0, 9, small]),
            tuple(_float(rng, -5, 1e6) for _ in range(rng.choice([0, 2 * dims, 7, 300]))),
            tuple(
                (rng.getrandbits(20), small, rng.choice([-1, 0, 3, small]))
                for _ in range(rng.choice([0, 2, 100]))
            ),
        ),
        lambda: JobHandover(
            job,
            small,
            rng.randrange(-1, 10),
            rng.choice([None, *ends]),
            tuple(rng.randrange(-1, 2**31) for _ in range(rng.choice([0, 1, 2, 9]))),
        ),
        lambda: JobTaken(small),
        lambda: JobWatch(small, small),
        lambda: JobRehome(job, small, rng.choice(ends), rng.randrange(-1, 70)),
    ]


def datagrams(
    seed: int, count: int, *, dims: int, space: list[tuple[float, float]], key: bytes | None
) -> Iterator[tuple[str, bytes]]:
    """`count` (kind, datagram) pairs, deterministic for a seed."""
    rng = random.Random(seed)
    codec = Codec(key)
    other = Codec(b"x" * 32 if key is None else None)  # wrong key, or a key where none is used
    sent: list[bytes] = []  # well-formed datagrams already sent, for replays
    seq = 0
    kinds, weights = zip(*KINDS.items(), strict=True)

    def well_formed(wrong_key: bool = False) -> bytes:
        nonlocal seq
        seq += 1
        message = random_message(rng, dims, space)
        try:
            return (other if wrong_key else codec).encode(
                message, sender=rng.getrandbits(48) or 1, seq=seq
            )
        except ValueError:  # too big for one datagram: send a small one instead
            return codec.encode(Probe(seq), sender=1, seq=seq)

    for _ in range(count):
        kind = rng.choices(kinds, weights)[0]
        if kind == "random":
            data = rng.randbytes(rng.randrange(0, 1500))
        elif kind == "short":
            data = rng.randbytes(rng.randrange(0, 24))
        elif kind == "oversized":
            data = wire.MAGIC + rng.randbytes(rng.randrange(wire.MAX_DATAGRAM_BYTES, 65_000))
        elif kind == "message":
            data = well_formed()
            sent.append(data)
        elif kind == "auth":
            data = well_formed(wrong_key=True)
        elif kind == "replay" and sent:
            data = sent[rng.randrange(len(sent))]
        else:
            base = bytearray(well_formed())
            if kind == "truncated":
                data = bytes(base[: rng.randrange(0, len(base))])
            elif kind == "bitflip":
                for _ in range(rng.randrange(1, 9)):
                    position = rng.randrange(len(base))
                    base[position] ^= 1 << rng.randrange(8)
                data = bytes(base)
            elif kind == "splice":
                position = rng.randrange(len(base) + 1)
                if rng.random() < 0.5:
                    base[position:position] = rng.randbytes(rng.randrange(1, 16))
                else:
                    del base[position : position + rng.randrange(1, 16)]
                data = bytes(base)
            else:  # header (or a replay before anything was sent)
                field = rng.randrange(4)
                if field == 0:
                    base[0:2] = rng.randbytes(2)  # magic
                elif field == 1:
                    base[2] = rng.randrange(256)  # version
                elif field == 2:
                    base[3] = rng.randrange(256)  # flags
                else:
                    base[12:20] = bytes(8)  # sequence number 0
                data = bytes(base)
        if len(sent) > 10_000:
            del sent[: len(sent) // 2]
        yield kind, data


class FuzzResult(dict[str, Any]):
    """sent, by_kind, rx_delta, accepted, dropped{reason}, uncounted, alive, seconds."""

    @property
    def ok(self) -> bool:
        return bool(self["alive"] and self["uncounted"] == 0 and self["unexplained"] == 0)


def fuzz_peer(
    address: tuple[str, int],
    stats: Callable[[], dict[str, Any]],
    *,
    count: int,
    seed: int,
    dims: int,
    space: list[tuple[float, float]],
    key: bytes | None = None,
    progress: Callable[[int], None] | None = None,
    catch_up_s: float = 5.0,
) -> FuzzResult:
    """Send `count` fuzz datagrams to the peer at `address`; `stats()` reads its counters."""
    before = stats()
    by_kind: Counter[str] = Counter()
    lost = 0
    t0 = time.monotonic()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        stream = datagrams(seed, count, dims=dims, space=space, key=key)
        for sent, (kind, data) in enumerate(stream, start=1):
            sock.sendto(data, address)
            by_kind[kind] += 1
            if sent % BATCH == 0 or sent == count:
                lost = _catch_up(stats, before.get("rx", 0) + sent, catch_up_s)
                if progress is not None:
                    progress(sent)
    seconds = time.monotonic() - t0
    after, alive = counters_after(stats, before)
    return fuzz_result(before, after, count, by_kind, {}, lost, alive, seconds)


def counters_after(
    stats: Callable[[], dict[str, Any]], before: dict[str, Any]
) -> tuple[dict[str, Any], bool]:
    """The peer's counters at the end, and whether it answered (else `before`, False)."""
    try:
        return stats(), True
    except Exception:
        return before, False


def fuzz_result(
    before: dict[str, Any],
    after: dict[str, Any],
    count: int,
    by_kind: Counter[str],
    elsewhere: dict[str, int],
    lost: int,
    alive: bool,
    seconds: float,
) -> FuzzResult:
    """The result from the peer's counters before and after, and what was dropped before
    it (`elsewhere`: by a kernel or the WAN, ipfuzz.py). `counted`: every datagram
    accounted for, wherever it was dropped; `crashes`: 1 if the peer did not survive."""
    drops = {k[5:]: after.get(k, 0) - before.get(k, 0) for k in after if k.startswith("drop.")}
    rx_delta = after.get("rx", 0) - before.get("rx", 0)
    accepted = after.get("accepted", 0) - before.get("accepted", 0)
    counted = rx_delta + sum(elsewhere.values())
    return FuzzResult(
        sent=count,
        counted=counted,
        crashes=0 if alive else 1,
        by_kind=dict(sorted(by_kind.items())),
        rx_delta=rx_delta,
        accepted=accepted,
        dropped=drops,
        dropped_elsewhere=elsewhere,
        uncounted=count - counted,
        unexplained=rx_delta - accepted - sum(drops.values()),
        lost_in_kernel=lost,
        alive=alive,
        seconds=round(seconds, 2),
        datagrams_per_s=round(count / seconds, 1) if seconds > 0 else None,
        rss_kb=after.get("rss_kb"),
    )


def _catch_up(stats: Callable[[], dict[str, Any]], target: int, timeout_s: float) -> int:
    """Wait until the peer has received `target` datagrams in all; returns how many are missing."""
    deadline = time.monotonic() + timeout_s
    while (rx := stats().get("rx", 0)) < target:
        if time.monotonic() > deadline:
            return target - rx
        time.sleep(0.001)
    return 0


def fuzz_local_peer(
    folder: Path,
    *,
    count: int,
    seed: int = 1,
    grid_key: bytes | None = None,
    progress: Callable[[int], None] | None = None,
) -> FuzzResult:
    """Start a peer on loopback (a one-member overlay), fuzz it, stop it.

    Its log, stderr and configuration stay in `folder`. The result also says
    whether the process was still running and exited cleanly afterwards.
    """
    # No per-source rate limit: every datagram, sent from one socket as fast as the
    # peer takes them, must reach the decoder (a flood is limited: test_limits.py).
    config = build_node_config(
        NodeSpec(grid_key=grid_key.hex() if grid_key else None, per_source_per_s=0.0)
    )
    # A scheduler too, whose "program" starts nothing that talks: a fuzzed
    # TaskStart may name any ranks.
    config = dataclasses.replace(config, sched=SchedConfig(command="true"))
    space = [(d.lo, d.hi) for d in config.can.space.dims]
    point = tuple((lo + hi) / 2 for lo, hi in space)
    with LocalPeer(folder, "target", config, point, join=[]) as peer:
        peer.wait_status("member")
        result = fuzz_peer(
            peer.address,
            lambda: peer.ask("stats")["stats"],
            count=count,
            seed=seed,
            dims=len(space),
            space=space,
            key=grid_key,
            progress=progress,
        )
        result["status_after"] = peer.ask("status")["status"] if result["alive"] else None
        result["exit_code"] = peer.stop()
    result["alive"] = result["alive"] and result["exit_code"] == 0
    return result
