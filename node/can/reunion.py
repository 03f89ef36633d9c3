# Overlay merge: two overlays over one space find each other and become one.
#
# Theory of operation
#   A partition longer than suspect_after_s leaves each side a complete CAN of its
#   own: each side buried the other's peers and took their zones. So can crashes
#   within the first update period (two survivors that never heard of each other
#   each take the other half). Nothing in the CAN makes such overlays talk again:
#   each holds the other's peers as tombstones. This part makes them one:
#
#   * Every overlay has a root, named by (epoch, id). The founder of an overlay
#     is its root at epoch 0. Each update carries the root's word: (epoch, id,
#     seq, size). The root advances seq every root period and sets size to its
#     estimate of the member count (1 / the mean normalised volume of its zone
#     and its direct neighbours'). A member adopts the least (epoch, id) it
#     hears of, or a higher seq of its root; a joiner has no root until it hears
#     one. A root whose seq has not advanced for ROOT_MAX_AGE periods is dropped
#     (only a higher seq brings it back) and the member claims to be root at the
#     next epoch; the least id among the claims wins. A root is thus replaced
#     only when it is gone, and a new member never takes over. After a
#     partition, the side without the old root soon has one at a later epoch.
#   * Peers buried for silence (a probe unanswered) are remembered, with their
#     address, for remember_dead_s, and sent a Reunite 1, 2, 4, 8, 8, ... update
#     periods apart after the burial. A peer answers every Reunite with its root and
#     its info, if it is a member whose root has not changed for ROOT_MAX_AGE root periods.
#   * Two such members whose roots differ, and where the contact's zone overlaps
#     ours or a direct neighbour's (the evidence of two overlays: different roots
#     alone may be an election still spreading), decide which overlay dissolves,
#     both the same way (`loses`): the one whose root's size (smoothed over its
#     beats) is merge_size_ratio times smaller, else the one whose root has the larger (epoch, id). As long
#     as one side still has the old root, every pair decides alike. A peer of
#     the losing overlay sends a Dissolve (the winner's root, contacts) to its
#     direct neighbours, who pass it on, and rejoins through the contacts as a
#     new node; so does every member of the losing overlay as it reaches them,
#     each after a random wait (the overlay's size / JOINS_PER_S at most), so that
#     hundreds of joins do not all contend at once.
#
#   * Two overlays also meet through an update from a member of the other (learnt by
#     a probe, say) and through an Evicted from one (it buried us while apart): both
#     carry the sender's root, and become the same decision (`meet`, `another_overlay`).
#   * A partition just long enough to bury peers across it may heal before every
#     buried link is: the old root's heartbeat then flows back to the side that lost
#     it, which takes it again, and two overlays hold one root. That side is known
#     all the same: ROOT_MAX_AGE root periods are shorter than suspect_after_s
#     (config), so every peer of it dropped the root before burying anyone, and a
#     peer that takes a root it dropped back says so in its word (`cut`) for
#     CUT_PERIODS update periods. Two members with the same root whose zones
#     overlap decide by it: the one cut off dissolves (if both or neither were, no
#     decision; two that met through a Reunite, one having buried the other, decide
#     by id); a Dissolve of the same root takes the members that were cut off. A
#     member with no root yet takes the winner's from a Dissolve (docs/can.md).
#
# Rules
#   1. Only members decide, and only when both roots have been the same for a
#      root period (an election still spreading could decide both ways).
#   2. Equal roots mean one overlay (or two not yet told apart: the remembered
#      peer is asked again later).

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec

from node.can.config import ROOT_MAX_AGE
from node.can.geometry import overlap
from node.can.local import Address, LocalNode
from node.can.neighbours import NeighbourTable
from node.can.status import Status
from node.events import Merging
from node.wire import Dissolve, PeerInfo, Reunite, Root, check_peer_info

__all__ = ["ROOT_MAX_AGE", "Reunion", "check_dissolve", "check_reunite", "loses"]

# A peer with no root claims an overlay of its own after this many update periods.
ALONE_PERIODS = 20
# A peer that took back a root it dropped says so in its word for this many update periods.
CUT_PERIODS = 30
# A remembered peer is asked again after 1, 2, 4, 8, 8, ... update periods.
MAX_WAIT_PERIODS = 8
# The root's size estimate: an exponential average over its beats, this weight to the new.
SIZE_SMOOTHING = 0.25
# A dissolving overlay's members rejoin spread over size / JOINS_PER_S seconds, at most
# MAX_SPREAD_PERIODS update periods.
JOINS_PER_S = 50.0
MAX_SPREAD_PERIODS = 5
# Reunites sent per update period at most, and contacts a Dissolve carries at most.
MAX_REUNITES_PER_TICK = 4
MAX_CONTACTS = 4


