# The CAN overlay of one peer, sans-IO: a facade over its parts.
#
# Theory of operation
#   The space is cut into boxes as a kd-tree cuts it; each live node owns one
#   leaf box (its zone) containing its own point (its capabilities plus a
#   random virtual coordinate, seed 000 §3.1.1). A zone's split list ("path",
#   seed 002 §6) is its root-to-leaf sequence of half-spaces; every split has a
#   unique id (sid) shared by the two halves it made.
#
#   The parts, each in its own module, share one LocalNode (local.py: our id,
#   point, zone, status and the injected config, rng and outputs):
#     * neighbours.py  the neighbour table: known peers, the direct set,
#                      tombstones, suspects, learn/bury, gossip and probing;
#     * conflicts.py   the conflict-detection protocol of seed 002 §6.2
#                      (Algorithms 4-9) that every SPLIT and MERGE goes through;
#     * takeover.py    absorbing dead zones, giving a wrong takeover back,
#                      face coverage and healing, lookups;
#     * join.py        joining, and splitting our zone for joiners;
#     * status.py      the membership statuses and their transition table.
#   This facade keeps the public API: the inputs (join, leave, crash_reset,
#   handle_message, handle_timer), the timer, the periodic tick, the leave,
#   and read-only views of the state that the peer, the scheduler and the
#   testbed read.
#
#   Leave: the conflict protocol commits a MERGE; the neighbours across the
#   leaver's takeover face (its last path entry) extend their zones through it
#   (the takeover rule, on the leaver's tombstone, at once: the leaver's own
#   commit tells its zone). The leaver proposes whenever its neighbourhood is
#   quiet; after `leave_attempts` refused MERGEs, or `leave_timeout_s` without
#   one committed, it leaves as if crashed, but says so.
#
# Decisions where the papers are silent (docs/can.md has the reasons):
#   * a request is rejected (Alg. 4) while our neighbourhood has suspects, busy
#     nodes, unabsorbed dead regions or a face not exactly covered by known
#     neighbours; the other decisions are in the parts' headers.
#
# Rules
#   1. Inputs never raise on peer data; bad content is reported to the peer
#      (the caller counts it as an "invalid" drop).
#   2. Randomness comes from the injected rng; time only from `now`.
#   3. Messages are validated and dispatched through tables keyed by type
#      (_VALIDATORS; then two handler tables: the first serves any status,
#      the second members only).

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from node.can.config import CanConfig
from node.can.conflicts import MAX_RANK, Command, ConflictProtocol
from node.can.geometry import Space
from node.can.join import NOT_MEMBER, JoinService
from node.can.local import Address, LocalNode
from node.can.neighbours import Known, NeighbourTable
from node.can.reunion import Reunion, check_dissolve, check_reunite
from node.can.status import Status
from node.can.takeover import Takeover
from node.events import Event, Left
from node.events import Evicted as EvictedEvent
from node.wire import (
    COMMIT_MERGE,
    COMMIT_SPLIT,
    Commit,
    Dissolve,
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
    Reunite,
    Tombstone,
    Update,
    check_peer_info,
)

__all__ = ["CanConfig", "CanOverlay", "Status"]

# A handler of one message type: (sender, addr, message, now).
_Handler = Callable[[int, Address, Any, float], None]


# What makes a message's content invalid (each returns why, or None). Neighbour
# summaries are checked in NeighbourTable.learn, only when they are news.


def _valid_update(update: Update, dims: int) -> str | None:
    return check_peer_info(update.me, dims)


def _valid_join_request(request: JoinRequest, dims: int) -> str | None:
    if not 0 <= request.attempt <= MAX_RANK:
        return "join attempt out of range"
    return check_peer_info(request.joiner, dims)


def _valid_propose(propose: Propose, dims: int) -> str | None:
    if not 0 <= propose.rank <= MAX_RANK:
        return "propose rank out of range"
    if propose.kind not in (0, COMMIT_SPLIT, COMMIT_MERGE):
        return "propose kind unknown"
    return None


