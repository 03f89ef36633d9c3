# Message types and the datagram codec of the peer protocol.
#
# Theory of operation
#   A datagram is a fixed header followed by one msgpack-encoded message:
#
#     magic "PG" | version u8 | flags u8 | sender u64 | seq u64 | [mac 16 bytes] | body
#
#   `sender` is the node's id (a new random one for every membership, see
#   node.can), `seq` counts the sender's datagrams from 1. When the grid has a
#   shared key, flags bit 0 is set and `mac` is HMAC-SHA256(key, header without
#   mac + body) truncated to 16 bytes; hosts without the key are ignored.
#   Messages are msgspec Structs encoded as arrays with an integer tag, which
#   keeps them small and makes decoding also validate every field's type.
#
# Rules
#   1. decode_untrusted() raises WireError and nothing else, whatever the bytes.
#      WireError.reason is one of DROP_REASONS; the peer counts drops by reason.
#   2. Every datagram is at most MAX_DATAGRAM_BYTES, on both paths.
#   3. Replays (a sender's seq seen before, or older than the window) are
#      dropped by ReplayWindow, which keeps a bounded number of senders.

from __future__ import annotations

import hashlib
import hmac
import math
import struct
from collections import OrderedDict

import msgspec

__all__ = [
    "ANSWER_ACCEPT",
    "ANSWER_DEFER",
    "ANSWER_DENY",
    "DROP_REASONS",
    "MAX_DATAGRAM_BYTES",
    "PROTOCOL_VERSION",
    "ClusterBeat",
    "Codec",
    "Commit",
    "Confirm",
    "Dissolve",
    "DlbReply",
    "DlbRequest",
    "Endpoint",
    "Evicted",
    "JobAck",
    "JobCancel",
    "JobEnd",
    "JobHandover",
    "JobInfo",
    "JobRehome",
    "JobRoute",
    "JobTaken",
    "JobWatch",
    "JoinAccept",
    "JoinAck",
    "JoinRequest",
    "JoinRetry",
    "LoadedUpdate",
    "Lookup",
    "Message",
    "NeighbourLoad",
    "PathEntry",
    "PeerInfo",
    "Ping",
    "Pong",
    "Probe",
    "ProbeReply",
    "Propose",
    "ProposeOK",
    "Release",
    "ReplayWindow",
    "Reunite",
    "Root",
    "Roster",
    "RttReport",
    "SchedBeat",
    "Solicit",
    "SolicitAnswer",
    "TaskCancel",
    "TaskDone",
    "TaskOffer",
    "TaskReady",
    "TaskStart",
    "Tombstone",
    "Update",
    "WireError",
]

PROTOCOL_VERSION = 1
MAGIC = b"PG"
FLAG_KEYED = 0x01
MAC_BYTES = 16
MAX_DATAGRAM_BYTES = 60_000  # below the 65,507-byte UDP payload limit, with room for headers
REPLAY_WINDOW = 256  # datagrams of one sender that may arrive out of order
MAX_TRACKED_SENDERS = 4096  # replay state kept for this many senders (least recently seen evicted)

_HEADER = struct.Struct("!2sBBQQ")

DROP_REASONS = (
    "truncated",  # shorter than the header (or the mac)
    "oversized",  # longer than MAX_DATAGRAM_BYTES
    "foreign",  # not our magic: someone else's protocol
    "version",  # our magic, another protocol version
    "auth",  # missing or wrong mac (or a mac when we have no key)
    "malformed",  # the body does not decode to a known message
    "replayed",  # a sequence number seen before, or too old
    "invalid",  # decodes, but its content breaks a rule (checked by the receiving component)
    "rate_limited",  # its source sent more than its share (node/limits.py), not decoded
)


