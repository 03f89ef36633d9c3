# The CAN overlay of one peer, sans-IO.
#
# Theory of operation
#   The space is cut into boxes as a kd-tree cuts it; each live node owns one
#   leaf box (its zone) containing its own point (its capabilities plus a
#   random virtual coordinate, seed 000 §3.1.1). A zone's split list ("path",
#   seed 002 §6) is its root-to-leaf sequence of half-spaces; every split has a
#   unique id (sid) shared by the two halves it made.
#
#   Join: a JoinRequest is routed greedily to the owner of the joiner's point,
#   which splits its zone in two (choose_split) after the conflict-detection
#   protocol of seed 002 §6.2 (Algorithms 4-9) has found its neighbourhood
#   quiet; otherwise the joiner retries from scratch after a random delay.
#   Leave: the same protocol commits a MERGE; the neighbours across the
#   leaver's takeover face (its last path entry) extend their zones through it.
#
#   Crash: a direct neighbour silent for `suspect_after_s` is probed; without
#   an answer it is declared dead and remembered as a tombstone (with its last
#   zone and path), which is also gossiped in updates. Dead zones are absorbed
#   by the rule that keeps the kd-tree a kd-tree: a dead region (a dead leaf,
#   or siblings that are all dead, grouped into their parent) is absorbed by
#   the live leaves of its sibling subtree that touch the split face between
#   them; each extends its own box through the region and drops that split
#   from its path. This is "several zones may take over" of seed 002 §6, made
#   recursive so that adjacent simultaneous crashes are repaired too.
#
#   Stale information (seed 002 §6.1): every zone change bumps the owner's
#   instance; news about a node only replaces older news (higher instance);
#   news about a tombstoned node is discarded and the node, if it speaks,
#   is told it was evicted (it then rejoins under a new id).
#
# Decisions where the papers are silent (docs/can.md has the reasons):
#   * a node gets a new random id for every membership attempt;
#   * paths stay exact tree paths: a split id missing from a peer that shares
#     a later split with us was removed by a merge, so we drop it too;
#   * a dead region is never absorbed while a live node known to us overlaps it
#     (our news of it is stale); and a request is rejected (Alg. 4) while our
#     neighbourhood has suspects, busy nodes, unabsorbed dead regions or a face
#     not exactly covered by known neighbours.
#
# Rules
#   1. Inputs never raise on peer data; bad content is reported to the peer
#      (the caller counts it as an "invalid" drop).
#   2. Randomness comes from the injected rng; time only from `now`.

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import msgspec

from node.can.geometry import (
    Space,
    abutment,
    adjacent,
    choose_split,
    contained,
    contains,
    covered_by,
    next_hop,
    overlap,
    uncovered,
)
from node.events import (
    CommandDone,
    Event,
    Inconsistent,
    Joined,
    JoinRetrying,
    Left,
    PeerDeclaredDead,
    TookOver,
    ZoneChanged,
)
from node.events import Evicted as EvictedEvent
from node.wire import (
    COMMIT_MERGE,
    COMMIT_NOOP,
    COMMIT_SPLIT,
    Commit,
    Evicted,
    JoinAccept,
    JoinAck,
    JoinRequest,
    JoinRetry,
    Lookup,
    Message,
    PathEntry,
    PeerInfo,
    Probe,
    ProbeReply,
    Propose,
    ProposeOK,
    Tombstone,
    Update,
    check_peer_info,
)

__all__ = ["CanConfig", "CanOverlay", "Status"]

Address = tuple[str, int]
ID_BITS = 48
# Join requests an owner keeps while its neighbourhood is busy.
MAX_QUEUED_JOINS = 16
# Attempts behind a command; more is a forged or broken message.
MAX_RANK = 1 << 16
# Neighbours listed in a JoinAccept (about 0.3-1 KB each).
MAX_ACCEPT_NEIGHBOURS = 48
# Characters of a NO's reason that we send and log.
MAX_REASON = 40
# Lookups into a dead subtree before taking it over, of each of two kinds (see _checked).
MAX_CHECK_LOOKUPS = 8


