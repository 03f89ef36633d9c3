# The neighbour table of one peer: who we know, who borders us, who is dead.
#
# Theory of operation
#   `known` holds the newest news of every peer we heard of (first-hand, or in
#   a neighbour's summaries); `direct` is the subset whose zone shares a face
#   with ours, recomputed whenever our zone or their news changes. Each update
#   we send to the direct neighbours carries our own info, summaries of our
#   direct neighbours (each path sent as what follows its common prefix with
#   ours) and the tombstones we learnt recently.
#
#   Crash (failure detection): a direct neighbour silent for `suspect_after_s`
#   is probed; without an answer it is declared dead and remembered as a
#   tombstone (with its last zone and path), which is also gossiped in
#   updates. A tombstone lives `tombstone_ttl_s` and is passed on for
#   `gossip_window_s` after we learn it, so that news of a death spreads once
#   and dies out.
#
#   Stale information (seed 002 §6.1): every zone change bumps the owner's
#   instance; news about a node only replaces older news (higher instance);
#   news about a tombstoned node is discarded. Paths stay exact tree paths:
#   a split id missing from a peer that shares a later split with us was
#   removed by a merge, so we drop it too (prune_path).
#
# Rules
#   1. News from peers is validated only when it is news (most summaries are
#      old news); invalid news is counted in `invalid_news`, never raised.
#   2. `version` changes whenever something the dead-zone view of takeover.py
#      depends on may have changed (so that it can cache that view), and with
#      every change of `known` or `tombstones` (rule 4 relies on it).
#   3. What the other parts hold per peer is dropped through `on_bury` and
#      `on_newer`, which the facade wires to the conflict protocol.
#   4. Most updates repeat what the same neighbour said last time: each carries
#      the sender's count of changes of its content (`news`), and one that
#      repeats the last we took is replaced by that one (`taken`), validated and
#      expanded already, whatever its content says; only its root's word is its
#      own. Most summaries repeat what the same neighbour said last time. A summary
#      equal to the one it sent last time is old news if what learning it
#      depends on is as it was right after we learnt it: the sender's path,
#      our path, and our `known` and `tombstones` entries for that peer (the
#      objects themselves: news replaces them, never mutates them). Then
#      learning it again would only refresh its time; we do only that
#      (`_Seen`), and skip expanding, validating and comparing it.

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import msgspec

from node.can.geometry import abutment
from node.can.local import Address, LocalNode
from node.events import Inconsistent, PeerDeclaredDead, ZoneChanged
from node.wire import (
    Message,
    PathEntry,
    PeerInfo,
    Probe,
    ProbeReply,
    Root,
    Tombstone,
    Update,
    check_peer_info,
)

__all__ = ["Known", "NeighbourTable"]


@dataclass
class Known:
    info: PeerInfo
    heard_at: float  # last time any news of it arrived
    direct_at: float = -math.inf  # last time it spoke to us, or became our neighbour (suspicion)
    spoke_at: float = -math.inf  # last time it spoke to us itself (only that)


@dataclass(slots=True)
class _Summary:
    """A summary as we took it from one neighbour, and our entries for its peer
    right after (rule 4)."""

    packed: PeerInfo  # as it came (path relative to the sender's)
    info: PeerInfo  # what we made of it
    known: Known | None
    stone: tuple[Tombstone, float] | None
    refresh: bool  # whether learning it again refreshes known.heard_at (else: nothing)


@dataclass(slots=True)
class _Seen:
    """The last update we took from one neighbour (rule 4)."""

    update: Update
    their_path: tuple[PathEntry, ...]
    path: tuple[PathEntry, ...]  # ours, after we took it
    summaries: dict[int, _Summary]
    infos: tuple[PeerInfo, ...]  # what their_neighbors got
    # For taking the same update again at once (all its summaries were
    # valid, none twice): the peers it names, our entries for them, whom it
    # refreshes. Made when it first comes again.
    whole: (
        tuple[list[int], list[Known | None], list[tuple[Tombstone, float] | None], list[Known]]
        | None
    ) = None
    # The table's version when `whole` last held: `known` and `tombstones` change only
    # with a version bump, so at the same version it holds again without looking.
    held_at: int = -1

    def repeat(
        self,
        known: dict[int, Known],
        tombstones: dict[int, tuple[Tombstone, float]],
        now: float,
        version: int,
    ) -> bool:
        """Take the same update again if nothing it depends on changed (rule 4)."""
        whole = self.whole
        if whole is not None and self.held_at == version:
            for k in whole[3]:
                k.heard_at = now
            return True
        if whole is None:
            if len(self.summaries) != len(self.update.neighbors):
                return False
            values = self.summaries.values()
            whole = self.whole = (
                list(self.summaries),
                [s.known for s in values],
                [s.stone for s in values],
                [s.known for s in values if s.refresh],  # type: ignore[misc]
            )
        ids, knowns, stones, refresh = whole
        if not (
            all(map(operator.is_, map(known.get, ids), knowns))
            and all(map(operator.is_, map(tombstones.get, ids), stones))
        ):
            return False
        self.held_at = version
        for k in refresh:
            k.heard_at = now
        return True


