# The join service: joining the overlay, and splitting our zone for joiners.
#
# Theory of operation
#   Join: a JoinRequest is routed greedily to the owner of the joiner's point,
#   which splits its zone in two (choose_split) after the conflict-detection
#   protocol of seed 002 §6.2 (Algorithms 4-9, conflicts.py) has found its
#   neighbourhood quiet; otherwise the joiner retries from scratch after a
#   random delay (uniform in [retry_min_s, cap], the cap doubling with each
#   attempt up to retry_max_s).
#
#   The owner side: while its neighbourhood is busy, a request waits in a
#   bounded queue (up to half the joiner's timeout) instead of sending the
#   joiner into back-off; after a conflict it is tried again here with a
#   higher rank. The JoinAccept (the joiner's half and what we know, as
#   summaries) is resent until the joiner acknowledges it; a joiner that
#   never takes it is buried and its half taken back (reclaim). A joiner
#   that we split for while a neighbour split for another is introduced to
#   it (introduce), as the two may border each other without knowing.
#
# Decisions where the papers are silent (docs/can.md has the reasons):
#   * a node gets a new random id for every membership attempt;
#   * an accept for an earlier attempt that we had given up on is taken all
#     the same (its owner split for it); one we cannot take is declined, so
#     that the owner takes the half back at once.
#
# Rules
#   1. Every table here has a named bound (MAX_QUEUED_JOINS, the 8 recent
#      attempts, MAX_ACCEPT_NEIGHBOURS).
#   2. A joiner is always told to retry elsewhere rather than left waiting
#      past the time it gave us (`serve_by`).

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from node.can.conflicts import Command, ConflictProtocol, requeued
from node.can.geometry import adjacent, choose_split, contains, next_hop
from node.can.local import Address, LocalNode
from node.can.neighbours import Known, NeighbourTable
from node.can.status import Status
from node.can.takeover import Takeover
from node.events import Joined, JoinRetrying
from node.wire import (
    COMMIT_NOOP,
    COMMIT_SPLIT,
    Commit,
    JoinAccept,
    JoinAck,
    JoinRequest,
    JoinRetry,
    Lookup,
    PathEntry,
    PeerInfo,
)

__all__ = ["MAX_ACCEPT_NEIGHBOURS", "MAX_QUEUED_JOINS", "NO_ROUTE", "NOT_MEMBER", "JoinService"]

# Join requests an owner keeps while its neighbourhood is busy.
MAX_QUEUED_JOINS = 16
# Neighbours listed in a JoinAccept (about 0.3-1 KB each).
MAX_ACCEPT_NEIGHBOURS = 48
# Our recent join requests remembered (an accept for one of them is still taken).
MAX_ATTEMPTS = 8
# The reason a peer out of the overlay gives a join routed to it.
NOT_MEMBER = "not a member"
# The reason a member that knows no way on towards the joiner's point gives.
NO_ROUTE = "no route"
# Back-off after "no route" from the middle of the overlay: a hole on the way (a
# dead zone being absorbed), not a busy neighbourhood; its cap doubles only this
# many times (at most 4 retry_min_s) and the attempt does not count.
MAX_HOLE_DOUBLINGS = 2


@dataclass
class _QueuedJoin:
    """A JoinRequest for our zone, kept until the neighbourhood lets us split for it."""

    request: JoinRequest
    serve_by: float  # start the SPLIT before this, or tell the joiner to retry
    not_before: float = -math.inf


