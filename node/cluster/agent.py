# Dynamic clusters, distributed (seed 002 §5.1.4): every peer is a head that
# forms a cluster and a client that joins other heads' clusters. Sans-IO like
# the overlay: inputs take `now`, datagrams go out through `send`, RTT
# measurements through `measure` (the peer's prober), and get_timer() says
# when handle_timer() is due. node/cluster/refine.py is the serialized
# reference of the same steps.
#
# Theory of operation
#   Head: IDLE -> COLLECT when the first approximation (its candidate cluster,
#   from DTM's prediction tree) is given; every change of it restarts the
#   stability timer (`stable_s`, the thesis's 30 s). Then SOLICIT: a Solicit to
#   every candidate; ACCEPT and DENY answers are counted (DEFER and silence:
#   solicited again every `retry_s`, silence `retries` times counts as DENY),
#   and the greedy criterion's figures (ceiling, accepted) go to every client
#   not denied whenever they change. Once all have answered, FILTER: the
#   unfiltered cluster (the head and those who accepted) gets a Roster; every
#   member measures its RTT to every other and reports (RttReport); the head
#   measures too. With all reports in (or after `report_timeout_s`) the head
#   keeps the largest clique of members within D of each other that contains
#   itself (an exact maximum clique), sends Confirm to its members and Release
#   to the others, and is STEADY. A STEADY head that lost members, or whose
#   candidates changed while it was busy, starts over if its cluster is not
#   full.
#
#   Client: WAIT collects solicitations; each new one restarts `wait_s` and
#   the suitors are ranked by the criterion (FCFS, a consistent hash, or
#   greedy) and cut to the free places: M memberships, the peer's own cluster
#   taking one, committed heads the others (Algorithm 3); a bumped suitor gets
#   DENY at once. When the timer fires the remaining suitors get ACCEPT and
#   the client MEASUREs what their rosters ask (solicitations meanwhile get
#   DEFER), reports, and is STEADY once every accepted head has confirmed or
#   released it. A client keeps a committed head until the head releases it
#   or falls silent for `dead_after_s` (heads and clients exchange beats).
#
#   Symmetry: the peer advertises the largest cluster it belongs to, its own
#   or a committed head's (DYN-SYM); `own` is the DYN clustering.
#
# Peers are named by their address (host, port): the overlay's id changes
# with every membership, a cluster does not.
#
# Rules
#   Every change of a head's, a client's or a per-peer record's state goes
#   through node/cluster/states.py (one transition table per machine; an
#   illegal move raises). Messages reach their handler through one table
#   (_handlers), by type. No numpy in the peer: the filtering step's clique
#   is node/cluster/clique.py in pure Python.

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from node.cluster.clique import CRITERIA, max_clique_with
from node.cluster.states import (
    ClientState,
    HeadState,
    InviteeState,
    SuitorState,
    client_step,
    enter_invitee,
    enter_suitor,
    head_step,
)
from node.fields import FieldError, check_positive
from node.wire import (
    ANSWER_ACCEPT,
    ANSWER_DEFER,
    ANSWER_DENY,
    ClusterBeat,
    Confirm,
    Endpoint,
    Message,
    Release,
    Roster,
    RttReport,
    Solicit,
    SolicitAnswer,
)

__all__ = ["ClusterAgent", "ClusterConfig"]

Address = tuple[str, int]
# Members of a roster or confirmation we accept (a larger one is forged or broken).
MAX_MEMBERS = 1024
# How soon to offer the prober more measurements when it was full.
FEED_RETRY_S = 0.1