def _valid_join_accept(accept: JoinAccept, dims: int) -> str | None:
    return check_peer_info(accept.you, dims)


def _valid_commit(commit: Commit, dims: int) -> str | None:
    for info in (commit.leader, commit.joiner):
        problem = None if info is None else check_peer_info(info, dims)
        if problem is not None:
            return problem
    return None


def _valid_probe_reply(reply: ProbeReply, dims: int) -> str | None:
    return None if reply.me is None else check_peer_info(reply.me, dims)


def _valid_lookup(lookup: Lookup, dims: int) -> str | None:
    if len(lookup.point) != dims or not all(math.isfinite(x) for x in lookup.point):
        return "bad lookup point"
    return check_peer_info(lookup.origin, dims)


_VALIDATORS: dict[type[Any], Callable[[Any, int], str | None]] = {
    Update: _valid_update,
    JoinRequest: _valid_join_request,
    Propose: _valid_propose,
    JoinAccept: _valid_join_accept,
    Commit: _valid_commit,
    ProbeReply: _valid_probe_reply,
    Lookup: _valid_lookup,
    Reunite: check_reunite,
    Dissolve: check_dissolve,
}


class _Hooks:
    """What the conflict protocol's commands do to the rest of the overlay."""

    def __init__(self, overlay: CanOverlay) -> None:
        self._overlay = overlay

    def joiner_pending(self) -> bool:
        return bool(self._overlay._join.pending_accept)

    def execute_split(self, command: Command, now: float) -> Commit:
        return self._overlay._join.execute_split(command, now)

    def split_lost(self, command: Command, now: float) -> None:
        self._overlay._join.requeue(command, now)

    def merge_lost(self, now: float) -> None:
        self._overlay._merge_lost(now)

    def merged(self, now: float) -> None:
        self._overlay._finish_leave(now, graceful=True)

    def introduce(self, leader: PeerInfo, joiner: PeerInfo, now: float) -> None:
        self._overlay._join.introduce(leader, joiner, now)


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
        dress_update: Callable[[Update, float], Message] | None = None,
    ) -> None:
        """`dress_update(update, now)`: what our periodic updates go out as (the peer
        adds what rides on them); None: the updates themselves."""
        if not config.space.contains_point(point):
            raise ValueError(f"point {tuple(point)} is outside the CAN space")
        self._local = LocalNode(config, address, tuple(float(x) for x in point), rng, send, emit)
        self._local.dress = dress_update
        self._hooks = _Hooks(self)
        self._reset_membership()
        # Messages served whatever our status; then, for members only, the rest.
        self._any_status: dict[type[Any], _Handler] = {
            Probe: lambda sender, addr, m, now: self._on_probe(addr, m),
            JoinAccept: lambda sender, addr, m, now: self._join.on_join_accept(addr, m, now),
            JoinRetry: lambda sender, addr, m, now: self._join.on_join_retry(addr, m, now),
            Evicted: lambda sender, addr, m, now: self._on_evicted(sender, addr, m, now),
            Reunite: lambda sender, addr, m, now: self._reunion.on_reunite(addr, m, now),
        }
        self._members_only: dict[type[Any], _Handler] = {
            Update: lambda sender, addr, m, now: self._on_update(sender, m, now),
            JoinRequest: lambda sender, addr, m, now: self._join.on_join_request(m, now),
            JoinAck: lambda sender, addr, m, now: self._join.on_join_ack(m),
            Propose: lambda sender, addr, m, now: self._conflicts.on_propose(sender, addr, m, now),
            ProposeOK: lambda sender, addr, m, now: self._conflicts.on_propose_ok(sender, m, now),
            Commit: lambda sender, addr, m, now: self._conflicts.on_commit(sender, m, now),
            ProbeReply: lambda sender, addr, m, now: self._on_probe_reply(sender, m, now),
            Lookup: lambda sender, addr, m, now: self._takeover.on_lookup(m, now),
            Dissolve: lambda sender, addr, m, now: self._reunion.on_dissolve(m, now),
        }

    def _reset_membership(self) -> None:
        """Forget our zone and everything the parts hold (not our id or status)."""
        local = self._local
        local.reset_zone()
        self._table = NeighbourTable(local)
        self._takeover = Takeover(local, self._table)
        self._conflicts = ConflictProtocol(local, self._table, self._takeover, self._hooks)
        self._join = JoinService(local, self._table, self._takeover, self._conflicts)
        self._table.on_bury = self._conflicts.forget
        self._table.on_newer = self._conflicts.newer
        self._reunion = Reunion(
            local, self._table, self._rejoin, self._takeover.dead_regions_nearby
        )
        self._table.on_silent = self._reunion.remember
        self._table.root_word = self._reunion.word
        self._leave_attempts = 0
        self._leave_retry_at = math.inf
        self._leave_until = math.inf

    # -- read-only views (the peer, the scheduler, the testbed and the tests read these) ------------

    @property
    def config(self) -> CanConfig:
        return self._local.config

    @property
    def space(self) -> Space:
        return self._local.space

    @property
    def address(self) -> Address:
        return self._local.address

    @property
    def point(self) -> tuple[float, ...]:
        return self._local.point

    @property
    def rng(self) -> random.Random:
        return self._local.rng

    @property
    def status(self) -> Status:
        return self._local.status

    @property
    def id(self) -> int:
        return self._local.id

    @property
    def lo(self) -> tuple[float, ...]:
        return self._local.lo

    @property
    def hi(self) -> tuple[float, ...]:
        return self._local.hi

    @property
    def path(self) -> tuple[PathEntry, ...]:
        return self._local.path

    @property
    def instance(self) -> int:
        return self._local.instance

    @instance.setter
    def instance(self, value: int) -> None:
        self._local.instance = value

    @property
    def known(self) -> dict[int, Known]:
        return self._table.known

    @property
    def direct(self) -> set[int]:
        return self._table.direct

    @property
    def tombstones(self) -> dict[int, tuple[Tombstone, float]]:
        return self._table.tombstones

    @property
    def suspects(self) -> dict[int, tuple[int, float]]:
        return self._table.suspects

    @property
    def busy(self) -> dict[int, tuple[int, float, tuple[int, int], int]]:
        return self._conflicts.busy

    @property
    def command(self) -> Command | None:
        return self._conflicts.command

    @property
    def invalid_news(self) -> int:
        return self._table.invalid_news

    @property
    def neighbours(self) -> NeighbourTable:
        """The neighbour table (replaced when the membership is reset)."""
        return self._table

    @property
    def conflicts(self) -> ConflictProtocol:
        return self._conflicts

    @property
    def takeover(self) -> Takeover:
        return self._takeover

    @property
    def joins(self) -> JoinService:
        return self._join

    def info(self) -> PeerInfo:
        return self._local.info()

    # -- inputs: commands ----------------------------------------------------------------------------

    def join(self, bootstraps: Sequence[Address], now: float) -> None:
        """Start joining through any of `bootstraps`; with none, start a new overlay.

        While already joining, a new list replaces the old one and the next
        attempt starts at once (for a joiner whose bootstraps all went away).
        Mutates; follow with the outputs (datagrams, events, timer).

        Raises:
            RuntimeError: already a member, leaving, or joining with no
                bootstraps given (nothing is changed).
        """
        local = self._local
        address = local.address
        if local.status == Status.JOINING and bootstraps:
            self._join.bootstraps = [(b[0], b[1]) for b in bootstraps if tuple(b) != address]
            if self._join.bootstraps:
                self._join.try_join(now)
                return
        if local.status in (Status.MEMBER, Status.JOINING, Status.LEAVING):
            raise RuntimeError(f"join() while {local.status}")
        self._reset_membership()
        self._join.bootstraps = [(b[0], b[1]) for b in bootstraps if tuple(b) != address]
        local.set_status(Status.JOINING)
        if not self._join.bootstraps:
            local.id = local.new_id()
            space = local.space
            self._join.become_member(space.lo, space.hi, (), 1, [], now, first=True)
            self._reunion.found(now)
            return
        self._join.attempts = self._join.holes = 0
        self._join.try_join(now)

    def leave(self, now: float) -> None:
        """Leave gracefully: negotiate a MERGE, retrying a few times, else leave abruptly."""
        local = self._local
        if local.status in (Status.IDLE, Status.JOINING):
            # Not a member yet: nothing to hand over. (An owner that already split for
            # us sees the half it gave away go silent and takes it back, as after a crash.)
            self._join.deadline = self._join.retry_at = math.inf
            self._finish_leave(now, graceful=True)
            return
        if local.status != Status.MEMBER:
            return
        local.set_status(Status.LEAVING)
        self._leave_attempts = 0
        self._leave_until = now + local.config.leave_timeout_s
        self._try_leave(now)

    def _try_leave(self, now: float) -> None:
        local, table = self._local, self._table
        config = local.config
        self._leave_retry_at = math.inf
        if not table.known:
            self._finish_leave(now, graceful=True)
            return
        if self._leave_attempts >= config.leave_attempts or now >= self._leave_until:
            # Conflict detection never let us through: leave as if crashed, but
            # say so, so that the neighbours bury us and repair now instead of
            # after suspecting and probing us (a MERGE commit is that notice).
            local.instance += 1
            notice = Commit(local.instance, COMMIT_MERGE, local.info(), None, table.infos())
            for addr in table.addresses():
                local.send(addr, notice)
            self._finish_leave(now, graceful=False)
            return
        self._leave_attempts += 1
        if not self._conflicts.request(COMMIT_MERGE, now, rank=self._leave_attempts):
            # Not quiet around us (Alg. 4): no MERGE was proposed, so no attempt is
            # spent; look again soon. (Counting these, at 1,000 peers with steady churn
            # a leave spent its attempts in backing off and ended abruptly.)
            self._leave_attempts -= 1
            wait = local.rng.uniform(config.retry_min_s, 2 * config.retry_min_s)
            self._leave_retry_at = now + wait

    def _merge_lost(self, now: float) -> None:
        """A MERGE refused: try again soon. Not the joins' doubling back-off: the
        refusals are the busy windows of the commands around us (a round trip or
        two each), and a leaver that waited longer and longer lost every window to
        them (at 1,000 peers with steady churn, 3 of 282 leaves after 8 attempts)."""
        local = self._local
        if local.status == Status.LEAVING:
            config = local.config
            cap = min(config.retry_max_s, 4 * config.retry_min_s)
            self._leave_retry_at = now + local.rng.uniform(config.retry_min_s, cap)

    def _finish_leave(self, now: float, *, graceful: bool) -> None:
        local = self._local
        local.set_status(Status.LEFT)
        self._table.next_update = math.inf
        self._conflicts.deferred.clear()
        self._serve_waiting(now)  # queued joiners: retry elsewhere
        local.emit(Left(now, local.id, graceful, self._leave_attempts))

    def crash_reset(self) -> None:
        """Forget everything (the process died); used by engines that reuse the object."""
        self._local.set_status(Status.IDLE)
        self._reset_membership()

    # -- inputs: time --------------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        if self._local.status in (Status.IDLE, Status.LEFT):
            return None
        table = self._table
        earliest = min(
            table.next_update,
            self._leave_retry_at,
            self._join.next_deadline(),
            self._conflicts.next_deadline(),
            self._takeover.next_deadline() if self._takeover.checks else math.inf,
        )
        for _, deadline in table.suspects.values():
            earliest = min(earliest, deadline)
        return None if earliest == math.inf else earliest

    def handle_timer(self, now: float) -> None:
        """Run whatever is due at `now`. Early or repeated calls do nothing wrong."""
        self._handle_timer(now)
        if self._local.in_overlay():
            self._serve_waiting(now)

    def _handle_timer(self, now: float) -> None:
        local = self._local
        if local.status == Status.JOINING:
            self._join.handle_timer(now)
            return
        if not local.in_overlay():
            return
        self._conflicts.handle_timer(now)
        if local.status == Status.LEAVING and now >= self._leave_retry_at:
            self._try_leave(now)
            if not local.in_overlay():  # it left
                return
        self._join.resend_accepts(now)
        expired = self._table.bury_unanswered(now)
        takeover = self._takeover
        if expired or takeover.checks_due(now):
            takeover.checks_run = now
            takeover.repair(now)
        if now >= self._table.next_update:
            self._tick(now)

    def _tick(self, now: float) -> None:
        local, table = self._local, self._table
        table.next_update = now + local.config.update_interval_s * local.rng.uniform(0.9, 1.1)
        table.probe_quiet(now)  # failure detection
        self._reunion.tick(now)  # the root's heartbeat, remembered peers asked
        # Expiry of soft state.
        self._join.expire(now)
        self._conflicts.expire(now)
        self._takeover.expire(now)
        table.expire(now)
        self._takeover.heal(now)
        self._takeover.repair(now)
        table.send_updates(now)

    def _serve_waiting(self, now: float) -> None:
        """Answer held-back proposals and start queued joins that the neighbourhood now allows."""
        self._conflicts.serve_deferred(now)
        self._join.serve_queue(now)

    # -- inputs: messages --------------------------------------------------------------------------------

    def handle_message(
        self, sender: int, addr: Address, message: Message, now: float
    ) -> str | None:
        """Process one decoded message. Returns None, or why its content was invalid
        (the caller counts an "invalid" drop). Never raises on peer data."""
        problem = self._handle_message(sender, addr, message, now)
        if self._local.in_overlay():
            self._serve_waiting(now)
        return problem

    def _handle_message(
        self, sender: int, addr: Address, message: Message, now: float
    ) -> str | None:
        problem = self._validate(sender, message)
        if problem is not None:
            return problem
        handler = self._any_status.get(type(message))
        if handler is not None:
            handler(sender, addr, message, now)
            return None
        if not self._local.in_overlay():
            if type(message) is JoinRequest:
                # Sent to us while we are out (rejoining, say). Answered at its source only
                # (never at an address a payload names): a joiner that chose us as its
                # bootstrap tries another now, a member that routed it buries us.
                joiner = message.joiner
                if (joiner.host, joiner.port) == tuple(addr):
                    self._local.send(addr, JoinRetry(message.req, NOT_MEMBER))
                else:
                    self._local.send(addr, ProbeReply(0, None))
            return None
        table = self._table
        known = table.known.get(sender)
        if known is not None:
            known.direct_at = known.spoke_at = now  # any datagram is a sign of life
        if sender in table.tombstones and not isinstance(message, JoinRequest):
            # seed 002 §6.1: news from a node we buried is stale; tell it.
            self._local.send(
                addr, Evicted(table.tombstones[sender][0].instance, self._reunion.word())
            )
            return None
        handler = self._members_only.get(type(message))
        if handler is not None:
            handler(sender, addr, message, now)
        return None

    def _validate(self, sender: int, message: Message) -> str | None:
        if type(message) is Update and self._table.seen_before(sender, message):
            return None  # the same as one we validated and took
        validator = _VALIDATORS.get(type(message))
        return None if validator is None else validator(message, self._local.space.n)

    def _on_probe(self, addr: Address, probe: Probe) -> None:
        local = self._local
        local.send(addr, ProbeReply(probe.nonce, local.info() if local.in_overlay() else None))

    def _on_update(self, sender: int, update: Update, now: float) -> None:
        table, takeover = self._table, self._takeover
        root = update.root
        update = table.taken(sender, update)  # a repeat: the one we validated and took
        me = update.me
        if me.id != sender or not me.lo:
            return
        if root is not None:
            if self._reunion.meet(root, me, now):
                return  # a member of another overlay: the overlays merge instead
            self._reunion.on_root(root, now)
        learned = table.take_summaries(sender, update, now)
        # Beyond news of peers, a burial needs a full recomputation of the direct set.
        changed = table.take_tombstones(update.tombstones, now)
        if changed is None:
            self._on_evicted(sender, (me.host, me.port), Evicted(0), now)
            return
        if changed:
            table.recompute_direct(now)
        elif learned:
            table.refresh_direct(learned, now)
        elif sender not in table.direct:
            # News of it we took elsewhere (a lookup's answer, say) and never checked
            # against our zone: a neighbour we would never list, nor cover our face with.
            table.refresh_direct([sender], now)
        if takeover.taken:
            takeover.give_back(now, [me])
        if changed or learned:
            takeover.repair(now)
        if update.neighbors and sender not in table.direct and self._local.lo:
            # It thinks we are neighbours, we do not: one of us has stale news.
            # Answer with our state (and no summaries, so this is never answered).
            self._local.send((me.host, me.port), Update(self._local.info(), (), ()))

    def _say_out(self) -> None:
        """We leave the overlay without a MERGE (evicted, or our overlay dissolves): our
        direct neighbours bury us at once (the answer to a probe from a peer out of the
        overlay) instead of routing to us until they find us silent."""
        for addr in self._table.addresses():
            self._local.send(addr, ProbeReply(0, None))

    def _on_probe_reply(self, sender: int, reply: ProbeReply, now: float) -> None:
        if self._table.take_probe_reply(sender, reply, now):
            self._takeover.repair(now)

    def _rejoin(self, bootstraps: Sequence[Address], now: float, wait_s: float) -> None:
        """Our overlay dissolves into another (reunion.py): join it as a new node, after
        `wait_s` (the first attempt is a retry due then)."""
        local = self._local
        self._say_out()
        local.set_status(Status.IDLE)
        contacts = [(b[0], b[1]) for b in bootstraps if tuple(b) != local.address]
        if wait_s <= 0 or not contacts:
            self.join(contacts, now)
            return
        self._reset_membership()
        self._join.bootstraps = contacts
        local.set_status(Status.JOINING)
        self._join.attempts = self._join.holes = 0
        self._join.retry_at = now + wait_s  # the first attempt, as a retry due then

    def _on_evicted(self, sender: int, addr: Address, message: Evicted, now: float) -> None:
        local = self._local
        if not local.in_overlay():
            return
        if self._reunion.another_overlay(message.root, addr, now):
            return  # not our overlay's verdict: the two overlays meet instead
        local.emit(EvictedEvent(now, local.id, sender))
        self._say_out()
        known = self._table.known.values()
        # The evicter is a member for sure; of the peers we know, many may not be.
        bootstraps = [addr, *((k.info.host, k.info.port) for k in known)]
        local.set_status(Status.IDLE)
        self.join(bootstraps, now)

    # -- introspection ---------------------------------------------------------------------------------

    def dump(self) -> dict[str, object]:
        """The state the testbed's oracle checks (JSON-ready)."""
        local, table = self._local, self._table
        return {
            "id": local.id,
            "status": local.status,
            "address": list(local.address),
            "point": list(local.point),
            "lo": list(local.lo),
            "hi": list(local.hi),
            "path": [[e.sid, e.dim, e.pos, e.upper] for e in local.path],
            "instance": local.instance,
            "neighbors": [
                {"id": i, "lo": list(table.known[i].info.lo), "hi": list(table.known[i].info.hi)}
                for i in sorted(table.direct)
            ],
            "known": len(table.known),
            "tombstones": len(table.tombstones),
            "suspects": sorted(table.suspects),
            "root": None
            if (root := self._reunion.root) is None
            else [root.epoch, root.id, root.seq],
            "busy": sorted(self._conflicts.busy),
            "unsettled": self._conflicts.unsettled(0.0)
            if local.status == Status.MEMBER
            else local.status,
        }