class JoinService:
    """The joiner's attempts and the owner's queue, splits and accepts."""

    def __init__(
        self,
        local: LocalNode,
        table: NeighbourTable,
        takeover: Takeover,
        conflicts: ConflictProtocol,
    ) -> None:
        self.local = local
        self.table = table
        self.takeover = takeover
        self.conflicts = conflicts
        # the joiner's side
        self.bootstraps: list[Address] = []
        # Bootstraps through which an attempt timed out: tried again only once every
        # other one has (after a partition or a merge, many we know are not members).
        self.failed: set[Address] = set()
        self._via: Address | None = None
        self.attempts = 0  # attempts of this join (ranks its requests)
        self.holes = 0  # "no route" answers in a row from the middle of the overlay
        self._join_req = 0
        self._requests: dict[int, int] = {}  # our recent join requests: req -> the id it used
        self.deadline = math.inf  # no answer by then: retry later
        self.retry_at = math.inf
        # the owner's side
        self.pending_accept: dict[int, tuple[Address, JoinAccept, float, int]] = {}
        self._queue: list[_QueuedJoin] = []
        self._recent_joiners: dict[int, float] = {}  # id -> when we split for it

    # -- timers ----------------------------------------------------------------------------------------

    def next_deadline(self) -> float:
        """The earliest of the join service's deadlines (inf: none)."""
        earliest = min(self.deadline, self.retry_at)
        for _, _, at, _ in self.pending_accept.values():
            earliest = min(earliest, at)
        for queued in self._queue:
            earliest = min(earliest, queued.serve_by)
            if queued.not_before > -math.inf:
                earliest = min(earliest, queued.not_before)
        return earliest

    def handle_timer(self, now: float) -> None:
        """The joiner's timers: retry after the back-off, or back off after a timeout."""
        if now >= self.retry_at:
            self.try_join(now)
        elif now >= self.deadline:
            if self._via is not None:
                self.failed.add(self._via)
            self.retry_later(now, "timeout")

    def resend_accepts(self, now: float) -> None:
        """Send unacknowledged accepts again; reclaim the half of a joiner that never answers."""
        for req, (addr, accept, at, tries) in list(self.pending_accept.items()):
            if now >= at:
                if tries >= 4:
                    self._reclaim(req, now, "never took our accept")
                else:
                    self.local.send(addr, accept)
                    again = now + self.local.config.update_interval_s / 2
                    self.pending_accept[req] = (addr, accept, again, tries + 1)

    def expire(self, now: float) -> None:
        horizon = now - 2 * self.local.config.update_interval_s
        for ident in [i for i, at in self._recent_joiners.items() if at < horizon]:
            del self._recent_joiners[ident]

    # -- the joiner ------------------------------------------------------------------------------------

    def try_join(self, now: float) -> None:
        """Send a JoinRequest, under a new id, through a random bootstrap."""
        local = self.local
        local.id = local.new_id()
        self._join_req = local.rng.getrandbits(32)
        self._requests[self._join_req] = local.id
        if len(self._requests) > MAX_ATTEMPTS:
            del self._requests[next(iter(self._requests))]
        self.attempts += 1
        self.retry_at = math.inf
        choices = [b for b in self.bootstraps if b not in self.failed]
        if not choices:
            self.failed.clear()
            choices = self.bootstraps
        bootstrap = self._via = choices[local.rng.randrange(len(choices))]
        joiner = PeerInfo(local.id, local.address[0], local.address[1], 0, local.point, (), (), ())
        local.send(bootstrap, JoinRequest(self._join_req, joiner, 0, self.attempts))
        self.deadline = now + local.config.join_timeout_s

    def retry_later(self, now: float, reason: str, attempt: int | None = None) -> None:
        self.deadline = math.inf
        delay = self.backoff(self.attempts if attempt is None else attempt)
        self.retry_at = now + delay
        self.local.emit(JoinRetrying(now, reason, self.attempts, delay))

    def backoff(self, attempt: int) -> float:
        config = self.local.config
        cap = min(config.retry_max_s, config.retry_min_s * 2 ** max(0, attempt - 1))
        return self.local.rng.uniform(config.retry_min_s, max(config.retry_min_s, cap))

    def become_member(
        self,
        lo: Sequence[float],
        hi: Sequence[float],
        path: Iterable[PathEntry],
        instance: int,
        neighbors: Iterable[PeerInfo],
        now: float,
        *,
        first: bool = False,
    ) -> None:
        local, table = self.local, self.table
        local.lo, local.hi, local.path, local.instance = tuple(lo), tuple(hi), tuple(path), instance
        local.set_status(Status.MEMBER)
        self.deadline = math.inf
        self.retry_at = math.inf
        for info in neighbors:
            table.learn(info, now, direct=True)
        table.recompute_direct(now)
        table.next_update = now + local.config.update_interval_s * local.rng.uniform(0.5, 1.0)
        local.emit(Joined(now, local.id, local.lo, local.hi, self.attempts, first))
        table.send_updates(now)

    def on_join_accept(self, addr: Address, accept: JoinAccept, now: float) -> None:
        """Take a zone split for us, also one answering an earlier attempt that
        we had given up on (its owner split for it all the same). Decline any
        we cannot take, so that the owner takes the half back at once instead
        of after failure detection (see _reclaim)."""
        local = self.local
        you = accept.you
        if local.in_overlay() and accept.req == self._join_req:
            if you.id == local.id:
                local.send(addr, JoinAck(accept.req))  # our ack was lost; the splitter resends
            return
        if (
            local.status != Status.JOINING
            or self._requests.get(accept.req) != you.id
            or not you.lo
            or not contains(you.lo, you.hi, local.point)
        ):
            local.send(addr, JoinRetry(accept.req, "declined"))
            return
        local.id, self._join_req = you.id, accept.req
        local.send(addr, JoinAck(accept.req))
        neighbors = [self.table.expand(summary, you.path) for summary in accept.neighbors]
        self.become_member(
            you.lo, you.hi, you.path, you.instance, [n for n in neighbors if n is not None], now
        )

    def on_join_retry(self, addr: Address, retry: JoinRetry, now: float) -> None:
        """A joiner told to retry (our request), or a joiner declining our accept."""
        if self.local.status == Status.JOINING and retry.req == self._join_req:
            if retry.reason in (NOT_MEMBER, NO_ROUTE) and addr == self._via:
                # A bootstrap out of the overlay, or in a part of it that cannot route
                # (after a partition, a merge): no reason to back off; the next one now.
                self.failed.add(addr)
                self.attempts -= 1
            elif retry.reason == NO_ROUTE:
                # A hole on the way: the dead zone of a crash, or of the other side of a
                # healed partition, that its neighbours absorb within seconds. Backing off
                # as from a busy neighbourhood left a peer rejoining after an overlay
                # merge waiting 14 s past the repair (campaign-sim faults seed 5).
                self.attempts -= 1
                self.holes += 1
                self.retry_later(now, retry.reason, min(self.holes, MAX_HOLE_DOUBLINGS + 1))
                return
            self.holes = 0
            self.retry_later(now, retry.reason)
        elif retry.req in self.pending_accept and self.local.in_overlay():
            self._reclaim(retry.req, now, "declined our accept")

    def on_join_ack(self, ack: JoinAck) -> None:
        self.pending_accept.pop(ack.req, None)

    # -- the owner -------------------------------------------------------------------------------------

    def on_join_request(
        self, request: JoinRequest, now: float, serve_by: float | None = None
    ) -> None:
        """Route a join towards its point; in our zone, split for it.

        When the neighbourhood is busy, the request waits here (up to half the
        joiner's timeout; `serve_by`) instead of sending the joiner into
        back-off: it is served as soon as the neighbourhood settles, and after
        a conflict it is tried again here with a higher rank.
        """
        local = self.local
        joiner = request.joiner
        reply_to = (joiner.host, joiner.port)
        if not local.space.contains_point(joiner.point):
            local.send(reply_to, JoinRetry(request.req, "point outside the space"))
            return
        hop = next_hop(local.space, local.lo, local.hi, self.table.boxes(), joiner.point)
        if hop == -1:
            if serve_by is None:
                serve_by = now + local.config.join_timeout_s / 2
            self._serve(request, serve_by, now)
            return
        if hop is None or request.hops >= local.config.max_hops:
            local.send(reply_to, JoinRetry(request.req, NO_ROUTE))
            return
        target = self.table.known[hop].info
        local.send(
            (target.host, target.port),
            JoinRequest(request.req, joiner, request.hops + 1, request.attempt),
        )

    def _serve(self, request: JoinRequest, serve_by: float, now: float) -> None:
        """A join for our zone: split for it now, queue it, or tell the joiner why not."""
        local = self.local
        joiner = request.joiner
        reply_to = (joiner.host, joiner.port)
        command = self.conflicts.command
        if local.status == Status.LEAVING:
            local.send(reply_to, JoinRetry(request.req, "owner leaving"))
        elif joiner.id == local.id or (
            choose_split(local.space, local.lo, local.hi, local.path, local.point, joiner.point)
            is None
        ):
            local.send(reply_to, JoinRetry(request.req, "same id or point as the owner"))
        elif any(q.request.req == request.req for q in self._queue) or (
            command is not None
            and command.request is not None
            and command.request.req == request.req
        ):
            pass  # a copy of one we hold already
        elif self.conflicts.unsettled(now, COMMIT_SPLIT) is not None:
            self._queue_join(request, serve_by, now)
        else:
            self.conflicts.request(
                COMMIT_SPLIT, now, rank=request.attempt, request=request, serve_by=serve_by
            )

    def _queue_join(
        self, request: JoinRequest, serve_by: float, now: float, not_before: float = -math.inf
    ) -> None:
        if now >= serve_by or len(self._queue) >= MAX_QUEUED_JOINS:
            self.local.send(
                (request.joiner.host, request.joiner.port),
                JoinRetry(request.req, "neighbourhood busy"),
            )
            return
        self._queue.append(_QueuedJoin(request, serve_by, not_before))

    def requeue(self, command: Command, now: float) -> None:
        """A SPLIT lost to a crossing command: try again here, ranked higher, after a pause."""
        request = requeued(command)
        pause = self.local.rng.uniform(0, self.local.config.retry_min_s)
        self._queue_join(request, command.serve_by, now, now + pause)

    def serve_queue(self, now: float) -> None:
        """Start the queued joins that the neighbourhood now allows (highest attempt first)."""
        if not self._queue:
            return
        waiting, self._queue = self._queue, []
        if self.local.status != Status.MEMBER:
            for queued in waiting:
                joiner = queued.request.joiner
                self.local.send(
                    (joiner.host, joiner.port), JoinRetry(queued.request.req, "owner leaving")
                )
            return
        waiting.sort(key=lambda q: (-q.request.attempt, q.serve_by))
        for queued in waiting:
            if now >= queued.serve_by:
                self._queue_join(queued.request, queued.serve_by, now)  # says retry
            elif queued.not_before > now:
                self._queue.append(queued)
            elif self.conflicts.unsettled(now, COMMIT_SPLIT) is None:
                self.on_join_request(queued.request, now, queued.serve_by)
            else:
                queued.not_before = -math.inf
                self._queue.append(queued)

    def _reclaim(self, req: int, now: float, reason: str) -> None:
        """The joiner we split for will never own its half: bury it, and our
        repair takes the half back (we are its sibling)."""
        _, accept, _, _ = self.pending_accept.pop(req)
        known = self.table.known.get(accept.you.id)
        self.table.bury(known.info if known is not None else accept.you, now, reason)
        self.table.recompute_direct(now)
        if accept.you.path:  # nobody but the joiner could be there: no need to look
            self.takeover.checks[accept.you.path[-1].sid] = now
        self.takeover.repair(now)

    def execute_split(self, command: Command, now: float) -> Commit:
        """Split our zone for the command's joiner and send it its half (JoinAccept)."""
        local, table = self.local, self.table
        if command.request is None:
            raise ValueError("execute_split() needs a SPLIT command that serves a join")
        joiner, req = command.request.joiner, command.request.req
        joiner_addr = (joiner.host, joiner.port)
        choice = choose_split(
            local.space, local.lo, local.hi, local.path, local.point, joiner.point
        )
        if choice is None or not contains(local.lo, local.hi, joiner.point):
            # Our zone changed while we negotiated (a takeover); the joiner retries.
            local.send(joiner_addr, JoinRetry(req, "zone changed"))
            return Commit(command.instance, COMMIT_NOOP, None, None, ())
        dim, pos = choice
        sid = local.split_id()
        mine_upper = local.point[dim] >= pos
        lo, hi = list(local.lo), list(local.hi)
        jlo, jhi = list(local.lo), list(local.hi)
        if mine_upper:
            lo[dim], jhi[dim] = pos, pos
        else:
            hi[dim], jlo[dim] = pos, pos
        joiner_path = (*local.path, PathEntry(sid, dim, pos, not mine_upper))
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
        table.set_zone(lo, hi, (*local.path, PathEntry(sid, dim, pos, mine_upper)), "split", now)
        # It asked us itself.
        table.known[joiner.id] = Known(new_joiner, now, now, now)
        table.changed()  # rule 2 of neighbours.py: `known` changed
        self._recent_joiners[joiner.id] = now
        table.recompute_direct(now)
        # What we know, as summaries against the joiner's path, those next to
        # its zone first: a large neighbourhood would not fit in one datagram.
        others = sorted(
            (k.info for i, k in table.known.items() if i != joiner.id),
            key=lambda info: (not adjacent(info.lo, info.hi, jlo, jhi), info.id),
        )
        neighbors = tuple(
            table.summary(info, joiner_path)
            for info in [local.info(), *others][:MAX_ACCEPT_NEIGHBOURS]
        )
        accept = JoinAccept(req, new_joiner, neighbors)
        local.send(joiner_addr, accept)
        self.pending_accept[req] = (
            joiner_addr,
            accept,
            now + local.config.update_interval_s / 2,
            1,
        )
        return Commit(command.instance, COMMIT_SPLIT, local.info(), new_joiner, ())

    def introduce(self, leader: PeerInfo, joiner: PeerInfo, now: float) -> None:
        """Introduce our recent joiners to a neighbour's new joiner that borders them.

        SPLITs run concurrently, so a joiner we split for may have got its
        neighbour list before this other split happened; its owner did not know
        ours. Until updates and lookups close the gap, the two zones would be
        linked only through their owners, and two adjacent crashes could cut
        them apart for good. A Lookup for the joiner's point, with our joiner as
        origin, makes each learn the other (see Takeover.on_lookup).
        """
        local, known = self.local, self.table.known
        horizon = now - 2 * local.config.update_interval_s
        for ident, at in list(self._recent_joiners.items()):
            if at < horizon or ident not in known:
                del self._recent_joiners[ident]
                continue
            ours = known[ident].info
            if ident != joiner.id and adjacent(ours.lo, ours.hi, joiner.lo, joiner.hi):
                lookup = Lookup(local.rng.getrandbits(32), joiner.point, ours, 0)
                local.send((leader.host, leader.port), lookup)