class WireError(Exception):
    """A datagram was dropped; `reason` is one of DROP_REASONS."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}" if detail else reason)


# -- message types ---------------------------------------------------------------------------------
#
# Zones are boxes: lo[d] <= x[d] < hi[d] in every dimension d. A path is the
# zone's split list (seed 002 §6): the half-spaces that produced it, oldest
# first; its last entry is the takeover face.


class PathEntry(msgspec.Struct, array_like=True, frozen=True):
    """One half-space of a split list: x[dim] >= pos if upper, else x[dim] < pos.

    `sid` names the split (both halves carry the same sid, opposite `upper`).
    """

    sid: int
    dim: int
    pos: float
    upper: bool


class PeerInfo(msgspec.Struct, array_like=True, frozen=True):
    """What a node says about itself (or what it knows of another node)."""

    id: int
    host: str
    port: int
    instance: int  # bumped on every change of zone (seed 002 §6.1)
    point: tuple[float, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]
    path: tuple[PathEntry, ...]
    # In a neighbour summary: how many first entries of the *sender's* path this
    # path shares (they are left out, `path` holds the rest). Zones in a kd-tree
    # share most of their path with their neighbours, so this keeps updates small.
    prefix: int = 0


class Tombstone(msgspec.Struct, array_like=True, frozen=True):
    """A node known to be gone, with its last zone: kept so stale news of it is discarded
    and so that its zone can still be taken over by whoever comes to border it."""

    id: int
    instance: int
    lo: tuple[float, ...]
    hi: tuple[float, ...]
    path: tuple[PathEntry, ...]


class Root(msgspec.Struct, array_like=True, frozen=True):
    """Which overlay a peer is in (node/can/reunion.py): its root, the least (epoch, id)
    that news has reached us of, with the root's heartbeat and its size estimate."""

    epoch: int  # 0 for the overlay's founder; one more at each re-election
    id: int
    seq: int  # advanced by the root every root period
    size: float  # the root's estimate of the overlay's member count
    # The sender lost this root's heartbeat lately and got it back (it was cut off
    # from the root: on the side of a partition that must dissolve).
    cut: bool = False


class Update(msgspec.Struct, tag=1, array_like=True, frozen=True):
    """Periodic state exchange with direct neighbours."""

    me: PeerInfo
    neighbors: tuple[PeerInfo, ...]
    tombstones: tuple[Tombstone, ...]
    root: Root | None = None
    # The sender's count of changes of (me, neighbors, tombstones): an update with
    # the same non-zero count as the last one we took from that sender says the
    # same, and the one we took stands for it (node/can/neighbours.py, rule 4).
    # 0: no count, compare the content.
    news: int = 0


class JoinRequest(msgspec.Struct, tag=2, array_like=True, frozen=True):
    """Routed greedily towards the joiner's point (zone fields of `joiner` are empty)."""

    req: int
    joiner: PeerInfo
    hops: int
    attempt: int = 1  # the joiner's attempts so far: the command's rank (see Propose)


class JoinAccept(msgspec.Struct, tag=3, array_like=True, frozen=True):
    req: int
    you: PeerInfo
    neighbors: tuple[PeerInfo, ...]


class JoinRetry(msgspec.Struct, tag=4, array_like=True, frozen=True):
    """The join did not happen now; the joiner retries from scratch after a random delay."""

    req: int
    reason: str


class JoinAck(msgspec.Struct, tag=5, array_like=True, frozen=True):
    req: int


class Propose(msgspec.Struct, tag=6, array_like=True, frozen=True):
    """Conflict detection (seed 002 Alg. 5): may the proposer change its zone now?

    Two SPLITs do not conflict (each divides only its own zone); anything
    else with a MERGE does. `rank` orders crossing commands (higher first, then the smaller proposer
    id): a busy neighbour holds its answer to a command that outranks the one
    it is busy with, and refuses the others (wait-die, so no cycle of waits).
    It counts the attempts behind the command, so a loser ranks higher next time.
    """

    instance: int
    rank: int = 0
    kind: int = 0  # the COMMIT_* kind proposed; 0 (unknown) is treated as a MERGE