@dataclass(frozen=True)
class ClusterConfig:
    """Policy (D, N, M, criterion) and timing. Times in seconds of the `now` clock.

    The only declaration of these fields: a spec's [clusters] table embeds them by name
    (testbed/spec.py), a peer's JSON document carries them as its "cluster" section. Two
    defaults follow other fields, here and nowhere else: M is N (seed 002 §5.1: "M = N"), and
    a measurement stays fresh for half the verification period, at most 60 s."""

    diameter_ms: float
    size: int = 64  # N: members at most, the head included
    memberships: int | None = None  # M: clusters a peer is in at most, its own included (N)
    criterion: Literal["fcfs", "global", "greedy"] = "global"
    stable_s: float = 30.0  # head: candidates unchanged this long = stable (§5.1.4)
    wait_s: float = 5.0  # client: no new solicitation this long = answer
    retry_s: float = 2.0  # head: solicit again (deferred or unanswered)
    retries: int = 5  # unanswered solicitations before a client counts as denied
    report_timeout_s: float = 30.0  # head: filter with the reports in by then
    heartbeat_s: float = 5.0
    dead_after_s: float = 20.0
    samples: int = 3  # RTT samples per measured pair (their minimum counts)
    # A measurement this young is used again (rosters overlap); None: min(60, verify_s / 2),
    # or 60 without verification.
    fresh_s: float | None = None
    verify_s: float = 0.0  # a STEADY head runs a new round this often (latencies change); 0: never

    def __post_init__(self) -> None:
        if self.memberships is None:
            object.__setattr__(self, "memberships", self.size)
        if self.fresh_s is None:
            fresh = min(60.0, self.verify_s / 2) if self.verify_s > 0 else 60.0
            object.__setattr__(self, "fresh_s", fresh)
        check_positive("cluster", self, ("diameter_ms",), "ms")
        for name in ("size", "memberships", "retries", "samples"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise FieldError("cluster", name, f"must be a positive integer, not {value!r}")
        if self.criterion not in CRITERIA:
            raise FieldError(
                "cluster", "criterion", f"must be one of {CRITERIA}, not {self.criterion!r}"
            )
        check_positive(
            "cluster",
            self,
            ("stable_s", "wait_s", "retry_s", "report_timeout_s", "heartbeat_s", "dead_after_s"),
            "seconds",
        )
        check_positive("cluster", self, ("fresh_s",), "seconds")
        if not (math.isfinite(self.verify_s) and self.verify_s >= 0):
            raise FieldError(
                "cluster",
                "verify_s",
                f"must be 0 (never) or a positive number of seconds, not {self.verify_s!r}",
            )
        if not self.dead_after_s > self.heartbeat_s:
            raise FieldError(
                "cluster", "dead_after_s", f"must be longer than heartbeat_s ({self.heartbeat_s})"
            )

    @property
    def max_memberships(self) -> int:
        """M, resolved (memberships is None only until __post_init__ has run)."""
        assert self.memberships is not None
        return self.memberships

    @property
    def fresh_for_s(self) -> float:
        """fresh_s, resolved."""
        assert self.fresh_s is not None
        return self.fresh_s


def _hash(addr: Address) -> bytes:
    return hashlib.blake2b(f"{addr[0]}:{addr[1]}".encode(), digest_size=8).digest()


def _ep(addr: Address) -> Endpoint:
    return Endpoint(addr[0], addr[1])


def _close(rows: list[list[float] | None], n: int, diameter_ms: float) -> list[list[bool]]:
    """Which pairs of a roster are within D: a pair is close if it was measured
    (either way) and every measurement of it is within D; a lost one is
    infinite. An unmeasured way (NaN, or a row not reported) is skipped; a
    pair measured neither way is not close. (numpy's fmax(rtt, rtt.T) <= D
    in pure Python: the peer process does not import numpy.)"""
    rtt = [row if row is not None else [math.nan] * n for row in rows]
    close = []
    for i in range(n):
        line = []
        for j in range(n):
            there, back = rtt[i][j], rtt[j][i]
            if math.isnan(there):
                there = back
            elif not math.isnan(back):
                there = max(there, back)
            line.append(there <= diameter_ms)
        close.append(line)
    return close


@dataclass
class _Head:
    """What a client knows of one head that solicited it."""

    epoch: int
    state: SuitorState  # SUITOR (not answered), ACCEPTED, COMMITTED
    order: int  # arrival order (FCFS)
    ceiling: int = 0
    accepted: int = 0
    heard: float = 0.0
    roster: tuple[Address, ...] = ()
    missing: set[Address] = field(default_factory=set)  # roster members not measured yet
    reported: bool = False
    members: tuple[Address, ...] = ()  # its job-ready cluster, once committed


@dataclass
class _Client:
    """What a head knows of one client in the current round."""

    state: InviteeState = InviteeState.SOLICITED  # ACCEPTED, DENIED, MEMBER
    tries: int = 0
    next_at: float = 0.0
    rtts_ms: list[float] | None = None  # its report, in roster order


@dataclass
class _Round:
    epoch: int
    clients: dict[Address, _Client] = field(default_factory=dict)
    roster: tuple[Address, ...] = ()
    report_by: float = math.inf
    unmeasured: set[Address] = field(default_factory=set)  # by us, the head
    unreported: set[Address] = field(default_factory=set)  # accepted, no report yet


class ClusterAgent:
    """Head and client of the distributed refinement (see the module comment)."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        address: Address,
        rng: random.Random,
        send: Callable[[Address, Message], None],
        measure: Callable[[Address, int, float], int | None],
    ) -> None:
        self.config = config
        self.address = address
        self._rng = rng
        self._send = send
        self._measure = measure  # (target, samples, now) -> request number, None: prober full
        self._head_state = HeadState.IDLE
        self._client_state = ClientState.IDLE
        self.candidates: tuple[Address, ...] = ()
        self.own: tuple[Address, ...] = (address,)  # our job-ready cluster (DYN)
        self._stable_at = math.inf
        self._verify_at = math.inf
        self._changed = False  # candidates changed while we were busy
        self._epoch = 0
        self._round: _Round | None = None
        self._members: dict[Address, float] = {}  # STEADY: member -> last heard
        self._heads: dict[Address, _Head] = {}
        self._arrivals = 0
        self._wait_until = math.inf
        self._beat_at = math.inf
        self._rtt: dict[Address, tuple[float, float]] = {}  # target -> (ms, minimum; when)
        self._requests: dict[int, Address] = {}  # prober request -> target
        self._to_measure: list[Address] = []  # waiting for room in the prober
        self._awaiting: dict[Address, set[Address]] = {}  # target -> heads (us too) waiting
        self._feed_at = math.inf
        self.counters = {"measured": 0, "rounds": 0, "released": 0, "dead": 0}
        self._advertised: tuple[Address, ...] | None = None  # cache; None: to compute
        self._handlers: dict[type, Callable[[Address, Any, float], str | None]] = {
            Solicit: self._on_solicit,
            SolicitAnswer: self._on_answer,
            Roster: self._on_roster,
            RttReport: self._on_report,
            Confirm: self._on_confirm,
            Release: self._on_release,
            ClusterBeat: self._on_beat,
        }

    # -- states (every change goes through node/cluster/states.py) -------------------------------

    @property
    def head_state(self) -> HeadState:
        return self._head_state

    @property
    def client_state(self) -> ClientState:
        return self._client_state

    def _head_to(self, new: HeadState) -> None:
        self._head_state = head_step(self._head_state, new)

    def _client_to(self, new: ClientState) -> None:
        self._client_state = client_step(self._client_state, new)

    # -- inputs ----------------------------------------------------------------------------------

    def start(self, now: float) -> None:
        """Be a client from now on (WAIT)."""
        if self.client_state == ClientState.IDLE:
            self._client_to(ClientState.WAIT)
            self._wait_until = now + self.config.wait_s
            self._beat_at = now + self.config.heartbeat_s

    def set_candidates(self, candidates: Sequence[Address], now: float) -> None:
        """The first approximation changed (DTM's clustering): the peers predicted
        near us (up to `aggregate` x N of them). We solicit N - 1 of them: those
        we chose before that are still offered, the rest drawn at random (§5.1:
        a random subset keeps a few peers from landing in every cluster; keeping
        earlier choices keeps a small change from reshuffling the cluster).
        A change restarts the stability timer."""
        offered = list(dict.fromkeys(a for a in candidates if a != self.address))
        kept = [a for a in self.candidates if a in offered]
        rest = [a for a in offered if a not in kept]
        room = max(0, self.config.size - 1 - len(kept))
        chosen = kept + (self._rng.sample(rest, room) if len(rest) > room else rest)
        cut = tuple(chosen[: self.config.size - 1])
        if set(cut) == set(self.candidates) and self.head_state != HeadState.IDLE:
            return
        self.candidates = cut
        if self.head_state in (HeadState.IDLE, HeadState.COLLECT) or (
            self.head_state == HeadState.STEADY and len(self.own) < self.config.size
        ):
            self._collect(now)
        elif self.head_state != HeadState.STEADY:
            self._changed = True  # looked at when this round ends
        self.start(now)

    def leave(self, now: float) -> None:
        """Say goodbye: our members are released, our heads told we withdraw."""
        for member in self._members:
            self._send(member, Release(self._epoch))
        for head, info in self._heads.items():
            if info.state != SuitorState.SUITOR:
                self._send(head, SolicitAnswer(info.epoch, ANSWER_DENY))
        self._members.clear()
        self._heads.clear()
        self._advertised = None
        self._round = None
        self._head_to(HeadState.IDLE)
        self._client_to(ClientState.IDLE)
        self.own = (self.address,)
        self._advertised = None

    def handle_message(self, source: Address, message: Message, now: float) -> str | None:
        """One cluster message; returns why it is unacceptable, or None."""
        handler = self._handlers.get(type(message))
        if handler is None:
            return "not a cluster message"
        return handler(source, message, now)

    def _on_release(self, source: Address, release: Release, now: float) -> str | None:
        info = self._heads.get(source)
        if info is not None and release.epoch >= info.epoch:
            del self._heads[source]
            self._advertised = None
            self.counters["released"] += 1
            self._client_progress(now)
        return None

    def _on_beat(self, source: Address, beat: ClusterBeat, now: float) -> str | None:
        if source in self._members:
            self._members[source] = now
        info = self._heads.get(source)
        if info is not None and info.epoch == beat.epoch:
            info.heard = now
        return None

    def owns(self, request: int) -> bool:
        """Is this prober request one of ours?"""
        return request in self._requests

    def handle_rtt(self, request: int, rtts_s: Sequence[float], now: float) -> bool:
        """A measurement we asked for is in; False if it was not ours."""
        target = self._requests.pop(request, None)
        if target is None:
            return False
        self.counters["measured"] += 1
        self._rtt[target] = (min(rtts_s) * 1e3 if rtts_s else math.inf, now)
        waiters = self._awaiting.pop(target, ())
        for head in waiters:
            if head == self.address:
                if self._round is not None:
                    self._round.unmeasured.discard(target)
            elif (info := self._heads.get(head)) is not None:
                info.missing.discard(target)
        # _client_progress for the heads this measurement concerns only: no other head
        # became ready to be reported (every other change is followed by
        # _client_progress), and a measurement commits no head. After every RTT, a
        # client of many heads scanned them all.
        ready = [h for h in waiters if h in self._heads and self._ready(self._heads[h])]
        if len(ready) > 1:
            order = {h: k for k, h in enumerate(self._heads)}
            ready.sort(key=order.__getitem__)
        for head in ready:
            self._report(head, self._heads[head], now)
        self._head_progress(now)
        return True

    def handle_timer(self, now: float) -> None:
        cfg = self.config
        self._feed_prober(now)
        if self.head_state == HeadState.COLLECT and now >= self._stable_at:
            self._solicit(now)
        if self.head_state == HeadState.STEADY and now >= self._verify_at:
            self._solicit(now)  # measure again: a latency may have changed
        rnd = self._round
        if rnd is not None and self.head_state == HeadState.SOLICIT:
            for addr, client in rnd.clients.items():
                if client.state == InviteeState.SOLICITED and now >= client.next_at:
                    if client.tries >= cfg.retries:
                        enter_invitee(client, InviteeState.DENIED)
                        continue
                    client.tries += 1
                    client.next_at = now + cfg.retry_s
                    self._send(addr, self._solicitation(rnd))
            self._head_progress(now)
        if rnd is not None and self.head_state == HeadState.FILTER and now >= rnd.report_by:
            self._filter(now)
        if self.client_state == ClientState.WAIT and now >= self._wait_until:
            self._answer(now)
        if now >= self._beat_at:
            self._beat(now)

    def get_timer(self) -> float | None:
        deadlines = [self._stable_at if self.head_state == HeadState.COLLECT else math.inf]
        if self.head_state == HeadState.STEADY:
            deadlines.append(self._verify_at)
        if self._round is not None:
            if self.head_state == HeadState.SOLICIT:
                deadlines.extend(
                    c.next_at
                    for c in self._round.clients.values()
                    if c.state == InviteeState.SOLICITED
                )
            elif self.head_state == HeadState.FILTER:
                deadlines.append(self._round.report_by)
        if self.client_state == ClientState.WAIT:
            deadlines.append(self._wait_until)
        deadlines.append(self._beat_at)
        if self._to_measure:
            deadlines.append(self._feed_at)
        best = min(deadlines)
        return None if best == math.inf else best

    # -- the head --------------------------------------------------------------------------------

    def _solicitation(self, rnd: _Round) -> Solicit:
        denied = sum(1 for c in rnd.clients.values() if c.state == InviteeState.DENIED)
        accepted = sum(1 for c in rnd.clients.values() if c.state == InviteeState.ACCEPTED)
        return Solicit(rnd.epoch, len(rnd.clients) + 1 - denied, accepted)

    def _solicit(self, now: float) -> None:
        self._stable_at = self._verify_at = math.inf
        self._changed = False
        if not self.candidates:
            self._head_to(HeadState.STEADY)
            return
        self._epoch += 1
        self.counters["rounds"] += 1
        rnd = _Round(self._epoch)
        for addr in self.candidates:
            # Members of our last cluster are solicited again like anyone (they
            # still hold our place: their answer comes at once).
            rnd.clients[addr] = _Client(tries=1, next_at=now + self.config.retry_s)
        self._round = rnd
        self._head_to(HeadState.SOLICIT)
        message = self._solicitation(rnd)
        for addr in rnd.clients:
            self._send(addr, message)

    def _on_answer(self, source: Address, answer: SolicitAnswer, now: float) -> str | None:
        if answer.answer not in (ANSWER_ACCEPT, ANSWER_DENY, ANSWER_DEFER):
            return "unknown answer"
        if answer.answer == ANSWER_DENY and source in self._members:  # a member withdraws
            del self._members[source]
            self._shrink(now)
            return None
        rnd = self._round
        client = rnd.clients.get(source) if rnd is not None else None
        if rnd is None or client is None or answer.epoch != rnd.epoch:
            return None  # stale: an earlier round's answer
        if answer.answer == ANSWER_DEFER:
            client.tries = 0  # busy, not silent
            client.next_at = now + self.config.retry_s
            return None
        if self.head_state != HeadState.SOLICIT or client.state != InviteeState.SOLICITED:
            withdrawing = client.state in (InviteeState.ACCEPTED, InviteeState.MEMBER)
            if answer.answer == ANSWER_DENY and withdrawing:
                enter_invitee(client, InviteeState.DENIED)  # withdrew during filtering
                rnd.unreported.discard(source)
                self._head_progress(now)
            return None
        accepted = answer.answer == ANSWER_ACCEPT
        enter_invitee(client, InviteeState.ACCEPTED if accepted else InviteeState.DENIED)
        if self.config.criterion == "greedy":  # the figures the clients rank us by changed
            update = self._solicitation(rnd)
            for addr, other in rnd.clients.items():
                if other.state != InviteeState.DENIED and addr != source:
                    self._send(addr, update)
        self._head_progress(now)
        return None

    def _head_progress(self, now: float) -> None:
        rnd = self._round
        if rnd is None:
            return
        if self.head_state == HeadState.SOLICIT:
            if any(c.state == InviteeState.SOLICITED for c in rnd.clients.values()):
                return
            accepted = [a for a, c in rnd.clients.items() if c.state == InviteeState.ACCEPTED]
            rnd.roster = (self.address, *accepted)
            rnd.report_by = now + self.config.report_timeout_s
            self._head_to(HeadState.FILTER)
            roster = Roster(rnd.epoch, tuple(_ep(a) for a in rnd.roster))
            for addr in accepted:
                self._send(addr, roster)
            rnd.unmeasured = self._want(accepted, now, self.address)
            rnd.unreported = set(accepted)
        if self.head_state == HeadState.FILTER and not rnd.unmeasured and not rnd.unreported:
            self._filter(now)

    def _on_report(self, source: Address, report: RttReport, now: float) -> str | None:
        rnd = self._round
        if rnd is None or report.epoch != rnd.epoch or source not in rnd.roster[1:]:
            return None
        if len(report.rtts_us) != len(rnd.roster):
            return "report does not match the roster"
        rnd.clients[source].rtts_ms = [r / 1e3 if r >= 0 else math.inf for r in report.rtts_us]
        rnd.unreported.discard(source)
        self._head_progress(now)
        return None

    def _filter(self, now: float) -> None:
        rnd = self._round
        assert rnd is not None
        roster = rnd.roster
        n = len(roster)
        mine = (self._rtt_ms(a, now) for a in roster[1:])
        rows: list[list[float] | None] = [[0.0, *(math.nan if r is None else r for r in mine)]]
        for addr in roster[1:]:
            row = rnd.clients[addr].rtts_ms
            accepted = row is not None and rnd.clients[addr].state == InviteeState.ACCEPTED
            rows.append(row if accepted else None)
        close = _close(rows, n, self.config.diameter_ms)
        keep = max_clique_with(0, list(range(n)), close)
        members = tuple(roster[k] for k in keep)
        self.own = members
        self._advertised = None
        self._members = dict.fromkeys(members[1:], now)
        confirm = Confirm(rnd.epoch, tuple(_ep(a) for a in members))
        for addr in members[1:]:
            enter_invitee(rnd.clients[addr], InviteeState.MEMBER)
            self._send(addr, confirm)
        for addr in roster[1:]:
            if addr not in self._members:
                self._send(addr, Release(rnd.epoch))
        self._head_to(HeadState.STEADY)
        rnd.report_by = math.inf
        if self.config.verify_s > 0:
            self._verify_at = now + self.config.verify_s
        if self._changed and len(self.own) < self.config.size:
            self._collect(now)

    def _collect(self, now: float) -> None:
        self._head_to(HeadState.COLLECT)
        self._stable_at = now + self.config.stable_s

    def _shrink(self, now: float) -> None:
        """Members went: the rest are still a clique; tell them, and look again."""
        self.own = (self.address, *(a for a in self.own[1:] if a in self._members))
        self._advertised = None
        confirm = Confirm(self._epoch, tuple(_ep(a) for a in self.own))
        for addr in self._members:
            self._send(addr, confirm)
        if self.head_state == HeadState.STEADY and len(self.own) < self.config.size:
            self._collect(now)

    # -- the client ------------------------------------------------------------------------------

    def _places(self) -> int:
        """Heads we may still accept: M less our own cluster less the committed."""
        committed = sum(1 for h in self._heads.values() if h.state != SuitorState.SUITOR)
        return self.config.max_memberships - 1 - committed

    def _rank(self, addr: Address) -> tuple[int | bytes, ...]:
        info = self._heads[addr]
        if self.config.criterion == "fcfs":
            return (info.order,)
        if self.config.criterion == "global":
            return (_hash(addr),)
        return (-info.ceiling, -info.accepted, _hash(addr))

    def _on_solicit(self, source: Address, solicit: Solicit, now: float) -> str | None:
        if source == self.address:
            return "a solicitation from ourselves"
        info = self._heads.get(source)
        if info is not None and solicit.epoch < info.epoch:
            return None  # stale
        if info is not None and solicit.epoch == info.epoch:
            info.ceiling, info.accepted, info.heard = solicit.ceiling, solicit.accepted, now
            if info.state == SuitorState.ACCEPTED:  # our ACCEPT was lost: say it again
                self._send(source, SolicitAnswer(solicit.epoch, ANSWER_ACCEPT))
            return None
        if info is not None and info.state == SuitorState.COMMITTED:
            # A new round of a head we are committed to: we keep its place.
            enter_suitor(info, SuitorState.ACCEPTED)
            info.epoch, info.heard = solicit.epoch, now
            info.roster, info.reported = (), False
            self._send(source, SolicitAnswer(solicit.epoch, ANSWER_ACCEPT))
            if self.client_state == ClientState.STEADY:  # (in WAIT, the suitors are answered first)
                self._client_to(ClientState.MEASURE)
            return None
        if self.client_state == ClientState.MEASURE:
            self._send(source, SolicitAnswer(solicit.epoch, ANSWER_DEFER))
            return None
        self.start(now)  # a peer is a client from its first solicitation on
        self._arrivals += 1
        self._heads[source] = _Head(
            solicit.epoch,
            SuitorState.SUITOR,
            self._arrivals,
            solicit.ceiling,
            solicit.accepted,
            now,
        )
        suitors = sorted(
            (a for a, h in self._heads.items() if h.state == SuitorState.SUITOR), key=self._rank
        )
        for bumped in suitors[max(0, self._places()) :]:  # Algorithm 3: too many suitors
            self._send(bumped, SolicitAnswer(self._heads.pop(bumped).epoch, ANSWER_DENY))
        self._client_to(ClientState.WAIT)
        self._wait_until = now + self.config.wait_s
        return None

    def _answer(self, now: float) -> None:
        suitors = [a for a, h in self._heads.items() if h.state == SuitorState.SUITOR]
        if not suitors:  # (all bumped): nothing to answer, a new one brings us back
            self._client_to(ClientState.MEASURE)
            self._wait_until = math.inf
            self._client_progress(now)
            return
        for addr in suitors:
            info = self._heads[addr]
            enter_suitor(info, SuitorState.ACCEPTED)
            self._send(addr, SolicitAnswer(info.epoch, ANSWER_ACCEPT))
        self._client_to(ClientState.MEASURE)
        self._wait_until = math.inf

    def _on_roster(self, source: Address, roster: Roster, now: float) -> str | None:
        info = self._heads.get(source)
        if info is None or info.epoch != roster.epoch or info.state != SuitorState.ACCEPTED:
            return None
        members = tuple((m.host, m.port) for m in roster.members)
        if not members or len(members) > MAX_MEMBERS or members[0] != source:
            return "bad roster"
        if self.address not in members:
            return "a roster without us"
        info.roster, info.heard = members, now
        info.missing = self._want([m for m in members if m != self.address], now, source)
        self._client_progress(now)
        return None

    def _on_confirm(self, source: Address, confirm: Confirm, now: float) -> str | None:
        info = self._heads.get(source)
        if info is None or info.epoch != confirm.epoch:
            return None
        members = tuple((m.host, m.port) for m in confirm.members)
        if not members or len(members) > MAX_MEMBERS or members[0] != source:
            return "bad confirmation"
        if self.address not in members:
            del self._heads[source]
            self._advertised = None
            return None
        enter_suitor(info, SuitorState.COMMITTED)
        info.members, info.heard = members, now
        self._advertised = None
        self._client_progress(now)
        return None

    @staticmethod
    def _ready(info: _Head) -> bool:
        """Does this head wait for our report, with every member measured?"""
        return (
            info.state == SuitorState.ACCEPTED
            and bool(info.roster)
            and not info.reported
            and not info.missing
        )

    def _report(self, head: Address, info: _Head, now: float) -> None:
        measured = [0.0 if m == self.address else self._rtt_ms(m, now) for m in info.roster]
        rtts = [-1 if r is None or r == math.inf else round(r * 1e3) for r in measured]
        self._send(head, RttReport(info.epoch, tuple(rtts)))
        info.reported = True

    def _client_progress(self, now: float) -> None:
        for head, info in self._heads.items():
            if self._ready(info):
                self._report(head, info, now)
        if self.client_state == ClientState.MEASURE and all(
            h.state == SuitorState.COMMITTED for h in self._heads.values()
        ):
            self._client_to(ClientState.STEADY)

    # -- measuring and liveness ------------------------------------------------------------------

    def _rtt_ms(self, target: Address, now: float) -> float | None:
        """A fresh enough measurement of the RTT to `target` (inf: lost), or None."""
        entry = self._rtt.get(target)
        return entry[0] if entry is not None and now - entry[1] <= self.config.fresh_for_s else None

    def _want(self, targets: Sequence[Address], now: float, waiter: Address) -> set[Address]:
        """Measure the targets without a fresh measurement, for `waiter` (a head,
        or us for our own round); returns those it must wait for."""
        missing = set()
        for target in targets:
            if self._rtt_ms(target, now) is not None:
                continue
            missing.add(target)
            waiting = self._awaiting.setdefault(target, set())
            if not waiting:  # nobody asked yet: measure it
                self._to_measure.append(target)
            waiting.add(waiter)
        self._feed_prober(now)
        return missing

    def _feed_prober(self, now: float) -> None:
        while self._to_measure:
            target = self._to_measure.pop(0)
            request = self._measure(target, self.config.samples, now)
            if request is None:
                self._to_measure.insert(0, target)
                self._feed_at = now + FEED_RETRY_S  # the prober is full: try again soon
                return
            self._requests[request] = target

    def _beat(self, now: float) -> None:
        cfg = self.config
        self._beat_at = now + cfg.heartbeat_s
        dead = [a for a, heard in self._members.items() if now - heard > cfg.dead_after_s]
        for addr in dead:
            del self._members[addr]
            self._rtt.pop(addr, None)  # measure it afresh if it comes back
            self.candidates = tuple(a for a in self.candidates if a != addr)
            self.counters["dead"] += 1
        if dead:
            self._shrink(now)
        for addr in self._members:
            self._send(addr, ClusterBeat(self._epoch))
        for head, info in list(self._heads.items()):
            # An accepted head owes us a roster, then a confirmation (after its
            # reports are in, report_timeout_s at the most).
            silence = cfg.dead_after_s + (
                cfg.report_timeout_s if info.state == SuitorState.ACCEPTED else 0
            )
            if info.state != SuitorState.SUITOR and now - info.heard > silence:
                del self._heads[head]
                self._advertised = None
                self._rtt.pop(head, None)
                self.counters["dead"] += 1
            elif info.state == SuitorState.COMMITTED:
                self._send(head, ClusterBeat(info.epoch))
        self._client_progress(now)

    # -- results -----------------------------------------------------------------------------------

    def belongs(self) -> list[tuple[Address, ...]]:
        """Every job-ready cluster we are in: our own and our committed heads'
        (while a head runs a new round, the cluster it confirmed last)."""
        return [self.own, *(h.members for h in self._heads.values() if h.members)]

    def advertised(self) -> tuple[Address, ...]:
        """Symmetry (§5.1.3): the largest cluster we belong to (ours on a tie)."""
        if self._advertised is None:
            self._advertised = max(self.belongs(), key=len)
        return self._advertised

    def dump(self) -> dict[str, object]:
        return {
            "head": self.head_state,
            "client": self.client_state,
            "own": [list(a) for a in self.own],
            "advertised": [list(a) for a in self.advertised()],
            "member_of": len(self.belongs()),
            "pending": len(self._requests) + len(self._to_measure),
            **self.counters,
        }