def _key(root: Root) -> tuple[int, int]:
    return (root.epoch, root.id)


def _plain(root: Root) -> Root:
    """The root's word without the sender's `cut` mark."""
    return msgspec.structs.replace(root, cut=False) if root.cut else root


def loses(mine: Root, theirs: Root, ratio: float) -> bool:
    """Whether our overlay (root `mine`) dissolves into theirs. Both sides compute
    this with the arguments swapped and reach opposite answers (for distinct roots)."""
    if mine.size * ratio <= theirs.size:
        return True
    if theirs.size * ratio <= mine.size:
        return False
    return _key(mine) > _key(theirs)


def _check_root(root: Root) -> str | None:
    if not (0 <= root.epoch < 2**31 and 0 <= root.id < 2**63 and 0 <= root.seq < 2**63):
        return "bad root"
    if not (math.isfinite(root.size) and root.size > 0):
        return "bad root size"
    return None


def check_reunite(message: Reunite, dims: int) -> str | None:
    problem = None if message.root is None else _check_root(message.root)
    if problem is None and message.me is not None:
        problem = check_peer_info(message.me, dims)
    return problem


def check_dissolve(message: Dissolve, dims: int) -> str | None:
    if not message.contacts or len(message.contacts) > MAX_CONTACTS:
        return "bad contacts"
    problem = _check_root(message.winner)
    for contact in message.contacts:
        problem = problem or check_peer_info(contact, dims)
    return problem


@dataclass
class _Remembered:
    address: Address
    buried_at: float
    next_at: float
    wait_s: float