class ProposeOK(msgspec.Struct, tag=7, array_like=True, frozen=True):
    instance: int
    yes: bool
    reason: str = ""  # why NO (for the proposer's log)


COMMIT_NOOP = 0
COMMIT_SPLIT = 1
COMMIT_MERGE = 2


class Commit(msgspec.Struct, tag=8, array_like=True, frozen=True):
    """Conflict detection (seed 002 Alg. 9): the proposer's command, or a NO-OP.

    SPLIT carries the leader's new info and the joiner's; MERGE carries the
    leaver's last info and its direct neighbours (so that takers learn their
    new neighbours).
    """

    instance: int
    kind: int
    leader: PeerInfo | None
    joiner: PeerInfo | None
    neighbors: tuple[PeerInfo, ...]


class Probe(msgspec.Struct, tag=9, array_like=True, frozen=True):
    """Are you alive (and still a member)?"""

    nonce: int


class ProbeReply(msgspec.Struct, tag=10, array_like=True, frozen=True):
    nonce: int
    me: PeerInfo | None  # None: alive but not a member of the overlay


class Evicted(msgspec.Struct, tag=11, array_like=True, frozen=True):
    """You were declared dead and your zone was taken over; rejoin as a new node.
    `root`: the sender's overlay (node/can/reunion.py); from another overlay this is
    no eviction but a meeting of two overlays."""

    instance: int
    root: Root | None = None


class Lookup(msgspec.Struct, tag=12, array_like=True, frozen=True):
    """Routed greedily to the owner of `point`, which answers `origin` with an Update.

    How a node heals its view: it looks up the owner of an area next to its
    zone that no known neighbour covers (after a takeover far from it, say).
    """

    nonce: int
    point: tuple[float, ...]
    origin: PeerInfo
    hops: int


class Ping(msgspec.Struct, tag=13, array_like=True, frozen=True):
    """An RTT sample: answer at once with a Pong carrying the same nonce."""

    nonce: int


class Pong(msgspec.Struct, tag=14, array_like=True, frozen=True):
    nonce: int
    # How long the answering peer held the Ping, microseconds: from the
    # kernel's receive timestamp to the Pong's encoding (the prober takes it
    # off the RTT, so the answerer's scheduling is not latency).
    held_us: int = 0


# -- dynamic clusters (seed 002 §5.1.4; node/cluster/agent.py) -------------------------------------
#
# A head's round has an epoch (it counts the head's rounds); a client ignores
# anything from a head older than the epoch it knows.

ANSWER_ACCEPT = 1
ANSWER_DENY = 2  # before committing: not now (Algorithm 3 bumped it); after: I withdraw
ANSWER_DEFER = 3  # busy measuring: solicit me again later


class Endpoint(msgspec.Struct, array_like=True, frozen=True):
    host: str
    port: int


class Solicit(msgspec.Struct, tag=15, array_like=True, frozen=True):
    """A head asks a client to join its cluster; sent again as an update of the
    greedy criterion's figures (the client then only re-ranks)."""

    epoch: int
    ceiling: int  # solicited less denied, the head included
    accepted: int


class SolicitAnswer(msgspec.Struct, tag=16, array_like=True, frozen=True):
    epoch: int
    answer: int  # ANSWER_*


class Roster(msgspec.Struct, tag=17, array_like=True, frozen=True):
    """The head's unfiltered cluster (head first): measure the RTT to every member."""

    epoch: int
    members: tuple[Endpoint, ...]


class RttReport(msgspec.Struct, tag=18, array_like=True, frozen=True):
    """The client's RTTs to the roster's members, in roster order; -1: no answer."""

    epoch: int
    rtts_us: tuple[int, ...]