@dataclass(frozen=True)
class CanConfig:
    """Timing and limits of the overlay. Times in seconds of the `now` clock."""

    space: Space
    update_interval_s: float = 2.0
    suspect_after_s: float = 6.0  # silence of a direct neighbour before it is probed
    probe_timeout_s: float = 1.0  # no answer to the probe: declared dead
    propose_timeout_s: float = 2.0  # a neighbour that does not answer a Propose counts as NO
    join_timeout_s: float = 8.0  # a joiner that hears nothing retries
    retry_min_s: float = 0.5  # random back-off before a retry: uniform in [min, cap], cap doubling
    retry_max_s: float = 30.0
    busy_timeout_s: float = (
        8.0  # a neighbour's command we never saw committed is forgotten after this
    )
    tombstone_ttl_s: float = 120.0
    gossip_window_s: float = (
        30.0  # a tombstone is passed on in updates for this long after we learn it
    )
    forget_after_s: float = 10.0  # indirect news not refreshed for this long is dropped
    leave_attempts: int = 8  # MERGE attempts before leaving abruptly
    # Who receives a Propose: "neighbourhood" (direct and indirect neighbours, as
    # seed 002 §6.2 has it) or "direct" (enough to catch interfering commands,
    # whose nodes are within two hops: a common neighbour sees both; docs/can.md).
    propose_scope: str = "neighbourhood"
    max_hops: int = 512
    max_gossip_tombstones: int = 64
    max_summaries: int = 200  # neighbour summaries per update (the datagram must stay small)

    def __post_init__(self) -> None:
        for name in (
            "update_interval_s",
            "suspect_after_s",
            "probe_timeout_s",
            "propose_timeout_s",
            "join_timeout_s",
            "retry_min_s",
            "retry_max_s",
            "busy_timeout_s",
            "tombstone_ttl_s",
            "gossip_window_s",
            "forget_after_s",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(
                    f"CanConfig.{name} must be a positive number of seconds, not {value!r}"
                )
        if self.propose_scope not in ("neighbourhood", "direct"):
            raise ValueError(
                f"CanConfig.propose_scope must be 'neighbourhood' or 'direct', not {self.propose_scope!r}"
            )
        if self.suspect_after_s <= self.update_interval_s:
            raise ValueError(
                "CanConfig.suspect_after_s must exceed update_interval_s, or live neighbours are suspected"
            )


class Status:
    IDLE = "idle"  # not a member, not trying
    JOINING = "joining"
    MEMBER = "member"
    LEAVING = "leaving"  # a MERGE is being negotiated
    LEFT = "left"


@dataclass
class _Known:
    info: PeerInfo
    heard_at: float  # last time any news of it arrived
    direct_at: float = -math.inf  # last time it spoke to us, or became our neighbour (suspicion)
    spoke_at: float = -math.inf  # last time it spoke to us itself (only that)


@dataclass
class _Command:
    kind: int  # COMMIT_SPLIT or COMMIT_MERGE
    instance: int
    replies: dict[int, bool | None]
    refused: list[str]
    targets: dict[int, Address]
    deadline: float
    rank: int = 0
    request: JoinRequest | None = None  # the join a SPLIT serves
    serve_by: float = math.inf  # after this the joiner has given up waiting for us


@dataclass(frozen=True)
class _Taken:
    """A takeover we made: the other subtree's box, our zone before and after
    (it can be undone while our zone stays as it made it: a proposal bumps
    the instance but not the zone, the prune rule the path but not the box),
    and until when (the dead members' tombstones, which stop their news)."""

    box: tuple[tuple[float, ...], tuple[float, ...]]
    before: tuple[tuple[float, ...], tuple[float, ...], tuple[PathEntry, ...]]
    after: tuple[tuple[float, ...], tuple[float, ...], tuple[PathEntry, ...]]
    until: float


@dataclass
class _QueuedJoin:
    """A JoinRequest for our zone, kept until the neighbourhood lets us split for it."""

    request: JoinRequest
    serve_by: float  # start the SPLIT before this, or tell the joiner to retry
    not_before: float = -math.inf


def _conflict(kind: int, other: int) -> bool:
    """Two commands conflict unless both are SPLITs."""
    return kind != COMMIT_SPLIT or other != COMMIT_SPLIT


def _sid(node_id: int, instance: int) -> int:
    return (node_id << 15) | (instance & 0x7FFF)


class CanOverlay:
    """One peer's CAN membership. Drive it with the input methods; pull outputs
    through the `send` and `emit` callbacks given at construction (the Peer
    collects them), and `get_timer()`.
    """

    def __init__(
        self,
        config: CanConfig,
        *,
        address: Address,
        point: Sequence[float],
        rng: random.Random,
        send: Callable[[Address, Message], None],
        emit: Callable[[Event], None],
    ) -> None:
        if not config.space.contains_point(point):
            raise ValueError(f"point {tuple(point)} is outside the CAN space")
        self.config = config
        self.space = config.space
        self.address = address
        self.point = tuple(float(x) for x in point)
        self.rng = rng
        self._send = send
        self._emit = emit
        self.status = Status.IDLE
        self.id = 0
        self._reset_membership()

    # -- state -------------------------------------------------------------------------------------

    def _reset_membership(self) -> None:
        self.lo: tuple[float, ...] = ()
        self.hi: tuple[float, ...] = ()
        self.path: tuple[PathEntry, ...] = ()
        self.instance = 0
        self.known: dict[int, _Known] = {}
        self.direct: set[int] = set()
        self.tombstones: dict[int, tuple[Tombstone, float]] = {}
        # sender -> (instance, until, key, kind) of the command we said YES to
        self.busy: dict[int, tuple[int, float, tuple[int, int], int]] = {}
        # sender -> (addr, propose, until): answers held back for an outranking command
        self._deferred: dict[int, tuple[Address, Propose, float]] = {}
        self._join_queue: list[_QueuedJoin] = []
        self._recent_joiners: dict[int, float] = {}  # id -> when we split for it
        self._rtt: dict[int, float] = {}  # id -> smoothed RTT of our Propose/ProposeOK exchanges
        self._proposed_at: dict[int, float] = {}  # our recent instances -> when proposed
        self.suspects: dict[int, tuple[int, float]] = {}
        self.command: _Command | None = None
        self._regions: list[tuple[tuple[float, ...], tuple[float, ...], int]] | None = None
        self._their_neighbors: dict[
            int, tuple[PeerInfo, ...]
        ] = {}  # each direct neighbour's last summaries
        self._unsettled_ticks = 0
        # split id -> when the look into its dead other subtree ends (_checked)
        self._checks: dict[int, float] = {}
        self._checks_run = -math.inf  # checks that ended before this were acted on
        self._taken: list[_Taken] = []  # our recent takeovers (_give_back)
        self.invalid_news = 0
        self._next_update = math.inf
        self._join_req = 0
        self._attempts: dict[int, int] = {}  # our recent join requests: req -> the id it used
        self._join_deadline = math.inf
        self._join_attempts = 0
        self._retry_at = math.inf
        self._bootstraps: list[Address] = []
        self._pending_accept: dict[int, tuple[Address, JoinAccept, float, int]] = {}
        self._leave_attempts = 0
        self._leave_retry_at = math.inf

    def info(self) -> PeerInfo:
        return PeerInfo(
            self.id,
            self.address[0],
            self.address[1],
            self.instance,
            self.point,
            self.lo,
            self.hi,
            self.path,
        )

    def _new_id(self) -> int:
        return self.rng.getrandbits(ID_BITS) or 1

    def _set_zone(
        self,
        lo: Sequence[float],
        hi: Sequence[float],
        path: Iterable[PathEntry],
        reason: str,
        now: float,
    ) -> None:
        self.lo, self.hi, self.path = tuple(lo), tuple(hi), tuple(path)
        self.instance += 1
        self._regions = None
        self._recompute_direct(now)
        self._emit(ZoneChanged(now, reason, self.lo, self.hi, self.instance))

    def _recompute_direct(self, now: float) -> None:
        if not self.lo:
            self.direct = set()
            return
        self.direct = {
            ident
            for ident, k in self.known.items()
            if k.info.lo and abutment(self.lo, self.hi, k.info.lo, k.info.hi) is not None
        }
        for ident in self.direct:
            k = self.known[ident]
            if k.direct_at == -math.inf:
                k.direct_at = now  # a new neighbour gets a full suspicion period

    def _refresh_direct(self, idents: Iterable[int], now: float) -> None:
        """_recompute_direct for a few peers whose news changed (our zone did not)."""
        if not self.lo:
            return
        for ident in idents:
            k = self.known.get(ident)
            if (
                k is not None
                and k.info.lo
                and abutment(self.lo, self.hi, k.info.lo, k.info.hi) is not None
            ):
                self.direct.add(ident)
                if k.direct_at == -math.inf:
                    k.direct_at = now
            else:
                self.direct.discard(ident)

    def _learn(self, info: PeerInfo, now: float, *, direct: bool = False) -> bool:
        """Record news of a peer if it is newer than what we know. Returns True if it changed."""
        if info.id == self.id or info.id in self.tombstones or not info.lo:
            return False
        known = self.known.get(info.id)
        newer = known is None or info.instance > known.info.instance
        # A summary carries no path; the peer's own word (direct) fills it in.
        fills_path = (
            not newer
            and direct
            and info.instance == known.info.instance
            and info.path
            and not known.info.path
        )
        if newer or fills_path:
            if check_peer_info(info, self.space.n) is not None:
                self.invalid_news += 1  # validated only when used: most summaries are old news
                return False
            if known is not None and info.id in self.busy and info.instance > self.busy[info.id][0]:
                del self.busy[info.id]  # a newer instance closes its outstanding command
            self.known[info.id] = _Known(
                info,
                now,
                now if direct else (known.direct_at if known else -math.inf),
                now if direct else (known.spoke_at if known else -math.inf),
            )
            self._regions = None
            return newer
        if info.instance == known.info.instance:
            known.heard_at = now
        if direct:
            known.direct_at = known.spoke_at = now
        return False

    def _bury(self, info: PeerInfo | Tombstone, now: float, reason: str) -> None:
        """Record a peer as gone for good (dead or departed).

        Keeps the richest news: a tombstone needs the dead zone's path (to find
        who takes it over), which gossip may lack while we have it first-hand.
        """
        known = self.known.get(info.id)
        path = info.path
        if not path and known is not None and known.info.instance == info.instance:
            path = known.info.path
        old = self.tombstones.get(info.id)
        if old is not None:
            stale = old[0].instance > info.instance
            same = old[0].instance == info.instance
            if stale or (same and (old[0].path or not path)):
                return
        stone = Tombstone(info.id, info.instance, info.lo, info.hi, path)
        expires = now + self.config.tombstone_ttl_s if old is None else old[1]
        self.tombstones[info.id] = (stone, expires)
        self._regions = None
        self.known.pop(info.id, None)
        self.busy.pop(info.id, None)
        self._deferred.pop(info.id, None)
        self._rtt.pop(info.id, None)
        self.suspects.pop(info.id, None)
        if (
            self.command is not None
            and info.id in self.command.replies
            and self.command.replies[info.id] is None
        ):
            self.command.replies[info.id] = False
        self.direct.discard(info.id)
        if reason != "gossip":
            self._emit(PeerDeclaredDead(now, info.id, reason))

    # -- inputs: commands ----------------------------------------------------------------------------

    def join(self, bootstraps: Sequence[Address], now: float) -> None:
        """Start joining through any of `bootstraps`; with none, start a new overlay.

        While already joining, a new list replaces the old one and the next
        attempt starts at once (for a joiner whose bootstraps all went away).
        Mutates; follow with the outputs (datagrams, events, timer).
        """
        if self.status == Status.JOINING and bootstraps:
            self._bootstraps = [tuple(b) for b in bootstraps if tuple(b) != self.address]
            if self._bootstraps:
                self._try_join(now)
                return
        if self.status in (Status.MEMBER, Status.JOINING, Status.LEAVING):
            raise RuntimeError(f"join() while {self.status}")
        self._reset_membership()
        self._bootstraps = [tuple(b) for b in bootstraps if tuple(b) != self.address]
        self.status = Status.JOINING
        if not self._bootstraps:
            self.id = self._new_id()
            self._become_member(self.space.lo, self.space.hi, (), 1, [], now, first=True)
            return
        self._join_attempts = 0
        self._try_join(now)

    def _try_join(self, now: float) -> None:
        self.id = self._new_id()
        self._join_req = self.rng.getrandbits(32)
        self._attempts[self._join_req] = self.id
        if len(self._attempts) > 8:
            del self._attempts[next(iter(self._attempts))]
        self._join_attempts += 1
        self._retry_at = math.inf
        bootstrap = self._bootstraps[self.rng.randrange(len(self._bootstraps))]
        joiner = PeerInfo(self.id, self.address[0], self.address[1], 0, self.point, (), (), ())
        self._send(bootstrap, JoinRequest(self._join_req, joiner, 0, self._join_attempts))
        self._join_deadline = now + self.config.join_timeout_s

    def _retry_join_later(self, now: float, reason: str) -> None:
        self._join_deadline = math.inf
        delay = self._backoff(self._join_attempts)
        self._retry_at = now + delay
        self._emit(JoinRetrying(now, reason, self._join_attempts, delay))

    def _backoff(self, attempt: int) -> float:
        cap = min(self.config.retry_max_s, self.config.retry_min_s * 2 ** max(0, attempt - 1))
        return self.rng.uniform(self.config.retry_min_s, max(self.config.retry_min_s, cap))

    def _become_member(
        self,
        lo,
        hi,
        path,
        instance,
        neighbors: Iterable[PeerInfo],
        now: float,
        *,
        first: bool = False,
    ) -> None:
        self.lo, self.hi, self.path, self.instance = tuple(lo), tuple(hi), tuple(path), instance
        self.status = Status.MEMBER
        self._join_deadline = math.inf
        self._retry_at = math.inf
        for info in neighbors:
            self._learn(info, now, direct=True)
        self._recompute_direct(now)
        self._next_update = now + self.config.update_interval_s * self.rng.uniform(0.5, 1.0)
        self._emit(Joined(now, self.id, self.lo, self.hi, self._join_attempts, first))
        self._send_updates(now)

    def leave(self, now: float) -> None:
        """Leave gracefully: negotiate a MERGE, retrying a few times, else leave abruptly."""
        if self.status in (Status.IDLE, Status.JOINING):
            # Not a member yet: nothing to hand over. (An owner that already split for
            # us sees the half it gave away go silent and takes it back, as after a crash.)
            self._join_deadline = self._retry_at = math.inf
            self._finish_leave(now, graceful=True)
            return
        if self.status != Status.MEMBER:
            return
        self.status = Status.LEAVING
        self._leave_attempts = 0
        self._try_leave(now)

    def _try_leave(self, now: float) -> None:
        self._leave_retry_at = math.inf
        self._leave_attempts += 1
        if not self.known:
            self._finish_leave(now, graceful=True)
            return
        if self._leave_attempts > self.config.leave_attempts:
            # Conflict detection never let us through: leave as if crashed, but
            # say so, so that the neighbours bury us and repair now instead of
            # after suspecting and probing us (a MERGE commit is that notice).
            self.instance += 1
            notice = Commit(
                self.instance,
                COMMIT_MERGE,
                self.info(),
                None,
                tuple(self.known[i].info for i in sorted(self.direct)),
            )
            for ident in sorted(self.direct):
                info = self.known[ident].info
                self._send((info.host, info.port), notice)
            self._finish_leave(now, graceful=False)
            return
        if not self._request(COMMIT_MERGE, now, rank=self._leave_attempts):
            self._leave_retry_at = now + self._backoff(self._leave_attempts)

    def _finish_leave(self, now: float, *, graceful: bool) -> None:
        self.status = Status.LEFT
        self._next_update = math.inf
        self._deferred.clear()
        self._serve_waiting(now)  # queued joiners: retry elsewhere
        self._emit(Left(now, self.id, graceful, self._leave_attempts))

    def crash_reset(self) -> None:
        """Forget everything (the process died); used by engines that reuse the object."""
        self.status = Status.IDLE
        self._reset_membership()

    # -- inputs: time --------------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        if self.status in (Status.IDLE, Status.LEFT):
            return None
        deadlines = [self._next_update, self._join_deadline, self._retry_at, self._leave_retry_at]
        if self.command is not None:
            deadlines.append(self.command.deadline)
        deadlines.extend(d for _, d in self.suspects.values())
        deadlines.extend(at for _, _, at, _ in self._pending_accept.values())
        deadlines.extend(until for _, _, until in self._deferred.values())
        deadlines.extend(d for d in self._checks.values() if d > self._checks_run)
        for queued in self._join_queue:
            deadlines.append(queued.serve_by)
            if queued.not_before > -math.inf:
                deadlines.append(queued.not_before)
        earliest = min(deadlines)
        return None if earliest == math.inf else earliest

    def handle_timer(self, now: float) -> None:
        """Run whatever is due at `now`. Early or repeated calls do nothing wrong."""
        self._handle_timer(now)
        if self.status in (Status.MEMBER, Status.LEAVING):
            self._serve_waiting(now)

    def _handle_timer(self, now: float) -> None:
        if self.status == Status.JOINING:
            if now >= self._retry_at:
                self._try_join(now)
            elif now >= self._join_deadline:
                self._retry_join_later(now, "timeout")
            return
        if self.status not in (Status.MEMBER, Status.LEAVING):
            return
        if self.command is not None and now >= self.command.deadline:
            for ident, reply in self.command.replies.items():
                if reply is None:
                    self.command.replies[ident] = False  # Alg. 7: a timeout counts as NO
                    self.command.refused.append("timeout")
            self._maybe_commit(now)
        if self.status == Status.LEAVING and now >= self._leave_retry_at:
            self._try_leave(now)
            if self.status == Status.LEFT:
                return
        for req, (addr, accept, at, tries) in list(self._pending_accept.items()):
            if now >= at:
                if tries >= 4:
                    self._reclaim(req, now, "never took our accept")
                else:
                    self._send(addr, accept)
                    self._pending_accept[req] = (
                        addr,
                        accept,
                        now + self.config.update_interval_s / 2,
                        tries + 1,
                    )
        expired = [ident for ident, (_, deadline) in self.suspects.items() if now >= deadline]
        for ident in expired:
            known = self.known.get(ident)
            self.suspects.pop(ident, None)
            if known is not None:
                self._bury(known.info, now, "no answer to probe")
        if expired or any(self._checks_run < d <= now for d in self._checks.values()):
            self._checks_run = now
            self._repair(now)
        if now >= self._next_update:
            self._tick(now)

    def _tick(self, now: float) -> None:
        config = self.config
        self._next_update = now + config.update_interval_s * self.rng.uniform(0.9, 1.1)
        # Failure detection: probe direct neighbours that went quiet.
        for ident in sorted(self.direct):
            known = self.known[ident]
            if ident not in self.suspects and now - known.direct_at > config.suspect_after_s:
                nonce = self.rng.getrandbits(32)
                self.suspects[ident] = (nonce, now + config.probe_timeout_s)
                self._send((known.info.host, known.info.port), Probe(nonce))
        # Expiry of soft state.
        horizon = now - 2 * config.update_interval_s
        for ident in [i for i, at in self._recent_joiners.items() if at < horizon]:
            del self._recent_joiners[ident]
        for ident in [i for i, (_, until, _, _) in self.busy.items() if now >= until]:
            del self.busy[ident]
        for sid in [s for s, d in self._checks.items() if now >= d + config.update_interval_s]:
            del self._checks[sid]
        expired = [i for i, (_, until) in self.tombstones.items() if now >= until]
        for ident in expired:
            del self.tombstones[ident]
        stale = [
            i
            for i, k in self.known.items()
            if i not in self.direct and now - k.heard_at > config.forget_after_s
        ]
        for ident in stale:
            del self.known[ident]
            self._rtt.pop(ident, None)
        if expired or stale:
            self._regions = None
            for ident in (*expired, *stale):
                self._their_neighbors.pop(ident, None)
        self._heal(now)
        self._repair(now)
        self._send_updates(now)

    # -- outputs -------------------------------------------------------------------------------------------

    def _send_updates(self, now: float) -> None:
        if self.status not in (Status.MEMBER, Status.LEAVING):
            return
        # Each summary's path is sent as what follows its common prefix with ours.
        neighbors = tuple(self._summary(self.known[i].info) for i in sorted(self.direct))[
            : self.config.max_summaries
        ]
        # Pass on only what we learnt recently, so that news of a death spreads
        # once and dies out instead of circulating after it expired somewhere.
        fresh_until = now + self.config.tombstone_ttl_s - self.config.gossip_window_s
        fresh = [item for item in self.tombstones.values() if item[1] >= fresh_until]
        fresh.sort(key=lambda item: -item[1])
        stones = tuple(stone for stone, _ in fresh[: self.config.max_gossip_tombstones])
        update = Update(self.info(), neighbors, stones)
        for ident in sorted(self.direct):
            info = self.known[ident].info
            self._send((info.host, info.port), update)

    def _summary(self, info: PeerInfo, base: tuple[PathEntry, ...] | None = None) -> PeerInfo:
        """`info` with its path sent as what follows its common prefix with `base` (ours)."""
        shared = 0
        for mine, theirs in zip(self.path if base is None else base, info.path):  # noqa: B905
            if mine != theirs:
                break
            shared += 1
        return msgspec.structs.replace(info, path=info.path[shared:], prefix=shared)

    @staticmethod
    def _expand(summary: PeerInfo, sender_path: tuple[PathEntry, ...]) -> PeerInfo | None:
        """A summary's full info (None if its prefix does not fit the sender's path)."""
        if summary.prefix == 0:
            return summary
        if summary.prefix > len(sender_path):
            return None
        return msgspec.structs.replace(
            summary, path=sender_path[: summary.prefix] + summary.path, prefix=0
        )

    # -- inputs: messages --------------------------------------------------------------------------------

    def handle_message(
        self, sender: int, addr: Address, message: Message, now: float
    ) -> str | None:
        """Process one decoded message. Returns None, or why its content was invalid
        (the caller counts an "invalid" drop). Never raises on peer data."""
        problem = self._handle_message(sender, addr, message, now)
        if self.status in (Status.MEMBER, Status.LEAVING):
            self._serve_waiting(now)
        return problem

    def _handle_message(
        self, sender: int, addr: Address, message: Message, now: float
    ) -> str | None:
        problem = self._validate(message)
        if problem is not None:
            return problem
        if isinstance(message, Probe):
            self._send(
                addr,
                ProbeReply(
                    message.nonce,
                    self.info() if self.status in (Status.MEMBER, Status.LEAVING) else None,
                ),
            )
            return None
        if isinstance(message, JoinAccept):
            self._on_join_accept(addr, message, now)
            return None
        if isinstance(message, JoinRetry):
            if self.status == Status.JOINING and message.req == self._join_req:
                self._retry_join_later(now, message.reason)
            elif message.req in self._pending_accept and self.status in (
                Status.MEMBER,
                Status.LEAVING,
            ):
                self._reclaim(message.req, now, "declined our accept")
            return None
        if isinstance(message, Evicted):
            self._on_evicted(sender, now)
            return None
        if self.status not in (Status.MEMBER, Status.LEAVING):
            return None
        known = self.known.get(sender)
        if known is not None:
            known.direct_at = known.spoke_at = now  # any datagram is a sign of life
        if sender in self.tombstones and not isinstance(message, JoinRequest):
            # seed 002 §6.1: news from a node we buried is stale; tell it.
            self._send(addr, Evicted(self.tombstones[sender][0].instance))
            return None
        if isinstance(message, Update):
            self._on_update(sender, message, now)
        elif isinstance(message, JoinRequest):
            self._on_join_request(message, now)
        elif isinstance(message, JoinAck):
            self._pending_accept.pop(message.req, None)
        elif isinstance(message, Propose):
            self._on_propose(sender, addr, message, now)
        elif isinstance(message, ProposeOK):
            self._on_propose_ok(sender, message, now)
        elif isinstance(message, Commit):
            self._on_commit(sender, message, now)
        elif isinstance(message, ProbeReply):
            self._on_probe_reply(sender, message, now)
        elif isinstance(message, Lookup):
            self._on_lookup(message, now)
        return None

    def _validate(self, message: Message) -> str | None:
        dims = self.space.n
        infos: list[PeerInfo] = []
        # Neighbour summaries are checked in _learn, only when they are news.
        if isinstance(message, Update):
            infos = [message.me]
        elif isinstance(message, JoinRequest):
            if not 0 <= message.attempt <= MAX_RANK:
                return "join attempt out of range"
            infos = [message.joiner]
        elif isinstance(message, Propose):
            if not 0 <= message.rank <= MAX_RANK:
                return "propose rank out of range"
            if message.kind not in (0, COMMIT_SPLIT, COMMIT_MERGE):
                return "propose kind unknown"
        elif isinstance(message, JoinAccept):
            infos = [message.you]
        elif isinstance(message, Commit):
            infos = [i for i in (message.leader, message.joiner) if i is not None]
        elif isinstance(message, ProbeReply) and message.me is not None:
            infos = [message.me]
        elif isinstance(message, Lookup):
            if len(message.point) != dims or not all(math.isfinite(x) for x in message.point):
                return "bad lookup point"
            infos = [message.origin]
        for info in infos:
            problem = check_peer_info(info, dims)
            if problem is not None:
                return problem
        return None

    def _on_update(self, sender: int, update: Update, now: float) -> None:
        me = update.me
        if me.id != sender or not me.lo:
            return
        learned = [sender] if self._learn(me, now, direct=True) else []
        changed = False  # something beyond news of peers (a burial): full recomputation
        self.suspects.pop(sender, None)

        self._prune_path(me.path, now)
        summaries = []
        known = self.known
        for packed in update.neighbors:
            # Most summaries are old news: reuse what we hold (same instance, same
            # zone) instead of expanding the compressed path again.
            held = known.get(packed.id)
            if (
                held is not None
                and held.info.instance == packed.instance
                and held.info.path
                and held.info.lo == packed.lo
                and held.info.hi == packed.hi
            ):
                info = held.info
            else:
                info = self._expand(packed, me.path)
                if info is None:
                    self.invalid_news += 1
                    continue
            summaries.append(info)
            if info.id != self.id and info.id != sender and self._learn(info, now):
                learned.append(info.id)
        if summaries:
            self._their_neighbors[sender] = tuple(summaries)
        for stone in update.tombstones:
            if stone.id == self.id:
                self._on_evicted(sender, now)
                return
            known = self.known.get(stone.id)
            mine = self.tombstones.get(stone.id)
            # A tombstone with the dead zone's path may upgrade one without.
            upgrade = (
                mine is not None
                and not mine[0].path
                and stone.path
                and mine[0].instance <= stone.instance
            )
            if (known is None or known.info.instance <= stone.instance) and (
                mine is None or upgrade
            ):
                as_info = PeerInfo(
                    stone.id, "x", 1, stone.instance, self.point, stone.lo, stone.hi, stone.path
                )
                if stone.lo and check_peer_info(as_info, self.space.n) is not None:
                    self.invalid_news += 1  # checked only when it is news, like summaries
                    continue
                self._bury(stone, now, "gossip")
                changed = True
        if changed:
            self._recompute_direct(now)
        elif learned:
            self._refresh_direct(learned, now)
        if self._taken:
            self._give_back(now)
        if changed or learned:
            self._repair(now)
        if update.neighbors and sender not in self.direct and self.lo:
            # It thinks we are neighbours, we do not: one of us has stale news.
            # Answer with our state (and no summaries, so this is never answered).
            self._send((me.host, me.port), Update(self.info(), (), ()))

    def _prune_path(self, other: Sequence[PathEntry], now: float) -> None:
        """Drop split ids that a peer sharing a later split no longer has (they were merged away)."""
        mine = [e.sid for e in self.path]
        theirs = [e.sid for e in other]
        position = {sid: k for k, sid in enumerate(theirs)}
        last_shared = None
        for k, sid in enumerate(mine):
            if sid in position:
                last_shared = k
        if last_shared is None:
            return
        ancestors = set(theirs[: position[mine[last_shared]]])
        # A split that is still a face of our zone is not stale: the region across
        # it is being absorbed by several takers at different moments, and we are
        # one that has not yet taken its share (_absorb will drop the split then).
        faces = {
            e.sid for e in self.path if (self.lo[e.dim] if e.upper else self.hi[e.dim]) == e.pos
        }
        stale = {sid for sid in mine[:last_shared] if sid not in ancestors and sid not in faces}
        if stale:
            self.path = tuple(e for e in self.path if e.sid not in stale)
            self._emit(Inconsistent(now, "stale-split-dropped", sorted(stale)))

    def _on_probe_reply(self, sender: int, reply: ProbeReply, now: float) -> None:
        if reply.me is None or reply.me.id != sender:
            known = self.known.get(sender)
            if known is not None:
                self._bury(known.info, now, "probe: not a member")
                self._repair(now)
            return
        self.suspects.pop(sender, None)
        self._learn(reply.me, now, direct=True)

    def _on_evicted(self, sender: int, now: float) -> None:
        if self.status not in (Status.MEMBER, Status.LEAVING):
            return
        self._emit(EvictedEvent(now, self.id, sender))
        bootstraps = [(k.info.host, k.info.port) for k in self.known.values()] or self._bootstraps
        self.status = Status.IDLE
        self.join(bootstraps, now)

    # -- join ------------------------------------------------------------------------------------------

    def _on_join_request(
        self, request: JoinRequest, now: float, serve_by: float | None = None
    ) -> None:
        """Route a join towards its point; in our zone, split for it.

        When the neighbourhood is busy, the request waits here (up to half the
        joiner's timeout; `serve_by`) instead of sending the joiner into
        back-off: it is served as soon as the neighbourhood settles, and after
        a conflict it is tried again here with a higher rank.
        """
        joiner = request.joiner
        reply_to = (joiner.host, joiner.port)
        if not self.space.contains_point(joiner.point):
            self._send(reply_to, JoinRetry(request.req, "point outside the space"))
            return
        hop = next_hop(self.space, self.lo, self.hi, self._neighbor_boxes(), joiner.point)
        if hop == -1:
            if serve_by is None:
                serve_by = now + self.config.join_timeout_s / 2
            if self.status == Status.LEAVING:
                self._send(reply_to, JoinRetry(request.req, "owner leaving"))
            elif joiner.id == self.id or (
                choose_split(self.space, self.lo, self.hi, self.path, self.point, joiner.point)
                is None
            ):
                self._send(reply_to, JoinRetry(request.req, "same id or point as the owner"))
            elif any(q.request.req == request.req for q in self._join_queue) or (
                self.command is not None
                and self.command.request is not None
                and self.command.request.req == request.req
            ):
                pass  # a copy of one we hold already
            elif self._neighbourhood_unsettled(now, COMMIT_SPLIT) is not None:
                self._queue_join(request, serve_by, now)
            else:
                self._request(
                    COMMIT_SPLIT,
                    now,
                    rank=request.attempt,
                    request=request,
                    serve_by=serve_by,
                )
            return
        if hop is None or request.hops >= self.config.max_hops:
            self._send(reply_to, JoinRetry(request.req, "no route"))
            return
        target = self.known[hop].info
        self._send(
            (target.host, target.port),
            JoinRequest(request.req, joiner, request.hops + 1, request.attempt),
        )

    def _queue_join(
        self, request: JoinRequest, serve_by: float, now: float, not_before: float = -math.inf
    ) -> None:
        if now >= serve_by or len(self._join_queue) >= MAX_QUEUED_JOINS:
            self._send(
                (request.joiner.host, request.joiner.port),
                JoinRetry(request.req, "neighbourhood busy"),
            )
            return
        self._join_queue.append(_QueuedJoin(request, serve_by, not_before))

    def _serve_waiting(self, now: float) -> None:
        """Answer held-back proposals and start queued joins that the neighbourhood now allows."""
        if self._deferred:
            ranked = sorted(self._deferred.items(), key=lambda kv: (-kv[1][1].rank, kv[0]))
            for sender, (addr, propose, until) in ranked:
                if now >= until:
                    del self._deferred[sender]  # the proposer has counted it a NO by now
                    continue
                reason = self._unsettled_for(sender, propose, now)
                if reason is None:
                    del self._deferred[sender]
                    self._grant(sender, addr, propose, now)
                elif not self._may_wait(sender, propose, reason):
                    del self._deferred[sender]
                    self._send(addr, ProposeOK(propose.instance, False, reason[:MAX_REASON]))
        if not self._join_queue:
            return
        waiting, self._join_queue = self._join_queue, []
        if self.status != Status.MEMBER:
            for queued in waiting:
                joiner = queued.request.joiner
                self._send(
                    (joiner.host, joiner.port), JoinRetry(queued.request.req, "owner leaving")
                )
            return
        waiting.sort(key=lambda q: (-q.request.attempt, q.serve_by))
        for queued in waiting:
            if now >= queued.serve_by:
                self._queue_join(queued.request, queued.serve_by, now)  # says retry
            elif queued.not_before > now:
                self._join_queue.append(queued)
            elif self._neighbourhood_unsettled(now, COMMIT_SPLIT) is None:
                self._on_join_request(queued.request, now, queued.serve_by)
            else:
                queued.not_before = -math.inf
                self._join_queue.append(queued)

    def _reclaim(self, req: int, now: float, reason: str) -> None:
        """The joiner we split for will never own its half: bury it, and our
        repair takes the half back (we are its sibling)."""
        _, accept, _, _ = self._pending_accept.pop(req)
        known = self.known.get(accept.you.id)
        self._bury(known.info if known is not None else accept.you, now, reason)
        self._recompute_direct(now)
        if accept.you.path:  # nobody but the joiner could be there: no need to look
            self._checks[accept.you.path[-1].sid] = now
        self._repair(now)

    def _neighbor_boxes(self) -> list[tuple[int, tuple[float, ...], tuple[float, ...]]]:
        return [(i, self.known[i].info.lo, self.known[i].info.hi) for i in sorted(self.direct)]

    def _on_join_accept(self, addr: Address, accept: JoinAccept, now: float) -> None:
        """Take a zone split for us, also one answering an earlier attempt that
        we had given up on (its owner split for it all the same). Decline any
        we cannot take, so that the owner takes the half back at once instead
        of after failure detection (see _reclaim)."""
        you = accept.you
        if self.status in (Status.MEMBER, Status.LEAVING) and accept.req == self._join_req:
            if you.id == self.id:
                self._send(addr, JoinAck(accept.req))  # our ack was lost; the splitter resends
            return
        if (
            self.status != Status.JOINING
            or self._attempts.get(accept.req) != you.id
            or not you.lo
            or not contains(you.lo, you.hi, self.point)
        ):
            self._send(addr, JoinRetry(accept.req, "declined"))
            return
        self.id, self._join_req = you.id, accept.req
        self._send(addr, JoinAck(accept.req))
        neighbors = [self._expand(summary, you.path) for summary in accept.neighbors]
        self._become_member(
            you.lo, you.hi, you.path, you.instance, [n for n in neighbors if n is not None], now
        )

    # -- conflict detection (seed 002 §6.2, Algorithms 4-9) ----------------------------------------------

    def _neighbourhood_unsettled(
        self, now: float, kind: int = COMMIT_MERGE, *, voting: bool = False
    ) -> str | None:
        """Why a change of `kind` must not start now (Alg. 4 line 1), or None.

        With `voting`, the change is a neighbour's, which our own pending
        command blocks only if the two conflict. SPLITs do not conflict with
        each other: each divides only its own zone, and the neighbour tables
        catch up through the commits and updates (docs/can.md).
        """
        if self.command is not None and (not voting or _conflict(kind, self.command.kind)):
            return "own command pending"
        if any(_conflict(kind, held[3]) for held in self.busy.values()):
            return "neighbour busy"
        if not voting:
            if any(_conflict(kind, p.kind) for _, p, _ in self._deferred.values()):
                return "neighbour waiting"  # an older proposal waits for us to be free
            if self._pending_accept:
                return "joiner not in yet"  # it could not answer our Propose
        if self.suspects:
            return "neighbour suspected"
        if self._dead_regions_nearby():
            return "dead zone nearby"
        return self._coverage_problem()

    def _request(
        self,
        kind: int,
        now: float,
        *,
        rank: int = 0,
        request: JoinRequest | None = None,
        serve_by: float = math.inf,
    ) -> bool:
        """Alg. 4: start a SPLIT or MERGE if the neighbourhood is quiet. Returns False if rejected."""
        if self._neighbourhood_unsettled(now, kind) is not None:
            return False
        self.instance += 1
        scope = self.direct if self.config.propose_scope == "direct" else self.known
        targets = {
            ident: (self.known[ident].info.host, self.known[ident].info.port)
            for ident in sorted(scope)
        }
        self.command = _Command(
            kind,
            self.instance,
            dict.fromkeys(targets),
            [],
            targets,
            now + self._propose_timeout(targets),
            rank,
            request,
            serve_by,
        )
        if not targets:
            self._commit(kind, now)
            return True
        self._proposed_at[self.instance] = now
        if len(self._proposed_at) > 8:
            del self._proposed_at[min(self._proposed_at)]
        for addr in targets.values():
            self._send(addr, Propose(self.instance, rank, kind))
        return True

    def _propose_timeout(self, targets: Iterable[int]) -> float:
        """propose_timeout_s, or longer for neighbours that answered slowly before.

        Some WAN paths (PlanetLab's slowest) take over a second each way; with a
        fixed timeout every command that involves them would end as a NO-OP.
        """
        slowest = max((self._rtt.get(t, 0.0) for t in targets), default=0.0)
        base = self.config.propose_timeout_s
        return min(max(base, 1.5 * slowest + base / 2), 10 * base)

    def _on_propose(self, sender: int, addr: Address, propose: Propose, now: float) -> None:
        """Alg. 5, with wait-die between crossing commands (see Propose)."""
        old = self.busy.get(sender)
        if old is not None and old[0] < propose.instance:
            del self.busy[sender]  # its earlier command is over: it has moved on
        self._deferred.pop(sender, None)  # it gave up on that one
        reason = self._unsettled_for(sender, propose, now)
        if reason is None:
            self._grant(sender, addr, propose, now)
        elif self._may_wait(sender, propose, reason):
            # The proposer may wait longer than propose_timeout_s (slow paths);
            # if it has given up, its NO-OP commit withdraws this.
            self._deferred[sender] = (addr, propose, now + 2 * self.config.propose_timeout_s)
        else:
            self._send(addr, ProposeOK(propose.instance, False, reason[:MAX_REASON]))

    def _grant(self, sender: int, addr: Address, propose: Propose, now: float) -> None:
        """Say YES, and hold still until the proposer's commit (or busy_timeout_s)."""
        key = (-propose.rank, sender)
        self.busy[sender] = (propose.instance, now + self.config.busy_timeout_s, key, propose.kind)
        self._send(addr, ProposeOK(propose.instance, True))

    def _unsettled_for(self, sender: int, propose: Propose, now: float) -> str | None:
        """Why we cannot say YES to this proposal now, or None."""
        reason = self._neighbourhood_unsettled(now, propose.kind, voting=True)
        if reason is not None:
            return reason
        key = (-propose.rank, sender)
        for other, (_, waiting, _) in self._deferred.items():
            if (
                other != sender
                and _conflict(propose.kind, waiting.kind)
                and (-waiting.rank, other) < key
            ):
                return "outranked by a waiting proposal"
        return None

    def _may_wait(self, sender: int, propose: Propose, reason: str) -> bool:
        """Whether a proposal we cannot grant now outranks every command that holds us
        (wait-die: waits only ever go from higher to lower rank, so they form no cycle)."""
        if reason not in ("own command pending", "neighbour busy"):
            return False
        key = (-propose.rank, sender)
        holders = [held for _, _, held, kind in self.busy.values() if _conflict(propose.kind, kind)]
        if self.command is not None and _conflict(propose.kind, self.command.kind):
            holders.append((-self.command.rank, self.id))
        return all(key < held for held in holders)

    def _on_propose_ok(self, sender: int, reply: ProposeOK, now: float) -> None:
        """Alg. 6."""
        sent = self._proposed_at.get(reply.instance)
        if sent is not None and sender in self.known:
            sample = now - sent  # late answers count too: they tell us to wait longer
            old = self._rtt.get(sender)
            self._rtt[sender] = sample if old is None else 0.75 * old + 0.25 * max(sample, old / 2)
        command = self.command
        if command is None or reply.instance != command.instance or sender not in command.replies:
            return
        command.replies[sender] = reply.yes
        if not reply.yes:
            command.refused.append(reply.reason[:MAX_REASON] or "no reason")
        self._maybe_commit(now)

    def _maybe_commit(self, now: float) -> None:
        command = self.command
        if command is None:
            return
        replies = command.replies.values()
        if all(r is True for r in replies):
            self._commit(command.kind, now)
        elif all(r is not None for r in replies):
            self._commit(COMMIT_NOOP, now)

    def _commit(self, kind: int, now: float) -> None:
        """Alg. 8: execute locally, then tell the whole neighbourhood."""
        command = self.command
        assert command is not None
        self.command = None
        targets = command.targets
        if kind == COMMIT_SPLIT:
            commit = self._execute_split(command, now)
        elif kind == COMMIT_MERGE:
            neighbors = tuple(self.known[i].info for i in sorted(self.direct))
            commit = Commit(command.instance, COMMIT_MERGE, self.info(), None, neighbors)
        else:
            commit = Commit(command.instance, COMMIT_NOOP, None, None, ())
        for addr in targets.values():
            self._send(addr, commit)
        self._emit(
            CommandDone(
                now,
                {COMMIT_SPLIT: "split", COMMIT_MERGE: "merge", COMMIT_NOOP: "noop"}[kind],
                command.instance,
                len(targets),
                tuple(sorted(command.refused)) if kind == COMMIT_NOOP else (),
            )
        )
        if kind == COMMIT_NOOP:
            if command.kind == COMMIT_SPLIT and command.request is not None:
                # Lost to a crossing command: try again here, ranked higher.
                request = msgspec.structs.replace(command.request, attempt=command.rank + 1)
                pause = self.rng.uniform(0, self.config.retry_min_s)
                self._queue_join(request, command.serve_by, now, now + pause)
            elif command.kind == COMMIT_MERGE and self.status == Status.LEAVING:
                self._leave_retry_at = now + self._backoff(self._leave_attempts)
        elif kind == COMMIT_MERGE:
            self._finish_leave(now, graceful=True)

    def _execute_split(self, command: _Command, now: float) -> Commit:
        assert command.request is not None
        joiner, req = command.request.joiner, command.request.req
        joiner_addr = (joiner.host, joiner.port)
        choice = choose_split(self.space, self.lo, self.hi, self.path, self.point, joiner.point)
        if choice is None or not contains(self.lo, self.hi, joiner.point):
            # Our zone changed while we negotiated (a takeover); the joiner retries.
            self._send(joiner_addr, JoinRetry(req, "zone changed"))
            return Commit(command.instance, COMMIT_NOOP, None, None, ())
        dim, pos = choice
        sid = _sid(self.id, self.instance)
        mine_upper = self.point[dim] >= pos
        lo, hi = list(self.lo), list(self.hi)
        jlo, jhi = list(self.lo), list(self.hi)
        if mine_upper:
            lo[dim], jhi[dim] = pos, pos
        else:
            hi[dim], jlo[dim] = pos, pos
        joiner_path = (*self.path, PathEntry(sid, dim, pos, not mine_upper))
        new_joiner = PeerInfo(
            joiner.id,
            joiner.host,
            joiner.port,
            1,
            joiner.point,
            tuple(jlo),
            tuple(jhi),
            joiner_path,
        )
        self._set_zone(lo, hi, (*self.path, PathEntry(sid, dim, pos, mine_upper)), "split", now)
        self.known[joiner.id] = _Known(new_joiner, now, now, now)  # it asked us itself
        self._recent_joiners[joiner.id] = now
        self._recompute_direct(now)
        # What we know, as summaries against the joiner's path, those next to
        # its zone first: a large neighbourhood would not fit in one datagram.
        others = sorted(
            (k.info for i, k in self.known.items() if i != joiner.id),
            key=lambda info: (not adjacent(info.lo, info.hi, jlo, jhi), info.id),
        )
        neighbors = tuple(
            self._summary(info, joiner_path)
            for info in [self.info(), *others][:MAX_ACCEPT_NEIGHBOURS]
        )
        accept = JoinAccept(req, new_joiner, neighbors)
        self._send(joiner_addr, accept)
        self._pending_accept[req] = (
            joiner_addr,
            accept,
            now + self.config.update_interval_s / 2,
            1,
        )
        return Commit(command.instance, COMMIT_SPLIT, self.info(), new_joiner, ())

    def _on_commit(self, sender: int, commit: Commit, now: float) -> None:
        """Alg. 9, plus: the news it carries is applied even if we missed the Propose."""
        busy = self.busy.get(sender)
        if busy is not None and busy[0] <= commit.instance:
            del self.busy[sender]
        held = self._deferred.get(sender)
        if held is not None and held[1].instance <= commit.instance:
            del self._deferred[sender]  # that command is over (it gave up waiting for us)
        if commit.kind == COMMIT_SPLIT and commit.leader is not None and commit.joiner is not None:
            self._learn(commit.leader, now, direct=True)
            self._learn(commit.joiner, now)
            self._recompute_direct(now)
            self._introduce(commit.leader, commit.joiner, now)
        elif commit.kind == COMMIT_MERGE and commit.leader is not None:
            for info in commit.neighbors:
                if info.id != self.id:
                    self._learn(info, now)
            self._bury(commit.leader, now, "left")
            self._recompute_direct(now)
            self._repair(now)

    def _introduce(self, leader: PeerInfo, joiner: PeerInfo, now: float) -> None:
        """Introduce our recent joiners to a neighbour's new joiner that borders them.

        SPLITs run concurrently, so a joiner we split for may have got its
        neighbour list before this other split happened; its owner did not know
        ours. Until updates and lookups close the gap, the two zones would be
        linked only through their owners, and two adjacent crashes could cut
        them apart for good. A Lookup for the joiner's point, with our joiner as
        origin, makes each learn the other (see _on_lookup).
        """
        horizon = now - 2 * self.config.update_interval_s
        for ident, at in list(self._recent_joiners.items()):
            if at < horizon or ident not in self.known:
                del self._recent_joiners[ident]
                continue
            ours = self.known[ident].info
            if ident != joiner.id and adjacent(ours.lo, ours.hi, joiner.lo, joiner.hi):
                lookup = Lookup(self.rng.getrandbits(32), joiner.point, ours, 0)
                self._send((leader.host, leader.port), lookup)

    # -- repair: absorbing dead zones ------------------------------------------------------------------
    #
    # The rule, from the taker's side (our own path is exact, dead nodes' may not be):
    # for a split sigma that is a face of our zone, our path gives the box B of
    # sigma's other subtree. When that subtree has no survivor (no live zone lies
    # inside B; co-takers that grew into B from our side stick out of it), the
    # tree operation is "our subtree replaces sigma's parent": every leaf of ours
    # touching the face extends through B. So we take our slab of B, once it is
    # covered by dead zones and free of live ones, and drop sigma from our path.
    # A single dead sibling, several takers, and siblings that died together
    # (their parent's subtree is then all dead) are all this one rule.

    def _dead_boxes(self) -> list[tuple[tuple[float, ...], tuple[float, ...], int]]:
        """(lo, hi, id) of dead zones not already covered by live zones we know (cached).

        A tombstone overlapping a live descendant is stale news (it split before
        it died) and is left out. So is one that cannot matter to us: every slab
        we could absorb lies in our zone stretched along one dimension, so a
        dead zone outside all of those stretches is skipped (this keeps the
        cost low in large overlays with many tombstones).
        """
        if self._regions is None:
            live = [k.info for k in self.known.values()]
            if self.lo:
                live.append(self.info())
            out = []
            mine = tuple(zip(self.lo, self.hi, strict=True)) if self.lo else None
            for stone, _ in self.tombstones.values():
                if not stone.lo:
                    continue
                if mine is not None and not _within_one_stretch(mine, stone.lo, stone.hi):
                    continue
                touching = [i for i in live if overlap(stone.lo, stone.hi, i.lo, i.hi)]
                sids = tuple(e.sid for e in stone.path)
                if sids and any(
                    tuple(e.sid for e in i.path[: len(sids)]) == sids for i in touching
                ):
                    continue
                if touching and covered_by(stone.lo, stone.hi, [(i.lo, i.hi) for i in touching]):
                    continue
                out.append((stone.lo, stone.hi, stone.id))
            self._regions = out
        return self._regions

    def _tombstone_touches_us(self) -> bool:
        """Cheap test before _dead_boxes(): does any dead zone share a face with ours?
        (A slab we could absorb is covered by dead zones, and those next to our
        face share it with us, so without one there is nothing to do.)"""
        if not self.tombstones or not self.lo:
            return False
        lo, hi = self.lo, self.hi
        return any(
            stone.lo and abutment(lo, hi, stone.lo, stone.hi) is not None
            for stone, _ in self.tombstones.values()
        )

    def _dead_regions_nearby(self) -> bool:
        return bool(self._dead_pieces_next_to_us(limit=1))

    def _dead_pieces_next_to_us(self, limit: int) -> list[tuple[tuple[float, ...], ...]]:
        """Parts of dead zones that no live zone we know covers and that share a face
        with ours. A dead zone that touches us but whose uncovered rest lies
        elsewhere (split before it died, its halves owned by nodes we need not
        know) is no reason to hold still, and we could not learn better by
        looking across our own faces."""
        if not self._tombstone_touches_us():
            return []
        out: list[tuple[tuple[float, ...], ...]] = []
        live = [(k.info.lo, k.info.hi) for k in self.known.values()]
        for lo, hi, _ in self._dead_boxes():
            if abutment(self.lo, self.hi, lo, hi) is None:
                continue
            cuts = [(a, b) for a, b in live if overlap(lo, hi, a, b)]
            pieces = uncovered(lo, hi, cuts, limit=1000)
            if pieces is None:
                pieces = [(tuple(lo), tuple(hi))]  # too fragmented to tell: count all of it
            for piece in pieces:
                if abutment(self.lo, self.hi, piece[0], piece[1]) is not None:
                    out.append(piece)
                    if len(out) >= limit:
                        return out
        return out

    def _repair(self, now: float) -> None:
        """Absorb every dead slab we are responsible for (see the comment above)."""
        if self.status not in (Status.MEMBER, Status.LEAVING) or not self.tombstones:
            return
        for _ in range(8):  # a takeover can bring us to another dead zone
            if not self._absorb_once(now):
                return

    def _absorb_once(self, now: float) -> bool:
        if not self._tombstone_touches_us():
            return False
        dead = self._dead_boxes()
        if not dead:
            return False
        live = [k.info for k in self.known.values()]
        for k in range(len(self.path) - 1, -1, -1):
            entry = self.path[k]
            d = entry.dim
            if (self.lo[d] if entry.upper else self.hi[d]) != entry.pos:
                continue  # shadowed by a later split: not a face of ours
            blo, bhi = (list(x) for x in self.space.box_of_path(self.path[:k]))
            if entry.upper:
                bhi[d] = entry.pos  # the other subtree is below
            else:
                blo[d] = entry.pos
            if not any(overlap(lo, hi, blo, bhi) for lo, hi, _ in dead):
                continue
            if any(overlap(i.lo, i.hi, blo, bhi) and contained(i.lo, i.hi, blo, bhi) for i in live):
                continue  # the other subtree still has a live leaf: it repairs itself
            slab_lo, slab_hi = list(self.lo), list(self.hi)
            if entry.upper:
                slab_lo[d], slab_hi[d] = blo[d], self.lo[d]
            else:
                slab_lo[d], slab_hi[d] = self.hi[d], bhi[d]
            if any(overlap(slab_lo, slab_hi, i.lo, i.hi) for i in live):
                continue
            relevant = [(lo, hi) for lo, hi, _ in dead if overlap(lo, hi, slab_lo, slab_hi)]
            if not covered_by(slab_lo, slab_hi, relevant):
                continue  # part of it is unknown to us: wait for news
            if not self._checked(entry.sid, (blo, bhi), dead, live, now):
                continue
            members = sorted(ident for lo, hi, ident in dead if overlap(lo, hi, slab_lo, slab_hi))
            lo, hi = list(self.lo), list(self.hi)
            if entry.upper:
                lo[d] = blo[d]
            else:
                hi[d] = bhi[d]
            # The dead nodes' last neighbour lists tell us who borders what we take.
            for member in members:
                for info in self._their_neighbors.pop(member, ()):
                    self._learn(info, now)
            volume = self.space.volume(self.lo, self.hi)
            before = (self.lo, self.hi, self.path)
            path = tuple(e for e in self.path if e.sid != entry.sid)
            self._set_zone(lo, hi, path, "takeover", now)
            stones = [self.tombstones[m][1] for m in members if m in self.tombstones]
            self._taken.append(
                _Taken(
                    (tuple(blo), tuple(bhi)),
                    before,
                    (self.lo, self.hi, self.path),
                    min([now + self.config.tombstone_ttl_s, *stones]),
                )
            )
            self._emit(TookOver(now, members, self.space.volume(self.lo, self.hi) - volume))
            self._send_updates(now)
            self._checks.pop(entry.sid, None)
            return True
        return False

    def _give_back(self, now: float) -> None:
        """Undo our last takeover if it was wrong: a live zone we did not know of,
        inside the subtree we took from, overlaps us (that subtree's survivor
        took what we took: by the takeover rule the subtree repairs itself).
        Only on first-hand news of it (a stale summary may be of a dead node,
        and giving back then would leave a gap), and only while our zone is
        still what the takeover made it."""
        zone = (self.lo, self.hi, self.path)
        self._taken = [t for t in self._taken if now < t.until and t.after == zone]
        if not self._taken:
            return
        taken = self._taken[-1]
        blo, bhi = taken.box
        recent = now - self.config.update_interval_s
        for known in self.known.values():
            info = known.info
            if (
                known.spoke_at >= recent  # first-hand: third-party news may be of the dead
                and info.lo
                and contained(info.lo, info.hi, blo, bhi)
                and overlap(info.lo, info.hi, self.lo, self.hi)
            ):
                lo, hi, path = taken.before
                self._taken.pop()
                self._set_zone(lo, hi, path, "gave back", now)
                self._emit(Inconsistent(now, "took over a live subtree: gave it back", [info.id]))
                self._send_updates(now)
                return

    def _checked(
        self,
        sid: int,
        box: tuple[list[float], list[float]],
        dead: list[tuple[tuple[float, ...], tuple[float, ...], int]],
        live: list[PeerInfo],
        now: float,
    ) -> bool:
        """Has a look into the other subtree `box` of split `sid` found nobody alive?

        We know the dead zones of that subtree, but a live zone there that does
        not border us may be unknown to us: after a burst of crashes the dead
        nodes' last neighbour lists predate the takeovers behind them. So before
        the first takeover through a face we route lookups to points of the
        subtree (in what nobody we know holds, and in each dead zone);
        an owner answers with its state, which stops the takeover above if it
        lives in the subtree. Only after `propose_timeout_s` of silence do we
        take over; the answer is good for one update period.
        """
        deadline = self._checks.get(sid)
        if deadline is not None:
            if now < deadline:
                return False
            if now < deadline + self.config.update_interval_s:
                return True
        blo, bhi = box
        rng = self.rng
        # First what nobody we know holds (a live zone we do not know would be
        # there), the largest parts first; then a point in each dead zone (its
        # taker may be a live zone of the subtree that we do not know).
        held = [(lo, hi) for lo, hi, _ in dead] + [
            (i.lo, i.hi) for i in live if overlap(i.lo, i.hi, blo, bhi)
        ]
        points: list[tuple[float, ...]] = []
        pieces = uncovered(blo, bhi, held, limit=1000)
        if pieces is None:  # too fragmented to list: sample it
            for _ in range(8 * MAX_CHECK_LOOKUPS):
                point = tuple(rng.uniform(a, b) for a, b in zip(blo, bhi, strict=True))
                if not any(contains(lo, hi, point) for lo, hi in held):
                    points.append(point)
                    if len(points) == MAX_CHECK_LOOKUPS:
                        break
        else:
            pieces.sort(key=lambda piece: -self.space.volume(piece[0], piece[1]))
            for lo, hi in pieces[:MAX_CHECK_LOOKUPS]:
                points.append(tuple(rng.uniform(a, b) for a, b in zip(lo, hi, strict=True)))
        inside = [(lo, hi) for lo, hi, _ in dead if overlap(lo, hi, blo, bhi)]
        for lo, hi in inside[:MAX_CHECK_LOOKUPS]:
            points.append(
                tuple(
                    rng.uniform(max(a, x), min(b, y))
                    for a, b, x, y in zip(lo, hi, blo, bhi, strict=True)
                )
            )
        for point in points:
            self._route_lookup(point, now)
        self._checks[sid] = now + self.config.propose_timeout_s
        return False

    def _coverage_problem(self) -> str | None:
        """Check that the known direct neighbours tile every inner face of our zone exactly."""
        if not self.lo:
            return "no zone"
        space = self.space
        for d in range(space.n):
            for upper in (False, True):
                at = self.hi[d] if upper else self.lo[d]
                if at == (space.hi[d] if upper else space.lo[d]):
                    continue
                face_area = 1.0
                for o in range(space.n):
                    if o != d:
                        face_area *= (self.hi[o] - self.lo[o]) / space.span[o]
                covered = 0.0
                for ident in self.direct:
                    info = self.known[ident].info
                    if (info.lo[d] if upper else info.hi[d]) != at:
                        continue
                    area = 1.0
                    for o in range(space.n):
                        if o != d:
                            area *= (
                                min(self.hi[o], info.hi[o]) - max(self.lo[o], info.lo[o])
                            ) / space.span[o]
                    covered += area
                if abs(covered - face_area) > 1e-9 * face_area:
                    return "face not covered" if covered < face_area else "face over-covered"
        return None

    # -- healing: finding neighbours we should know ----------------------------------------------------

    def _heal(self, now: float) -> None:
        """If a face of our zone stays uncovered by known neighbours (or borders a
        dead region nobody absorbs) for two ticks, look up the owners of sample
        points there. Runs once per tick."""
        if self.status != Status.MEMBER or not self.lo:
            return
        problem = self._coverage_problem() == "face not covered" or self._dead_regions_nearby()
        self._unsettled_ticks = self._unsettled_ticks + 1 if problem else 0
        if self._unsettled_ticks < 2:
            return
        # Points in dead regions next to us first: when nobody absorbs one, our
        # tombstone is usually stale (a live zone we do not know covers it), and
        # the owner's answer to the lookup tells us so.
        points = self._dead_face_points(limit=2) + self._uncovered_points(limit=3)
        for point in points[:3]:
            self._route_lookup(point, now)

    def _dead_face_points(self, limit: int) -> list[tuple[float, ...]]:
        """Points just across our faces inside dead regions that border us."""
        out: list[tuple[float, ...]] = []
        for lo, hi in self._dead_pieces_next_to_us(limit):
            face = abutment(self.lo, self.hi, lo, hi)
            if face is None:
                continue
            d, we_are_below = face
            point = [
                self.rng.uniform(max(a0, b0), min(a1, b1))
                for a0, a1, b0, b1 in zip(self.lo, self.hi, lo, hi, strict=True)
            ]
            point[d] = self.hi[d] if we_are_below else math.nextafter(self.lo[d], -math.inf)
            out.append(tuple(point))
            if len(out) >= limit:
                break
        return out

    def _uncovered_points(self, limit: int) -> list[tuple[float, ...]]:
        """Points just across our faces that no known direct neighbour's zone contains."""
        out: list[tuple[float, ...]] = []
        space = self.space
        boxes = [(self.known[i].info.lo, self.known[i].info.hi) for i in sorted(self.direct)]
        for d in range(space.n):
            for upper in (False, True):
                at = self.hi[d] if upper else self.lo[d]
                if at == (space.hi[d] if upper else space.lo[d]):
                    continue
                for _ in range(8):
                    point = [self.rng.uniform(a, b) for a, b in zip(self.lo, self.hi, strict=True)]
                    point[d] = at if upper else math.nextafter(at, -math.inf)
                    if not any(contains(lo, hi, point) for lo, hi in boxes):
                        out.append(tuple(point))
                        if len(out) >= limit:
                            return out
                        break
        return out

    def _route_lookup(self, point: tuple[float, ...], now: float) -> None:
        lookup = Lookup(self.rng.getrandbits(32), point, self.info(), 0)
        hop = next_hop(self.space, self.lo, self.hi, self._neighbor_boxes(), point)
        if hop is None or hop == -1:
            if not self.known:
                return
            # No neighbour of ours is closer: start from a random node we know.
            ident = sorted(self.known)[self.rng.randrange(len(self.known))]
        else:
            ident = hop
        info = self.known[ident].info
        self._send((info.host, info.port), lookup)

    def _on_lookup(self, lookup: Lookup, now: float) -> None:
        origin = lookup.origin
        if origin.id == self.id:
            return
        hop = next_hop(self.space, self.lo, self.hi, self._neighbor_boxes(), lookup.point)
        if hop == -1:
            if self._learn(origin, now, direct=True):
                self._recompute_direct(now)
                if self._taken:
                    self._give_back(now)
            self._send((origin.host, origin.port), Update(self.info(), (), ()))
            return
        if hop is None or lookup.hops >= self.config.max_hops:
            return
        info = self.known[hop].info
        self._send(
            (info.host, info.port), Lookup(lookup.nonce, lookup.point, origin, lookup.hops + 1)
        )

    # -- introspection ---------------------------------------------------------------------------------

    def dump(self) -> dict[str, object]:
        """The state the testbed's oracle checks (JSON-ready)."""
        return {
            "id": self.id,
            "status": self.status,
            "address": list(self.address),
            "point": list(self.point),
            "lo": list(self.lo),
            "hi": list(self.hi),
            "path": [[e.sid, e.dim, e.pos, e.upper] for e in self.path],
            "instance": self.instance,
            "neighbors": [
                {"id": i, "lo": list(self.known[i].info.lo), "hi": list(self.known[i].info.hi)}
                for i in sorted(self.direct)
            ],
            "known": len(self.known),
            "tombstones": len(self.tombstones),
            "suspects": sorted(self.suspects),
            "busy": sorted(self.busy),
            "unsettled": self._neighbourhood_unsettled(0.0)
            if self.status == Status.MEMBER
            else self.status,
        }


def _within_one_stretch(
    mine: tuple[tuple[float, float], ...], lo: Sequence[float], hi: Sequence[float]
) -> bool:
    """True if box [lo, hi) overlaps our zone in all dimensions but at most one."""
    apart = 0
    for (a0, a1), b0, b1 in zip(mine, lo, hi, strict=True):
        if a1 <= b0 or b1 <= a0:
            apart += 1
            if apart > 1:
                return False
    return True