class Reunion:
    """The overlay's root, the peers we buried for silence, and the merge."""

    def __init__(
        self,
        local: LocalNode,
        table: NeighbourTable,
        rejoin: Callable[[Sequence[Address], float, float], None],
        unsettled: Callable[[], bool] = lambda: False,
    ) -> None:
        """`unsettled`: whether dead regions next to our zone wait to be absorbed
        (takeover.py), when zone volumes do not tell the overlay's size (_size)."""
        self.local = local
        self.table = table
        self._rejoin = rejoin
        self._unsettled = unsettled
        self.root: Root | None = None
        self.member_since: float | None = None  # our first tick as a member
        self.advanced_at = 0.0  # when our root's seq last advanced (or we took it)
        self.changed_at = 0.0  # when our root last changed
        self.next_beat = 0.0  # as the root: when seq advances next
        self.dropped: dict[tuple[int, int], int] = {}  # roots dropped -> their seq then
        self.cut_until = -math.inf  # we took back a root we dropped: cut off till then
        self.cut = False  # now <= cut_until, at our last tick
        self.remembered: dict[int, _Remembered] = {}
        # The known peers whose zone overlaps ours, and what that depends on: the
        # table's version (news of peers), how many it knows, our zone.
        self._overlapping: tuple[object, list[PeerInfo]] = (None, [])

    # -- the root --------------------------------------------------------------------------------------

    def word(self) -> Root | None:
        """What our updates say of the root (with our `cut` mark)."""
        root = self.root
        if root is None or not self.cut:
            return root
        return msgspec.structs.replace(root, cut=True)

    def found(self, now: float) -> None:
        """We founded the overlay: its root at epoch 0."""
        self._claim(0, now)

    def _claim(self, epoch: int, now: float) -> None:
        self.root = Root(epoch, self.local.id, 0, self._size())
        self.advanced_at = self.changed_at = now
        self.next_beat = now + self.local.config.root_every_s

    def _size(self) -> float:
        """The overlay's member count by the density of our neighbourhood: the zones
        of a CAN tile the space, so 1 / their mean normalised volume. Not while dead
        regions next to us wait to be absorbed: the few peers of an island cut off
        from a large overlay keep their small zones long after burying everyone
        else (at 1,000 peers an island of three said 300,000, and the large overlay
        dissolved into it at the heal). Then we count only the peers we see."""
        local, table = self.local, self.table
        if not local.lo:
            return 1.0
        if self._unsettled():
            return float(1 + len(table.direct))
        space = local.space
        volumes = [space.volume(local.lo, local.hi)]
        for ident in table.direct:
            info = table.known[ident].info
            volumes.append(space.volume(info.lo, info.hi))
        return max(1.0, len(volumes) / sum(volumes))

    def on_root(self, root: Root, now: float) -> None:
        """A neighbour's word on the root (in its update)."""
        mine = self.root
        if root.id == self.local.id or _check_root(root) is not None:
            return
        key, root = _key(root), _plain(root)
        if mine is None or key < _key(mine):
            dropped = self.dropped.get(key)
            if dropped is not None:
                if root.seq <= dropped:
                    return  # the echo of a root we dropped
                # It is back: we were cut off from it (a partition, healed).
                self.cut_until = now + CUT_PERIODS * self.local.config.update_interval_s
                self.cut = True
            self.root = root
            self.advanced_at = self.changed_at = now
        elif key == _key(mine) and root.seq > mine.seq:
            self.root = root
            self.advanced_at = now

    def tick(self, now: float) -> None:
        """Once an update period: the root's heartbeat, a stale root dropped, the
        remembered peers asked."""
        local = self.local
        period = local.config.root_every_s
        if self.member_since is None:
            self.member_since = now
        self.cut = now <= self.cut_until
        root = self.root
        if root is None:
            if now - self.member_since > ALONE_PERIODS * local.config.update_interval_s:
                self._claim(0, now)  # nobody told us of one: an overlay of our own
        elif root.id == local.id:
            if now >= self.next_beat:
                # A local estimate is noisy (zones differ in size by factors of a few):
                # smoothed over the beats, so that two overlays compare alike for a while.
                size = SIZE_SMOOTHING * self._size() + (1 - SIZE_SMOOTHING) * root.size
                self.root = Root(root.epoch, local.id, root.seq + 1, round(size, 1))
                self.next_beat = now + period
        elif now - self.advanced_at > ROOT_MAX_AGE * period:
            self.dropped[_key(root)] = root.seq
            if len(self.dropped) > 64:
                del self.dropped[next(iter(self.dropped))]
            self._claim(root.epoch + 1, now)
        self._note_overlapping(now)
        self._ask_remembered(now)

    def settled(self, now: float) -> Root | None:
        """Our word if we may decide on it: a member's root unchanged for as long as it
        takes to drop one (an election still spreading could decide both ways)."""
        root = self.root
        if root is None or self.local.status != Status.MEMBER:
            return None
        if now - self.changed_at < ROOT_MAX_AGE * self.local.config.root_every_s:
            return None
        return self.word()

    # -- remembered peers ------------------------------------------------------------------------------

    def remember(self, info: PeerInfo, now: float) -> None:
        """A peer we buried for silence: ask it again later (it may be across a partition)."""
        config = self.local.config
        if config.remember_dead_s <= 0 or info.id == self.local.id:
            return
        wait = config.update_interval_s
        self.remembered[info.id] = _Remembered((info.host, info.port), now, now + wait, wait)

    def _note_overlapping(self, now: float) -> None:
        """Peers we know of (first-hand or by hearsay) whose zone overlaps ours: in one
        overlay only stale news does, so ask them like the buried (their answer carries
        their zone as it is now). A peer of another overlay that we only hear of, say
        one whose zone holds up our takeovers, is met this way."""
        local = self.local
        if local.status != Status.MEMBER or not local.lo or local.config.remember_dead_s <= 0:
            return
        table = self.table
        lo, hi = local.lo, local.hi
        key = (table.version, len(table.known), lo, hi)
        if self._overlapping[0] != key:
            # The first and last dimensions inline first: most known zones fail there.
            lo0, hi0, lo1, hi1 = lo[0], hi[0], lo[-1], hi[-1]
            self._overlapping = (
                key,
                [
                    info
                    for k in table.known.values()
                    if (info := k.info).lo
                    and info.hi[0] > lo0
                    and hi0 > info.lo[0]
                    and info.hi[-1] > lo1
                    and hi1 > info.lo[-1]
                    and overlap(lo, hi, info.lo, info.hi)
                ],
            )
        for info in self._overlapping[1]:
            if info.id not in self.remembered:
                self.remember(info, now)

    def _ask_remembered(self, now: float) -> None:
        local = self.local
        keep = local.config.remember_dead_s
        for ident in [i for i, r in self.remembered.items() if now - r.buried_at > keep]:
            del self.remembered[ident]
        mine = self.settled(now)
        if mine is None:
            return
        due = sorted((r.next_at, i) for i, r in self.remembered.items() if r.next_at <= now)
        for _, ident in due[:MAX_REUNITES_PER_TICK]:
            entry = self.remembered[ident]
            entry.wait_s = min(2 * entry.wait_s, MAX_WAIT_PERIODS * local.config.update_interval_s)
            entry.next_at = now + entry.wait_s
            nonce = local.rng.getrandbits(32)
            local.send(entry.address, Reunite(nonce, mine, local.info(), False))

    # -- meeting another overlay -----------------------------------------------------------------------

    def on_reunite(self, addr: Address, message: Reunite, now: float) -> None:
        local = self.local
        mine = self.settled(now)
        if not message.answer:
            me = None if mine is None else local.info()
            local.send(addr, Reunite(message.nonce, mine, me, True))
        if message.root is not None and message.me is not None:
            self.meet(message.root, message.me, now, buried=True)

    def meet(self, theirs: Root, contact: PeerInfo, now: float, *, buried: bool = False) -> bool:
        """A member of another overlay, maybe (a Reunite, an update from a peer whose root
        differs): if it is (rule 1, and the contact's zone overlaps ours or a direct
        neighbour's), the two overlays decide; we dissolve, or we win and tell it so
        (a Reunite, on which it decides). Returns True if it was another overlay."""
        mine = self.settled(now)
        if mine is None or not contact.lo:
            return False
        if _key(theirs) == _key(mine):
            local = self.local
            if not overlap(local.lo, local.hi, contact.lo, contact.hi):
                # One overlay. (Only our own zone counts here, which we know for sure:
                # a neighbour's may be stale news, and one root would not tell it.)
                return False
            if theirs.cut != self.cut:
                lost = self.cut
            elif buried:
                # Each buried the other, and we overlap: two overlays all the same, which
                # the marks do not tell apart (both sides lost the root). The pair decides
                # by id; the Dissolve then takes every member that was cut off.
                lost = self.local.id > contact.id
            else:
                return False  # maybe a takeover race, which the takeover gives back
        elif not self._overlaps_ours(contact):
            return False
        else:
            lost = loses(mine, theirs, self.local.config.merge_size_ratio)
        if lost:
            self._dissolve(_plain(theirs), (contact,), "met", now)
        else:
            local = self.local
            nonce = local.rng.getrandbits(32)
            local.send(
                (contact.host, contact.port), Reunite(nonce, self.word(), local.info(), True)
            )
        return True

    def another_overlay(self, root: Root | None, addr: Address, now: float) -> bool:
        """An Evicted from a peer whose root differs from ours: no verdict of our overlay
        but a peer of another, which buried us while apart. We show ourselves (a
        Reunite, which it answers, and both decide) instead of rejoining."""
        mine = self.settled(now)
        if root is None or mine is None:
            return False
        if _key(root) == _key(mine) and not (root.cut and not self.cut):
            return False  # our overlay's verdict (or from the side that is not cut off)
        local = self.local
        local.send(addr, Reunite(local.rng.getrandbits(32), self.word(), local.info(), False))
        return True

    def _overlaps_ours(self, contact: PeerInfo) -> bool:
        """The evidence of two overlays: the contact's zone overlaps ours or a direct
        neighbour's. Different roots alone are not (an election spreading through one
        overlay leaves its members with different roots for a while), and in one
        overlay zones never overlap."""
        local, table = self.local, self.table
        if overlap(local.lo, local.hi, contact.lo, contact.hi):
            return True
        for ident in table.direct:
            info = table.known[ident].info
            if ident != contact.id and overlap(info.lo, info.hi, contact.lo, contact.hi):
                return True
        return False

    def on_dissolve(self, message: Dissolve, now: float) -> None:
        mine = self.root
        if self.local.status != Status.MEMBER:
            return
        winner = _plain(message.winner)
        if mine is None:
            # We joined lately and have not heard of our root yet. Most likely we joined
            # the winner (the Dissolve comes from a loser next to us): take its root. If
            # we joined the loser, we are soon alone, drop the root, and meet the winner
            # as another overlay. (Dissolving here made joiners into the winner dissolve
            # over and over: one peer 208 times in 20 s.)
            self.on_root(winner, now)
            return
        if _key(winner) == _key(mine):
            lost = self.cut  # the side cut off from this same root dissolves
        else:
            lost = loses(mine, winner, self.local.config.merge_size_ratio)
        if lost:
            self._dissolve(winner, message.contacts, "dissolve", now)

    def _dissolve(self, winner: Root, contacts: Sequence[PeerInfo], why: str, now: float) -> None:
        """Our overlay loses: tell our neighbours, and rejoin through the winner's contacts."""
        local, root = self.local, self.root
        local.emit(Merging(now, local.id, 0 if root is None else root.id, winner.id, why))
        notice = Dissolve(winner, tuple(contacts[:MAX_CONTACTS]))
        for addr in self.table.addresses():
            local.send(addr, notice)
        # The losing overlay's members all rejoin at once: spread them, about JOINS_PER_S
        # a second by its root's size estimate (joins into one neighbourhood contend).
        spread = min(
            MAX_SPREAD_PERIODS * local.config.update_interval_s,
            (1.0 if root is None else root.size) / JOINS_PER_S,
        )
        self._rejoin([(c.host, c.port) for c in contacts], now, local.rng.uniform(0.0, spread))