class Confirm(msgspec.Struct, tag=19, array_like=True, frozen=True):
    """You are in the head's job-ready cluster (head first); sent again when it shrinks."""

    epoch: int
    members: tuple[Endpoint, ...]


class Release(msgspec.Struct, tag=20, array_like=True, frozen=True):
    """You are not (or no longer) in the head's cluster."""

    epoch: int


class ClusterBeat(msgspec.Struct, tag=21, array_like=True, frozen=True):
    """Liveness between a head and its committed clients, both ways."""

    epoch: int


# -- jobs (node/sched/agent.py) ----------------------------------------------------------------------


class JobInfo(msgspec.Struct, array_like=True, frozen=True):
    """A job as the grid sees it: its id (unique per grid), how many nodes it
    needs, how long its program computes, its place in the queues (the trace's
    submit time; ties broken by a hash of the id) and its requirement point."""

    id: int
    size: int
    runtime_s: float
    order: float
    point: tuple[float, ...]


class JobRoute(msgspec.Struct, tag=22, array_like=True, frozen=True):
    """A job on its way to a representative: routed greedily to the owner of
    its requirement point (stage 0), which places it on a capable node (stage
    2) or pushes it on towards one (stage 1). `attempt` is the entry's random
    id for this try: (job, attempt) names it everywhere, so a job submitted
    again elsewhere never meets its earlier tries' state."""

    job: JobInfo
    attempt: int
    entry: Endpoint  # where the job was submitted: it hears the outcome
    hops: int
    stage: int
    # Pushing (seed 000 §4.1.1): the best capable node met on the way, and its
    # score (a queue length; for a parallel job its cluster's longest, maxQL;
    # with matchmaking "can-p" divided by the node's speed).
    best: Endpoint | None = None
    best_load: int | float = 0
    moved: bool = False  # by DLB or QB: a job moves once at most (seed 002 §4.2)


class JobAck(msgspec.Struct, tag=23, array_like=True, frozen=True):
    """Representative -> entry: I have the job (sent again every beat)."""

    job: int
    attempt: int
    running: bool


class JobEnd(msgspec.Struct, tag=24, array_like=True, frozen=True):
    """Representative -> entry: the attempt ended (sent again until a JobCancel acknowledges it)."""

    job: int
    attempt: int
    ok: bool
    reason: str
    run_s: float


class JobCancel(msgspec.Struct, tag=25, array_like=True, frozen=True):
    """Entry -> representative: forget this attempt (an acknowledgement of its JobEnd, or a retry elsewhere)."""

    job: int
    attempt: int


class TaskOffer(msgspec.Struct, tag=26, array_like=True, frozen=True):
    """Representative -> cluster member: a dependent task to queue."""

    job: JobInfo
    attempt: int
    round: int


class TaskReady(msgspec.Struct, tag=27, array_like=True, frozen=True):
    """Member -> representative: the task is at the head of my queue and I hold myself for it
    (ready=False: no longer, an older task came first, or I refuse a start)."""

    job: int
    attempt: int
    round: int
    ready: bool


class TaskStart(msgspec.Struct, tag=28, array_like=True, frozen=True):
    """Representative -> member: run rank `rank` of the job; `peers` are every rank's MPI address."""

    job: int
    attempt: int
    round: int
    rank: int
    peers: tuple[Endpoint, ...]


class TaskCancel(msgspec.Struct, tag=29, array_like=True, frozen=True):
    """Representative -> member: drop the task (kill it if running; acknowledges a TaskDone)."""

    job: int
    attempt: int
    round: int


class TaskDone(msgspec.Struct, tag=30, array_like=True, frozen=True):
    """Member -> representative: the rank ended (sent again until a TaskCancel acknowledges it)."""

    job: int
    attempt: int
    round: int
    ok: bool
    reason: str