def _same_update(a: Update, b: Update) -> bool:
    """Whether `b` says what `a` said, the root's word (reunion.py) aside: by the
    sender's count of changes when it keeps one, else by the content."""
    if a is b:
        return True
    if a.news or b.news:
        return a.news == b.news
    return a.me == b.me and a.neighbors == b.neighbors and a.tombstones == b.tombstones


def _ignore_bury(ident: int) -> None:
    return None


def _ignore_silent(info: PeerInfo, now: float) -> None:
    return None


def _no_root() -> Root | None:
    return None


def _ignore_newer(ident: int, instance: int) -> None:
    return None


class NeighbourTable:
    """Known peers, the direct set, tombstones and suspects, and the gossip
    that keeps them fresh. Mutated by the inputs of the overlay's facade."""

    def __init__(self, local: LocalNode) -> None:
        self.local = local
        self.known: dict[int, Known] = {}
        self.direct: set[int] = set()
        self.direct_version = 0  # bumped whenever `direct` may have changed
        self.tombstones: dict[int, tuple[Tombstone, float]] = {}  # id -> (stone, expires)
        # Peers whose own MERGE commit told us they left, and the instance it carried:
        # their tombstone's zone is first-hand and final (takeover.py needs no look).
        self.departed: dict[int, int] = {}
        self.suspects: dict[int, tuple[int, float]] = {}  # id -> (probe nonce, deadline)
        self.rtt: dict[int, float] = {}  # id -> smoothed RTT of our Propose/ProposeOK exchanges
        self.their_neighbors: dict[int, tuple[PeerInfo, ...]] = {}  # each one's last summaries
        self.seen: dict[int, _Seen] = {}  # each neighbour's last update (rule 4)
        self.invalid_news = 0
        self.version = 0  # see rule 2
        self.next_update = math.inf  # when we next send updates (the tick)
        self.on_bury: Callable[[int], None] = _ignore_bury
        self.on_newer: Callable[[int, int], None] = _ignore_newer
        # A peer buried for silence (reunion.py asks it again later), and the root's
        # word that our updates carry (reunion.py).
        self.on_silent: Callable[[PeerInfo, float], None] = _ignore_silent
        self.root_word: Callable[[], Root | None] = _no_root
        # What our updates last said (me, neighbours, tombstones) and our count of its changes.
        self._said: tuple[PeerInfo, tuple[PeerInfo, ...], tuple[Tombstone, ...]] | None = None
        self._news = 0

    def changed(self) -> None:
        self.version += 1

    # -- our zone and who borders it --------------------------------------------------------------------

    def set_zone(
        self,
        lo: Sequence[float],
        hi: Sequence[float],
        path: Iterable[PathEntry],
        reason: str,
        now: float,
    ) -> None:
        """Our zone becomes [lo, hi) with `path`: bump our instance, recompute the direct set."""
        local = self.local
        local.lo, local.hi, local.path = tuple(lo), tuple(hi), tuple(path)
        local.instance += 1
        self.changed()
        self.recompute_direct(now)
        local.emit(ZoneChanged(now, reason, local.lo, local.hi, local.instance))

    def recompute_direct(self, now: float) -> None:
        lo, hi = self.local.lo, self.local.hi
        self.direct_version += 1
        if not lo:
            self.direct = set()
            return
        # Zones that share a face with ours touch or overlap it in every dimension:
        # the first and last are checked inline first (most known zones fail there).
        lo0, hi0, lo1, hi1 = lo[0], hi[0], lo[-1], hi[-1]
        self.direct = {
            ident
            for ident, k in self.known.items()
            if (info := k.info).lo
            and info.lo[0] <= hi0
            and lo0 <= info.hi[0]
            and info.lo[-1] <= hi1
            and lo1 <= info.hi[-1]
            and abutment(lo, hi, info.lo, info.hi) is not None
        }
        for ident in self.direct:
            k = self.known[ident]
            if k.direct_at == -math.inf:
                k.direct_at = now  # a new neighbour gets a full suspicion period

    def refresh_direct(self, idents: Iterable[int], now: float) -> None:
        """recompute_direct for a few peers whose news changed (our zone did not)."""
        lo, hi = self.local.lo, self.local.hi
        if not lo:
            return
        self.direct_version += 1
        for ident in idents:
            k = self.known.get(ident)
            if k is not None and k.info.lo and abutment(lo, hi, k.info.lo, k.info.hi) is not None:
                self.direct.add(ident)
                if k.direct_at == -math.inf:
                    k.direct_at = now
            else:
                self.direct.discard(ident)

    def boxes(self) -> list[tuple[int, tuple[float, ...], tuple[float, ...]]]:
        """(id, lo, hi) of the direct neighbours, for geometry.next_hop."""
        return [(i, self.known[i].info.lo, self.known[i].info.hi) for i in sorted(self.direct)]

    def infos(self) -> tuple[PeerInfo, ...]:
        """The direct neighbours' news, in id order."""
        return tuple(self.known[i].info for i in sorted(self.direct))

    def addresses(self) -> list[Address]:
        """The direct neighbours' addresses, in id order."""
        return [(self.known[i].info.host, self.known[i].info.port) for i in sorted(self.direct)]

    # -- news ----------------------------------------------------------------------------------------------

    def learn(self, info: PeerInfo, now: float, *, direct: bool = False) -> bool:
        """Record news of a peer if it is newer than what we know. Returns True if it changed."""
        if info.id == self.local.id or info.id in self.tombstones or not info.lo:
            return False
        known = self.known.get(info.id)
        if known is None:
            return self._record(info, None, now, direct=direct)
        # A summary carries no path; the peer's own word (direct) fills it in.
        newer = info.instance > known.info.instance
        fills_path = (
            not newer
            and direct
            and info.instance == known.info.instance
            and info.path
            and not known.info.path
        )
        if newer or fills_path:
            return self._record(info, known, now, direct=direct) and newer
        if info.instance == known.info.instance:
            known.heard_at = now
        if direct:
            known.direct_at = known.spoke_at = now
        return False

    def _record(self, info: PeerInfo, known: Known | None, now: float, *, direct: bool) -> bool:
        if check_peer_info(info, self.local.space.n) is not None:
            self.invalid_news += 1  # validated only when used: most summaries are old news
            return False
        if known is not None:
            self.on_newer(info.id, info.instance)  # a newer instance closes its command
        self.known[info.id] = Known(
            info,
            now,
            now if direct else (known.direct_at if known else -math.inf),
            now if direct else (known.spoke_at if known else -math.inf),
        )
        self.changed()
        return True

    def bury(self, info: PeerInfo | Tombstone, now: float, reason: str) -> None:
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
        if reason == "left":
            self.departed[info.id] = info.instance
        expires = now + self.local.config.tombstone_ttl_s if old is None else old[1]
        self.tombstones[info.id] = (stone, expires)
        self.changed()
        self.known.pop(info.id, None)
        self.rtt.pop(info.id, None)
        self.suspects.pop(info.id, None)
        self.seen.pop(info.id, None)
        self.on_bury(info.id)
        self.direct.discard(info.id)
        self.direct_version += 1
        if reason != "gossip":
            self.local.emit(PeerDeclaredDead(now, info.id, reason))

    def take_summaries(self, sender: int, update: Update, now: float) -> list[int]:
        """Learn a neighbour's own info and its summaries; returns the ids whose news changed."""
        me = update.me
        local, known, tombstones = self.local, self.known, self.tombstones
        learned = [sender] if self.learn(me, now, direct=True) else []
        self.suspects.pop(sender, None)
        seen = self.seen.get(sender)
        if seen is not None and (seen.path is not local.path or seen.their_path != me.path):
            seen = None  # what its summaries meant may have changed
        if seen is None:
            self.prune_path(me.path, now)  # else: done with these paths already
        before: dict[int, _Summary] = {}
        same = False
        if seen is not None:
            same = _same_update(seen.update, update)
            if same and seen.repeat(known, tombstones, now, self.version):
                if seen.infos:
                    self.their_neighbors[sender] = seen.infos
                return learned
            before = seen.summaries
        taken: dict[int, _Summary] = {}
        summaries = []
        for packed in update.neighbors:
            ident = packed.id
            old = before.get(ident)
            if (
                old is not None
                and (same or old.packed == packed)
                and known.get(ident) is old.known
                and tombstones.get(ident) is old.stone
            ):
                if old.refresh:
                    old.known.heard_at = now  # type: ignore[union-attr]
                summaries.append(old.info)
                taken[ident] = old
                continue
            # Old news from elsewhere: reuse what we hold (same instance, same
            # zone) instead of expanding the compressed path again.
            held = known.get(ident)
            info: PeerInfo | None
            if (
                held is not None
                and held.info.instance == packed.instance
                and held.info.path
                and held.info.lo == packed.lo
                and held.info.hi == packed.hi
            ):
                info = held.info
            else:
                info = self.expand(packed, me.path)
                if info is None:
                    self.invalid_news += 1
                    continue
            summaries.append(info)
            if ident == local.id or ident == sender:
                taken[ident] = _Summary(
                    packed, info, known.get(ident), tombstones.get(ident), False
                )
                continue
            if self.learn(info, now):
                learned.append(ident)
            k = known.get(ident)
            stone = tombstones.get(ident)
            if k is not None and k.info.instance == info.instance and info.lo:
                taken[ident] = _Summary(packed, info, k, stone, True)
            elif (
                stone is not None
                or not info.lo
                or (k is not None and k.info.instance > info.instance)
            ):
                taken[ident] = _Summary(packed, info, k, stone, False)
            # else it was invalid news: learn it again next time (and count it again)
        infos = tuple(summaries)
        if infos:
            self.their_neighbors[sender] = infos
        self.seen[sender] = _Seen(update, me.path, local.path, taken, infos)
        return learned

    def seen_before(self, sender: int, update: Update) -> bool:
        """Whether `update` repeats the last update we took from `sender` (no need to
        validate it again: `taken` stands for it)."""
        seen = self.seen.get(sender)
        return seen is not None and self.taken(sender, update) is seen.update

    def taken(self, sender: int, update: Update) -> Update:
        """The update we took from `sender` that `update` repeats (rule 4), else `update`."""
        seen = self.seen.get(sender)
        if seen is not None and _same_update(seen.update, update):
            return seen.update
        return update

    def take_tombstones(self, stones: Iterable[Tombstone], now: float) -> bool | None:
        """Bury the peers of gossiped tombstones that are news. Returns whether any
        was buried, or None on a tombstone of our own (we were evicted; the
        stones after it are left unread)."""
        changed = False
        for stone in stones:
            if stone.id == self.local.id:
                return None
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
                    stone.id,
                    "x",
                    1,
                    stone.instance,
                    self.local.point,
                    stone.lo,
                    stone.hi,
                    stone.path,
                )
                if stone.lo and check_peer_info(as_info, self.local.space.n) is not None:
                    self.invalid_news += 1  # checked only when it is news, like summaries
                    continue
                self.bury(stone, now, "gossip")
                changed = True
        return changed

    def prune_path(self, other: Sequence[PathEntry], now: float) -> None:
        """Drop split ids that a peer sharing a later split no longer has (they were merged away)."""
        local = self.local
        mine = [e.sid for e in local.path]
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
        # one that has not yet taken its share (the takeover drops the split then).
        faces = {
            e.sid for e in local.path if (local.lo[e.dim] if e.upper else local.hi[e.dim]) == e.pos
        }
        stale = {sid for sid in mine[:last_shared] if sid not in ancestors and sid not in faces}
        if stale:
            local.path = tuple(e for e in local.path if e.sid not in stale)
            local.emit(Inconsistent(now, "stale-split-dropped", sorted(stale)))

    # -- failure detection -----------------------------------------------------------------------------

    def probe_quiet(self, now: float) -> None:
        """Probe the direct neighbours that went quiet (one nonce each, in id order)."""
        config = self.local.config
        for ident in sorted(self.direct):
            known = self.known[ident]
            if ident not in self.suspects and now - known.direct_at > config.suspect_after_s:
                self._probe(known.info, now)

    def probe_hearsay(self, info: PeerInfo, now: float) -> bool:
        """Probe a peer we know of only second-hand (or knew: a dead neighbour's last
        neighbour list), unless it spoke to us lately or is being probed. Its answer
        makes it first-hand news; its silence buries it (bury_unanswered)."""
        if info.id in self.suspects or info.id in self.tombstones or info.id == self.local.id:
            return False
        known = self.known.get(info.id)
        if known is None:
            self.learn(info, now)
            known = self.known.get(info.id)
            if known is None:
                return False  # invalid news
        elif now - known.spoke_at <= self.local.config.suspect_after_s:
            return False
        self._probe(known.info, now)
        return True

    def _probe(self, info: PeerInfo, now: float) -> None:
        nonce = self.local.rng.getrandbits(32)
        self.suspects[info.id] = (nonce, now + self.local.config.probe_timeout_s)
        self.local.send((info.host, info.port), Probe(nonce))

    def bury_unanswered(self, now: float) -> bool:
        """Declare dead the suspects whose probe went unanswered. Returns True if any expired."""
        expired = [ident for ident, (_, deadline) in self.suspects.items() if now >= deadline]
        for ident in expired:
            known = self.known.get(ident)
            self.suspects.pop(ident, None)
            if known is not None:
                self.bury(known.info, now, "no answer to probe")
                self.on_silent(known.info, now)
        return bool(expired)

    def take_probe_reply(self, sender: int, reply: ProbeReply, now: float) -> bool:
        """A probe's answer. Returns True if it buried the sender (not a member)."""
        if reply.me is None or reply.me.id != sender:
            known = self.known.get(sender)
            if known is not None:
                self.bury(known.info, now, "probe: not a member")
                return True
            return False
        self.suspects.pop(sender, None)
        if self.learn(reply.me, now, direct=True):
            self.refresh_direct([sender], now)
        return False

    def expire(self, now: float) -> None:
        """Drop tombstones past their time and indirect news not refreshed lately."""
        config = self.local.config
        expired = [i for i, (_, until) in self.tombstones.items() if now >= until]
        for ident in expired:
            del self.tombstones[ident]
            self.departed.pop(ident, None)
        stale = [
            i
            for i, k in self.known.items()
            if i not in self.direct and now - k.heard_at > config.forget_news_after_s
        ]
        for ident in stale:
            del self.known[ident]
            self.rtt.pop(ident, None)
        if expired or stale:
            self.changed()
            for ident in (*expired, *stale):
                self.their_neighbors.pop(ident, None)
                self.seen.pop(ident, None)

    # -- gossip ----------------------------------------------------------------------------------------

    def send_updates(self, now: float) -> None:
        """Send our info, our neighbours' summaries and fresh tombstones to every direct neighbour."""
        local = self.local
        if not local.in_overlay():
            return
        config = local.config
        # Each summary's path is sent as what follows its common prefix with ours.
        neighbors = tuple(self.summary(info) for info in self.infos())[: config.max_summaries]
        # Pass on only what we learnt recently, so that news of a death spreads
        # once and dies out instead of circulating after it expired somewhere.
        fresh_until = now + config.tombstone_ttl_s - config.gossip_window_s
        fresh = [item for item in self.tombstones.values() if item[1] >= fresh_until]
        fresh.sort(key=lambda item: -item[1])
        stones = tuple(stone for stone, _ in fresh[: config.max_gossip_tombstones])
        said = (local.info(), neighbors, stones)
        if said != self._said:
            self._said = said
            self._news += 1
        update = Update(*said, self.root_word(), self._news)
        message: Message = update if local.dress is None else local.dress(update, now)
        for addr in self.addresses():
            local.send(addr, message)

    def summary(self, info: PeerInfo, base: tuple[PathEntry, ...] | None = None) -> PeerInfo:
        """`info` with its path sent as what follows its common prefix with `base` (ours)."""
        shared = 0
        for mine, theirs in zip(self.local.path if base is None else base, info.path):  # noqa: B905
            if mine != theirs:
                break
            shared += 1
        return msgspec.structs.replace(info, path=info.path[shared:], prefix=shared)

    @staticmethod
    def expand(summary: PeerInfo, sender_path: tuple[PathEntry, ...]) -> PeerInfo | None:
        """A summary's full info (None if its prefix does not fit the sender's path)."""
        if summary.prefix == 0:
            return summary
        if summary.prefix > len(sender_path):
            return None
        return msgspec.structs.replace(
            summary, path=sender_path[: summary.prefix] + summary.path, prefix=0
        )