class SchedBeat(msgspec.Struct, tag=31, array_like=True, frozen=True):
    """Liveness and load, every beat: to the overlay's direct neighbours (the
    owner of a requirement point places jobs on the least loaded capable one)
    and to the cluster members we share tasks with; `tasks` lists the (job,
    attempt) pairs we share with the receiver, so that each side notices the
    other forgot one."""

    load: int  # tasks queued or running here; -1: takes no jobs (leaving)
    size: int  # the live members of our cluster, us included (what we can run)
    free: int  # of those, how many have nothing queued (the cluster's residue)
    maxql: int  # the longest queue among them
    # Kim's aggregation (seed 000 §4.1.1), per dimension: (nodes, queued tasks)
    # in the region above us, flattened: n0, q0, n1, q1, ...
    above: tuple[float, ...]
    # The (job, attempt) pairs we share with the receiver, each with its
    # queue position here (runnable tasks ahead of it; 0 when running or
    # when not a task of ours): a representative's averageQP (seed 002 §4.2).
    tasks: tuple[tuple[int, int, int], ...]


class JobHandover(msgspec.Struct, tag=32, array_like=True, frozen=True):
    """A leaving entry -> a neighbour: be this job's entry from now on (sent
    again until JobTaken; `rep` is the current attempt's representative, if known;
    `earlier` the ids of the tries before, so that one of them that runs after all
    can be taken back)."""

    job: JobInfo
    attempt: int
    tries: int
    rep: Endpoint | None
    earlier: tuple[int, ...] = ()


class JobTaken(msgspec.Struct, tag=33, array_like=True, frozen=True):
    """Adopter -> leaving entry: I am the job's entry now."""

    job: int


class JobWatch(msgspec.Struct, tag=34, array_like=True, frozen=True):
    """A new entry -> the representative: report this attempt to me (sent
    again every beat until a JobAck comes)."""

    job: int
    attempt: int


class Reunite(msgspec.Struct, tag=35, array_like=True, frozen=True):
    """To a peer we buried (node/can/reunion.py): are you alive, and in which overlay?
    The answer is a Reunite too (`answer`); `me` is None from a peer not a member."""

    nonce: int
    root: Root | None  # None: not a member, or our root changed lately
    me: PeerInfo | None
    answer: bool


class Dissolve(msgspec.Struct, tag=36, array_like=True, frozen=True):
    """Our overlay met one that wins over it (`winner`): pass this on to your
    neighbours, and rejoin through `contacts`, members of the winner."""

    winner: Root
    contacts: tuple[PeerInfo, ...]


class DlbRequest(msgspec.Struct, tag=37, array_like=True, frozen=True):
    """Kim's dynamic load balancing (seed 000 §4.2): PULL (kind 0, "give me a waiting
    job I can run") or PUSH (kind 1, "take one of mine?"), with the sender's queue
    length and capabilities."""

    kind: int
    queue: int
    point: tuple[float, ...]


class DlbReply(msgspec.Struct, tag=38, array_like=True, frozen=True):
    """The answer to a DlbRequest of the same kind: a PULL's job comes as a JobRoute
    (moved) with accept = True; a PUSH accepted is followed by the job."""

    kind: int
    accept: bool


class NeighbourLoad(msgspec.Struct, array_like=True, frozen=True):
    """A scheduling peer's figures for its overlay neighbours: a SchedBeat's without
    the shared tasks (see there)."""

    load: int
    size: int
    free: int
    maxql: int
    above: tuple[float, ...]


class LoadedUpdate(Update, tag=40, array_like=True, frozen=True):
    """An Update carrying the sender's scheduling figures (seed 000 §4.1.1: Kim's load
    aggregates ride the periodic neighbour update and add no messages). Sent by peers
    that schedule jobs; the overlay takes the Update in it, the scheduler the load."""

    load: NeighbourLoad | None = None

    def update(self) -> Update:
        """The plain Update (what the overlay reads)."""
        return Update(self.me, self.neighbors, self.tombstones, self.root, self.news)


class JobRehome(msgspec.Struct, tag=39, array_like=True, frozen=True):
    """A representative whose entry went silent -> over the CAN, hop by hop, to the owner
    of the job's point (seed 000 §2.1: the run node finds the job's new owner by routing
    to its coordinates again, the CAN having given the zone to another node): be this
    attempt's entry. `rep` is the representative; answered by a JobWatch to it."""

    job: JobInfo
    attempt: int
    rep: Endpoint
    hops: int


Message = (
    Update
    | JoinRequest
    | JoinAccept
    | JoinRetry
    | JoinAck
    | Propose
    | ProposeOK
    | Commit
    | Probe
    | ProbeReply
    | Evicted
    | Lookup
    | Ping
    | Pong
    | Solicit
    | SolicitAnswer
    | Roster
    | RttReport
    | Confirm
    | Release
    | ClusterBeat
    | JobRoute
    | JobAck
    | JobEnd
    | JobCancel
    | TaskOffer
    | TaskReady
    | TaskStart
    | TaskCancel
    | TaskDone
    | SchedBeat
    | JobHandover
    | JobTaken
    | JobWatch
    | Reunite
    | Dissolve
    | DlbRequest
    | DlbReply
    | JobRehome
    | LoadedUpdate
)


# -- codec -------------------------------------------------------------------------------------------------


class Codec:
    """Encodes and decodes datagrams for one sender identity and an optional grid key."""

    def __init__(self, key: bytes | None = None, *, shared_bodies: int = 0) -> None:
        """`shared_bodies` > 0 keeps that many decoded bodies for reuse: for a
        codec shared by the peers of one simulator, where an update sent to 30
        neighbours is the same body 30 times (messages are immutable)."""
        if key is not None and len(key) < 16:
            raise ValueError(f"a grid key must have at least 16 bytes, not {len(key)}")
        self.key = key
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(Message)
        # The last message encoded and its body: a peer sends one update to every neighbour.
        self._last: tuple[Message | None, bytes] = (None, b"")
        self._bodies: dict[bytes, Message] | None = {} if shared_bodies > 0 else None
        self._max_bodies = shared_bodies

    def encode(self, message: Message, *, sender: int, seq: int) -> bytes:
        """The datagram for `message`.

        Raises:
            ValueError: the datagram would exceed MAX_DATAGRAM_BYTES (the caller
                must send less, e.g. fewer neighbour summaries).
        """
        last, body = self._last
        if message is not last:
            body = self._encoder.encode(message)
            self._last = (message, body)
        flags = FLAG_KEYED if self.key is not None else 0
        header = _HEADER.pack(MAGIC, PROTOCOL_VERSION, flags, sender, seq)
        if self.key is not None:
            mac = hmac.new(self.key, header + body, hashlib.sha256).digest()[:MAC_BYTES]
            data = header + mac + body
        else:
            data = header + body
        if len(data) > MAX_DATAGRAM_BYTES:
            raise ValueError(
                f"{type(message).__name__} of {len(data)} bytes exceeds {MAX_DATAGRAM_BYTES}"
            )
        return data

    def decode_untrusted(self, data: bytes) -> tuple[int, int, Message]:
        """Return (sender, seq, message). Raises WireError only."""
        if len(data) > MAX_DATAGRAM_BYTES:
            raise WireError("oversized", f"{len(data)} bytes")
        if len(data) < len(MAGIC):
            raise WireError("truncated", f"{len(data)} bytes")
        if data[: len(MAGIC)] != MAGIC:
            raise WireError("foreign")
        if len(data) < _HEADER.size:
            raise WireError("truncated", f"{len(data)} bytes")
        _magic, version, flags, sender, seq = _HEADER.unpack_from(data)
        if version != PROTOCOL_VERSION:
            raise WireError("version", f"version {version}")
        offset = _HEADER.size
        if flags & FLAG_KEYED:
            if self.key is None:
                raise WireError("auth", "keyed datagram, but this grid has no key")
            if len(data) < offset + MAC_BYTES:
                raise WireError("truncated", "no room for the mac")
            mac = data[offset : offset + MAC_BYTES]
            body = data[offset + MAC_BYTES :]
            expected = hmac.new(self.key, data[:offset] + body, hashlib.sha256).digest()[:MAC_BYTES]
            if not hmac.compare_digest(mac, expected):
                raise WireError("auth", "bad mac")
        else:
            if self.key is not None:
                raise WireError("auth", "unauthenticated datagram in a keyed grid")
            body = data[offset:]
        if flags & ~FLAG_KEYED:
            raise WireError("malformed", f"unknown flags {flags:#x}")
        if seq == 0:
            raise WireError("malformed", "sequence number 0")
        bodies = self._bodies
        if bodies is not None and (message := bodies.get(body)) is not None:
            return sender, seq, message
        try:
            message = self._decoder.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise WireError("malformed", str(exc)) from None
        except (
            ValueError,
            TypeError,
            RecursionError,
            OverflowError,
        ) as exc:  # defensive: any decoder failure is a drop
            raise WireError("malformed", repr(exc)) from None
        if bodies is not None:
            if len(bodies) >= self._max_bodies:
                del bodies[next(iter(bodies))]
            bodies[body] = message
        return sender, seq, message


class ReplayWindow:
    """Per-sender anti-replay window (as in IPsec): accept each seq at most once,
    tolerate reordering within REPLAY_WINDOW, drop anything older."""

    def __init__(self, max_senders: int = MAX_TRACKED_SENDERS) -> None:
        self._senders: OrderedDict[int, list[int]] = OrderedDict()  # sender -> [highest, bitmap]
        self._max = max_senders

    def accept(self, sender: int, seq: int) -> bool:
        """True (and remember it) if seq is new for sender; False for a replay."""
        state = self._senders.get(sender)
        if state is None:
            if len(self._senders) >= self._max:
                self._senders.popitem(last=False)
            self._senders[sender] = [seq, 1]
            return True
        self._senders.move_to_end(sender)
        highest, bitmap = state
        if seq > highest:
            shift = seq - highest
            state[1] = (
                ((bitmap << shift) | 1) & ((1 << REPLAY_WINDOW) - 1) if shift < REPLAY_WINDOW else 1
            )
            state[0] = seq
            return True
        offset = highest - seq
        if offset >= REPLAY_WINDOW or bitmap >> offset & 1:
            return False
        state[1] = bitmap | (1 << offset)
        return True

    def forget(self, sender: int) -> None:
        self._senders.pop(sender, None)


# -- validation of content (used by the receiving component) -------------------------------------------


def check_endpoint(endpoint: Endpoint) -> str | None:
    """Why a peer's address from the wire is unusable, or None."""
    if not 0 < endpoint.port < 65536 or not endpoint.host or len(endpoint.host) > 64:
        return "bad address"
    return None


def check_peer_info(info: PeerInfo, dims: int) -> str | None:
    """Why `info` is unacceptable for a space of `dims` dimensions, or None.

    An empty zone (lo == hi == ()) is allowed: a joiner has none yet.
    """
    if not 0 < info.port < 65536 or not info.host or len(info.host) > 64:
        return "bad address"
    if len(info.point) != dims or not all(math.isfinite(v) for v in info.point):
        return "bad point"
    if info.lo or info.hi:
        if len(info.lo) != dims or len(info.hi) != dims:
            return "bad zone size"
        for lo, hi in zip(info.lo, info.hi, strict=True):
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                return "empty or non-finite zone"
    if len(info.path) > 4096 or not 0 <= info.prefix <= 4096:
        return "path too long"
    for entry in info.path:
        if not 0 <= entry.dim < dims or not math.isfinite(entry.pos):
            return "bad path entry"
    return None
