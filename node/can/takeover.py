# Takeover: absorbing the zones of dead peers, and healing our view of the faces.
#
# Theory of operation
#   Dead zones are absorbed by the rule that keeps the kd-tree a kd-tree: a
#   dead region (a dead leaf, or siblings that are all dead, grouped into their
#   parent) is absorbed by the live leaves of its sibling subtree that touch
#   the split face between them; each extends its own box through the region
#   and drops that split from its path. This is "several zones may take over"
#   of seed 002 §6, made recursive so that adjacent simultaneous crashes are
#   repaired too.
#
#   The rule, from the taker's side (our own path is exact, dead nodes' may
#   not be): for a split sigma that is a face of our zone, our path gives the
#   box B of sigma's other subtree. When that subtree has no survivor (no live
#   zone lies inside B; co-takers that grew into B from our side stick out of
#   it), the tree operation is "our subtree replaces sigma's parent": every
#   leaf of ours touching the face extends through B. So we take our slab of
#   B, once it is covered by dead zones and free of live ones, and drop sigma
#   from our path. A single dead sibling, several takers, and siblings that
#   died together (their parent's subtree is then all dead) are all this one
#   rule.
#
#   Before the first takeover through a face we look into B (lookups routed to
#   points of it, see _checked); a live owner there answers and stops us. A
#   takeover that later proves wrong (first-hand news of a live zone inside B
#   overlapping us) is given back. Healing: a face of ours that stays uncovered
#   by known neighbours, or borders a dead region nobody absorbs, makes us look
#   up the owners of points across it.
#
#   Orphans: the rule needs the takers' paths to describe one tree. After
#   partitions that each side repaired its own way, they may not: at 1,000
#   peers a dead region's only neighbour across its face saw, by its path,
#   that face's other subtree reach far beyond the region, over a live zone,
#   and nobody took the region for good (campaign-sim partitions seed 2). So a
#   dead region next to us that the rule leaves alone for orphan_after_s after
#   we learnt of its death is taken by its extent: our zone stretched across one face, as far as dead
#   zones cover it and no live zone we know lies in it, after a look into it
#   as above. The faces wait their turn (one update period more for each
#   dimension and side), and such a takeover yields to any live zone that
#   turns out to overlap it (give_back), so that two orphan takers, or an
#   orphan taker and the rule's, do not keep overlapping.
#
# Rules
#   1. A dead region is never absorbed while a live node known to us overlaps
#      it (our news of it is stale).
#   2. Randomness (lookup points, nonces) comes from the shared rng, in the
#      order the checks run; time only from `now`.

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from node.can.geometry import (
    abutment,
    contained,
    contains,
    covered_by,
    next_hop,
    overlap,
    uncovered,
)
from node.can.local import LocalNode
from node.can.neighbours import NeighbourTable
from node.can.status import Status
from node.events import Inconsistent, TookOver
from node.wire import Lookup, PathEntry, PeerInfo, Update

__all__ = ["MAX_CHECK_LOOKUPS", "Takeover"]

# Lookups into a dead subtree before taking it over, of each of two kinds (see _checked).
MAX_CHECK_LOOKUPS = 8
# Our recent takeovers kept for give_back.
MAX_TAKEN = 16

Box = tuple[tuple[float, ...], tuple[float, ...]]
DeadBox = tuple[tuple[float, ...], tuple[float, ...], int]  # (lo, hi, id) of a dead zone
Zone = tuple[tuple[float, ...], tuple[float, ...], tuple[PathEntry, ...]]


@dataclass(frozen=True)
class _Taken:
    """A takeover we made: the other subtree's box, our zone before and after
    (it can be undone while our zone stays as it made it: a proposal bumps
    the instance but not the zone, the prune rule the path but not the box),
    and until when (the dead members' tombstones, which stop their news)."""

    box: Box
    split: int  # the split we dropped (its other subtree is `box`)
    before: Zone
    after: Zone
    until: float
    orphan: bool = False  # taken by its extent (`box` is the slab), see _take_orphan


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


def _first_and_last(
    infos: Sequence[PeerInfo],
) -> list[tuple[float, float, float, float, PeerInfo]]:
    """Each zone's bounds in its first and last dimensions, with the info; a peer
    without a zone gets infinite ones (overlap() of no dimensions is True)."""
    inf = math.inf
    return [
        (i.lo[0], i.hi[0], i.lo[-1], i.hi[-1], i) if i.lo else (-inf, inf, -inf, inf, i)
        for i in infos
    ]


def _has_survivor(box: tuple[list[float], list[float]], live: Sequence[PeerInfo]) -> bool:
    """Whether a live zone we know lies inside the subtree `box` (it repairs itself)."""
    blo, bhi = box
    return any(overlap(i.lo, i.hi, blo, bhi) and contained(i.lo, i.hi, blo, bhi) for i in live)


class Takeover:
    """Dead regions, their absorption and its undoing, face coverage and healing."""

    def __init__(self, local: LocalNode, table: NeighbourTable) -> None:
        self.local = local
        self.table = table
        # split id -> when the look into its dead other subtree ends (_checked)
        self.checks: dict[int, float] = {}
        self.checks_run = -math.inf  # checks that ended before this were acted on
        self.taken: list[_Taken] = []  # our recent takeovers (give_back)
        self._unsettled_ticks = 0
        self._regions: list[DeadBox] | None = None
        self._regions_version = -1  # the table's version _regions was computed at
        self._coverage: tuple[object, str | None] = (None, None)  # (inputs, coverage_problem)

    # -- timers ----------------------------------------------------------------------------------------

    def next_deadline(self) -> float:
        """The earliest check not yet run (inf: none)."""
        return min((d for d in self.checks.values() if d > self.checks_run), default=math.inf)

    def checks_due(self, now: float) -> bool:
        return any(self.checks_run < d <= now for d in self.checks.values())

    def expire(self, now: float) -> None:
        interval = self.local.config.update_interval_s
        for sid in [s for s, d in self.checks.items() if now >= d + interval]:
            del self.checks[sid]

    # -- dead regions ----------------------------------------------------------------------------------

    def dead_boxes(self) -> list[DeadBox]:
        """(lo, hi, id) of dead zones not already covered by live zones we know (cached).

        A tombstone overlapping a live descendant is stale news (it split before
        it died) and is left out. So is one that cannot matter to us: every slab
        we could absorb lies in our zone stretched along one dimension, so a
        dead zone outside all of those stretches is skipped (this keeps the
        cost low in large overlays with many tombstones).
        """
        if self._regions is None or self._regions_version != self.table.version:
            self._regions = self._compute_dead_boxes()
            self._regions_version = self.table.version
        return self._regions

    def _compute_dead_boxes(self) -> list[DeadBox]:
        local = self.local
        live = [k.info for k in self.table.known.values()]
        if local.lo:
            live.append(local.info())
        out = []
        mine = tuple(zip(local.lo, local.hi, strict=True)) if local.lo else None
        rows: list[tuple[float, float, float, float, PeerInfo]] | None = None
        for stone, _ in self.table.tombstones.values():
            slo, shi = stone.lo, stone.hi
            if not slo:
                continue
            if mine is not None and not _within_one_stretch(mine, slo, shi):
                continue
            if rows is None:
                rows = _first_and_last(live)
            # overlap() on the first and last dimensions inline first: most zones we
            # know fail there, without a call (the hot spot of large overlays).
            s0, t0, s1, t1 = slo[0], shi[0], slo[-1], shi[-1]
            touching = [
                i
                for a0, b0, a1, b1, i in rows
                if b0 > s0 and t0 > a0 and b1 > s1 and t1 > a1 and overlap(slo, shi, i.lo, i.hi)
            ]
            sids = tuple(e.sid for e in stone.path)
            if sids and any(tuple(e.sid for e in i.path[: len(sids)]) == sids for i in touching):
                continue
            if touching and covered_by(stone.lo, stone.hi, [(i.lo, i.hi) for i in touching]):
                continue
            out.append((stone.lo, stone.hi, stone.id))
        return out

    def _tombstone_touches_us(self) -> bool:
        """Cheap test before dead_boxes(): does any dead zone share a face with ours?
        (A slab we could absorb is covered by dead zones, and those next to our
        face share it with us, so without one there is nothing to do.)"""
        lo, hi = self.local.lo, self.local.hi
        if not self.table.tombstones or not lo:
            return False
        return any(
            stone.lo and abutment(lo, hi, stone.lo, stone.hi) is not None
            for stone, _ in self.table.tombstones.values()
        )

    def dead_regions_nearby(self) -> bool:
        return bool(self._dead_pieces_next_to_us(limit=1))

    def _dead_pieces_next_to_us(self, limit: int) -> list[Box]:
        """Parts of dead zones that no live zone we know covers and that share a face
        with ours. A dead zone that touches us but whose uncovered rest lies
        elsewhere (split before it died, its halves owned by nodes we need not
        know) is no reason to hold still, and we could not learn better by
        looking across our own faces."""
        if not self._tombstone_touches_us():
            return []
        mylo, myhi = self.local.lo, self.local.hi
        out: list[Box] = []
        live = [(k.info.lo, k.info.hi) for k in self.table.known.values()]
        for lo, hi, _ in self.dead_boxes():
            if abutment(mylo, myhi, lo, hi) is None:
                continue
            cuts = [(a, b) for a, b in live if overlap(lo, hi, a, b)]
            pieces = uncovered(lo, hi, cuts, limit=1000)
            if pieces is None:
                pieces = [(tuple(lo), tuple(hi))]  # too fragmented to tell: count all of it
            for piece in pieces:
                if abutment(mylo, myhi, piece[0], piece[1]) is not None:
                    out.append(piece)
                    if len(out) >= limit:
                        return out
        return out

    # -- absorbing -------------------------------------------------------------------------------------

    def repair(self, now: float) -> None:
        """Absorb every dead slab we are responsible for (see the header)."""
        if not self.local.in_overlay() or not self.table.tombstones:
            return
        for _ in range(8):  # a takeover can bring us to another dead zone
            if not self._absorb_once(now):
                break
        else:
            return
        self._take_orphan(now)

    def _absorb_once(self, now: float) -> bool:
        if not self._tombstone_touches_us():
            return False
        dead = self.dead_boxes()
        if not dead:
            return False
        live = [k.info for k in self.table.known.values()]
        path = self.local.path
        for k in range(len(path) - 1, -1, -1):
            slab = self._slab(k, dead, live, now)
            if slab is not None:
                self._take(path[k], slab, dead, now)
                return True
        return False

    def _slab(
        self, k: int, dead: list[DeadBox], live: list[PeerInfo], now: float
    ) -> tuple[list[float], list[float]] | None:
        """The box of the other subtree of our k-th split, if its slab in front of
        us is ours to take now (dead, free of live zones, and looked into)."""
        entry = self.local.path[k]
        box = self._other_subtree(k)
        if box is None:
            return None
        blo, bhi = box
        if not any(overlap(lo, hi, blo, bhi) for lo, hi, _ in dead):
            return None
        if _has_survivor(box, live):
            return None  # the other subtree still has a live leaf: it repairs itself
        slab_lo, slab_hi = self._slab_of(entry, box)
        if any(overlap(slab_lo, slab_hi, i.lo, i.hi) for i in live):
            return None
        relevant = [(lo, hi) for lo, hi, _ in dead if overlap(lo, hi, slab_lo, slab_hi)]
        if not covered_by(slab_lo, slab_hi, relevant):
            return None  # part of it is unknown to us: wait for news
        if not self._checked(entry.sid, (blo, bhi), dead, live, now):
            return None
        return blo, bhi

    def _slab_of(
        self, entry: PathEntry, box: tuple[list[float], list[float]]
    ) -> tuple[list[float], list[float]]:
        """The slab in front of us of the other subtree `box` of split `entry`: our
        zone stretched through that subtree across the split."""
        local = self.local
        d = entry.dim
        slab_lo, slab_hi = list(local.lo), list(local.hi)
        if entry.upper:
            slab_lo[d], slab_hi[d] = box[0][d], local.lo[d]
        else:
            slab_lo[d], slab_hi[d] = local.hi[d], box[1][d]
        return slab_lo, slab_hi

    def _other_subtree(self, k: int) -> tuple[list[float], list[float]] | None:
        """The box of the other subtree of our k-th split, if that split is a face of ours."""
        local = self.local
        entry = local.path[k]
        d = entry.dim
        if (local.lo[d] if entry.upper else local.hi[d]) != entry.pos:
            return None  # shadowed by a later split: not a face of ours
        blo, bhi = (list(x) for x in local.space.box_of_path(local.path[:k]))
        if entry.upper:
            bhi[d] = entry.pos  # the other subtree is below
        else:
            blo[d] = entry.pos
        return blo, bhi

    def _take(
        self,
        entry: PathEntry,
        box: tuple[list[float], list[float]],
        dead: list[DeadBox],
        now: float,
    ) -> None:
        """Extend our zone through the other subtree `box` of split `entry`."""
        local = self.local
        blo, bhi = box
        d = entry.dim
        slab_lo, slab_hi = self._slab_of(entry, box)
        members = sorted(ident for lo, hi, ident in dead if overlap(lo, hi, slab_lo, slab_hi))
        lo, hi = list(local.lo), list(local.hi)
        if entry.upper:
            lo[d] = blo[d]
        else:
            hi[d] = bhi[d]
        path = tuple(e for e in local.path if e.sid != entry.sid)
        self._grow(lo, hi, path, members, (tuple(blo), tuple(bhi)), entry.sid, now)
        self.checks.pop(entry.sid, None)

    # -- orphans ---------------------------------------------------------------------------------------

    def _take_orphan(self, now: float) -> bool:
        """Take a dead region next to us that the rule has left alone for
        orphan_after_s, by its extent (see the header), through the first face
        whose turn has come and whose look found nobody alive."""
        local = self.local
        config = local.config
        wait = config.orphan_wait_s
        if wait <= 0 or local.status != Status.MEMBER or not self._tombstone_touches_us():
            return False  # (an orphan slab starts with a dead zone next to our face)
        # Dead zones we learnt of long enough ago (a tombstone's expiry is when we
        # learnt it plus its ttl): the rule has had its time with them.
        tombstones, ttl = self.table.tombstones, config.tombstone_ttl_s
        dead = self.dead_boxes()
        live = [k.info for k in self.table.known.values()]
        for d in range(local.space.n):
            for upper in (True, False):
                turn = 2 * d + (0 if upper else 1)
                learnt_by = now - wait - turn * config.update_interval_s
                face = self._face_entry(d, upper)
                if face is None:
                    continue
                slab = self._orphan_slab(d, upper, dead, live)
                if slab is None or any(
                    tombstones[ident][1] - ttl > learnt_by
                    for lo, hi, ident in dead
                    if ident in tombstones and overlap(lo, hi, *slab)
                ):
                    continue
                if not self._checked(-1 - turn, slab, dead, live, now):
                    continue
                self._take_slab(face, slab, dead, now)
                self.checks.pop(-1 - turn, None)
                return True
        return False

    def _face_entry(self, d: int, upper: bool) -> int | None:
        """The index in our path of the split that makes our lower (upper=True) or
        upper face in dimension d, if any and not the space's edge."""
        local = self.local
        at = local.lo[d] if upper else local.hi[d]
        if at == (local.space.lo[d] if upper else local.space.hi[d]):
            return None
        for k in range(len(local.path) - 1, -1, -1):
            e = local.path[k]
            if e.dim == d and e.upper == upper and e.pos == at:
                return k
        return None

    def _orphan_slab(
        self, d: int, upper: bool, dead: list[DeadBox], live: list[PeerInfo]
    ) -> tuple[list[float], list[float]] | None:
        """Our zone stretched across its lower (upper=True) or upper face in
        dimension d, as far as dead zones cover it and no live zone we know lies
        in it (None: not even one dead zone's depth)."""
        local = self.local
        at = local.lo[d] if upper else local.hi[d]
        ends = sorted(
            {
                (lo[d] if upper else hi[d])
                for lo, hi, _ in dead
                if (lo[d] < at if upper else hi[d] > at)
            },
            reverse=upper,
        )
        best = None
        for end in ends:
            slab_lo, slab_hi = list(local.lo), list(local.hi)
            if upper:
                slab_lo[d], slab_hi[d] = end, at
            else:
                slab_lo[d], slab_hi[d] = at, end
            if any(overlap(slab_lo, slab_hi, i.lo, i.hi) for i in live):
                break
            relevant = [(lo, hi) for lo, hi, _ in dead if overlap(lo, hi, slab_lo, slab_hi)]
            if not covered_by(slab_lo, slab_hi, relevant):
                break
            best = (slab_lo, slab_hi)
        return best

    def _take_slab(
        self,
        face: int,
        slab: tuple[list[float], list[float]],
        dead: list[DeadBox],
        now: float,
    ) -> None:
        """Extend our zone through `slab` across the face made by path[face]; a new
        split of ours at the slab's far end takes that split's place in our path."""
        local = self.local
        entry = local.path[face]
        d = entry.dim
        lo, hi = list(local.lo), list(local.hi)
        if entry.upper:
            lo[d] = slab[0][d]
        else:
            hi[d] = slab[1][d]
        members = sorted(ident for dlo, dhi, ident in dead if overlap(dlo, dhi, *slab))
        moved = PathEntry(local.split_id(), d, lo[d] if entry.upper else hi[d], entry.upper)
        path = (*local.path[:face], moved, *local.path[face + 1 :])
        box = (tuple(slab[0]), tuple(slab[1]))
        self._grow(lo, hi, path, members, box, entry.sid, now, orphan=True)

    def _grow(
        self,
        lo: list[float],
        hi: list[float],
        path: tuple[PathEntry, ...],
        members: list[int],
        box: Box,
        split: int,
        now: float,
        *,
        orphan: bool = False,
    ) -> None:
        """Our zone becomes [lo, hi) with `path` by a takeover of the dead `members`
        through `box` across split `split`: kept on record for give_back."""
        local, table = self.local, self.table
        # The dead nodes' last neighbour lists tell us who borders what we take.
        for member in members:
            for info in table.their_neighbors.pop(member, ()):
                table.learn(info, now)
        volume = local.space.volume(local.lo, local.hi)
        before = (local.lo, local.hi, local.path)
        table.set_zone(lo, hi, path, "takeover", now)
        stones = [table.tombstones[m][1] for m in members if m in table.tombstones]
        del self.taken[: max(0, len(self.taken) + 1 - MAX_TAKEN)]
        self.taken.append(
            _Taken(
                box,
                split,
                before,
                (local.lo, local.hi, local.path),
                min([now + local.config.tombstone_ttl_s, *stones]),
                orphan,
            )
        )
        local.emit(TookOver(now, members, local.space.volume(local.lo, local.hi) - volume))
        if orphan:
            local.emit(Inconsistent(now, "orphan dead region taken by its extent", members))
        table.send_updates(now)

    def give_back(self, now: float, speakers: Sequence[PeerInfo]) -> None:
        """Undo a takeover that was wrong: a live zone we did not know of lies inside
        the subtree we took from, and overlaps us (that subtree's survivor took what
        we took) or is a leaf of that subtree (the split we dropped is in its path):
        by the takeover rule the subtree repairs itself. Without the second case a
        survivor that grew inside the subtree while we took our slab of it left a
        strip between us that nobody may absorb: its slab towards the strip overlaps
        us, and for us the strip is no longer the other side of a split (docs/can.md,
        "A survivor that grows inside the subtree we took from"). Only on first-hand
        news of it (a stale summary may be of a dead node, and giving back then would
        leave a gap): the peers in `speakers`, who spoke to us just now.

        While our zone is still what the takeover made it, the zone before it comes
        back. After later changes (more takeovers, say, while a partition made a
        whole subtree look dead), we give back what lies across the split we dropped
        and put the split back in our path: at 1,000 peers a takeover during a
        partition, kept through two more, left a region that the subtree's survivor
        could not take (we stuck into its slab) nor anyone else (a gap for good). Not
        after a split of ours: part of what we took is a joiner's then."""
        local = self.local
        zone = (local.lo, local.hi, local.path)
        self.taken = [
            t for t in self.taken if now < t.until and overlap(local.lo, local.hi, *t.box)
        ]
        if not self.taken:
            return
        fresh = [info for info in speakers if info.lo]
        for index in range(len(self.taken) - 1, -1, -1):
            taken = self.taken[index]
            blo, bhi = taken.box
            survivor = next(
                (
                    info
                    for info in fresh
                    if overlap(info.lo, info.hi, blo, bhi)
                    and overlap(info.lo, info.hi, local.lo, local.hi)
                )
                if taken.orphan  # yields to any live zone in what it took
                else (
                    info
                    for info in fresh
                    if contained(info.lo, info.hi, blo, bhi)
                    and (
                        overlap(info.lo, info.hi, local.lo, local.hi)
                        or any(e.sid == taken.split for e in info.path)
                    )
                ),
                None,
            )
            if survivor is None:
                continue
            if taken.after == zone:
                lo, hi, path = taken.before
            elif self._only_grew(taken):
                lo, hi, path = self._across(taken)
            else:
                continue  # we split since: what we took is partly a joiner's now
            del self.taken[index]
            self.table.set_zone(lo, hi, path, "gave back", now)
            local.emit(Inconsistent(now, "took over a live subtree: gave it back", [survivor.id]))
            self.table.send_updates(now)
            return

    def _only_grew(self, taken: _Taken) -> bool:
        """Whether our zone only grew since `taken` (more takeovers: no split since)."""
        local = self.local
        lo, hi, path = taken.after
        sids = {e.sid for e in path}
        return contained(lo, hi, local.lo, local.hi) and all(e.sid in sids for e in local.path)

    def _across(self, taken: _Taken) -> Zone:
        """Our zone without what lies across the split that `taken` dropped, and our
        path with that split back in its place."""
        local = self.local
        before_path = taken.before[2]
        at = next(k for k, e in enumerate(before_path) if e.sid == taken.split)
        entry = before_path[at]
        lo, hi = list(local.lo), list(local.hi)
        if entry.upper:
            lo[entry.dim] = max(lo[entry.dim], entry.pos)
        else:
            hi[entry.dim] = min(hi[entry.dim], entry.pos)
        earlier = {e.sid for e in before_path[:at]}
        path = list(local.path)
        if taken.orphan:  # the split it put in the dropped one's place goes
            moved = {e.sid for e in taken.after[2]} - {e.sid for e in before_path}
            path = [e for e in path if e.sid not in moved]
        place = max((k + 1 for k, e in enumerate(path) if e.sid in earlier), default=0)
        path.insert(place, entry)
        return tuple(lo), tuple(hi), tuple(path)

    def _checked(
        self,
        sid: int,
        box: tuple[list[float], list[float]],
        dead: list[DeadBox],
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
        if self._departed_exactly(box, dead):
            return True
        config = self.local.config
        deadline = self.checks.get(sid)
        if deadline is not None:
            if now < deadline:
                return False
            if now < deadline + config.update_interval_s:
                return True
        for point in self._check_points(box, dead, live):
            self.route_lookup(point, now)
        self.checks[sid] = now + config.propose_timeout_s
        return False

    def _departed_exactly(self, box: tuple[list[float], list[float]], dead: list[DeadBox]) -> bool:
        """Whether the subtree `box` is covered by the zones of peers that left by a
        MERGE commit: each said so itself, with its zone as it was when it went (it can
        split no more), so nobody unknown can live in there and no look is needed. A
        graceful leave is repaired at once instead of after propose_timeout_s, during
        which its neighbours refuse every change around it (at 1,000 peers with steady
        churn, leaves ran out of attempts on "dead zone nearby")."""
        departed, tombstones = self.table.departed, self.table.tombstones
        blo, bhi = box
        inside = []
        for lo, hi, ident in dead:
            if not overlap(lo, hi, blo, bhi):
                continue
            stone = tombstones.get(ident)
            if stone is None or departed.get(ident) != stone[0].instance:
                return False
            inside.append((lo, hi))
        return bool(inside) and covered_by(blo, bhi, inside)

    def _check_points(
        self,
        box: tuple[list[float], list[float]],
        dead: list[DeadBox],
        live: list[PeerInfo],
    ) -> list[tuple[float, ...]]:
        """Where _checked looks: first what nobody we know holds (a live zone we do
        not know would be there), the largest parts first; then a point in each
        dead zone (its taker may be a live zone of the subtree that we do not know)."""
        blo, bhi = box
        rng = self.local.rng
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
            space = self.local.space
            pieces.sort(key=lambda piece: -space.volume(piece[0], piece[1]))
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
        return points

    # -- coverage and healing --------------------------------------------------------------------------

    def coverage_problem(self) -> str | None:
        """Check that the known direct neighbours tile every inner face of our zone exactly."""
        local, table = self.local, self.table
        if not local.lo:
            return "no zone"
        # It depends on our zone, the direct set and what we know of it (in `version`).
        key = (table.version, table.direct_version, local.lo, local.hi)
        if key != self._coverage[0]:
            self._coverage = (key, self._coverage_problem())
        return self._coverage[1]

    def _coverage_problem(self) -> str | None:
        local = self.local
        space = local.space
        for d in range(space.n):
            for upper in (False, True):
                at = local.hi[d] if upper else local.lo[d]
                if at == (space.hi[d] if upper else space.lo[d]):
                    continue
                face_area = 1.0
                for o in range(space.n):
                    if o != d:
                        face_area *= (local.hi[o] - local.lo[o]) / space.span[o]
                covered = self._face_covered(d, upper, at)
                if abs(covered - face_area) > 1e-9 * face_area:
                    return "face not covered" if covered < face_area else "face over-covered"
        return None

    def _face_covered(self, d: int, upper: bool, at: float) -> float:
        """The fraction of the space's cross-section that our direct neighbours
        across our face (`d`, `upper`, at `at`) cover along it."""
        local = self.local
        space = local.space
        covered = 0.0
        for ident in self.table.direct:
            info = self.table.known[ident].info
            if (info.lo[d] if upper else info.hi[d]) != at:
                continue
            area = 1.0
            for o in range(space.n):
                if o != d:
                    area *= (
                        min(local.hi[o], info.hi[o]) - max(local.lo[o], info.lo[o])
                    ) / space.span[o]
            covered += area
        return covered

    def heal(self, now: float) -> None:
        """If a face of our zone stays uncovered by known neighbours (or borders a
        dead region nobody absorbs) for two ticks, look up the owners of sample
        points there. Runs once per tick."""
        if self.local.status != Status.MEMBER or not self.local.lo:
            return
        problem = self.coverage_problem() == "face not covered" or self.dead_regions_nearby()
        self._unsettled_ticks = self._unsettled_ticks + 1 if problem else 0
        if self._unsettled_ticks < 2:
            return
        # Points in dead regions next to us first: when nobody absorbs one, our
        # tombstone is usually stale (a live zone we do not know covers it), and
        # the owner's answer to the lookup tells us so.
        points = self._dead_face_points(limit=2) + self._uncovered_points(limit=3)
        for point in points[:3]:
            self.route_lookup(point, now)
        if self.dead_regions_nearby():
            self._probe_beyond(now)
            self._unblock(now)

    def _unblock(self, now: float) -> None:
        """For each slab of a dead subtree in front of us that we may not take yet:
        if part of it is covered by no dead zone we know (we lack a tombstone of a
        zone that never bordered us), look it up: the lookup ends next to the dead
        zone, at a peer that holds the tombstone and answers with it (on_lookup). If
        a live zone from outside the subtree sticks into the slab (it took part of
        the subtree while we, a survivor there, were unknown to it), tell it we
        live: our word makes it give back (give_back). At most MAX_CHECK_LOOKUPS
        of each a tick."""
        local, table = self.local, self.table
        dead = self.dead_boxes()
        live = [k.info for k in table.known.values()]
        looked = told = 0
        for k in range(len(local.path) - 1, -1, -1):
            entry = local.path[k]
            box = self._other_subtree(k)
            if box is None:
                continue
            blo, bhi = box
            if not any(overlap(lo, hi, blo, bhi) for lo, hi, _ in dead):
                continue
            if _has_survivor(box, live):
                continue  # a survivor there repairs it, not us
            slab_lo, slab_hi = self._slab_of(entry, box)
            intruders = [i for i in live if overlap(slab_lo, slab_hi, i.lo, i.hi)]
            for info in intruders:
                if told < MAX_CHECK_LOOKUPS:
                    local.send((info.host, info.port), Update(local.info(), (), ()))
                    told += 1
            held = [(lo, hi) for lo, hi, _ in dead] + [(i.lo, i.hi) for i in intruders]
            pieces = uncovered(slab_lo, slab_hi, held, limit=100)
            for lo, hi in (pieces or [])[: MAX_CHECK_LOOKUPS - looked]:
                point = tuple(local.rng.uniform(a, b) for a, b in zip(lo, hi, strict=True))
                self.route_lookup(point, now)
                looked += 1

    def _probe_beyond(self, now: float) -> None:
        """Probe the peers that hold up the absorption of a dead region next to us and
        that we know only by hearsay.

        A dead region nobody absorbs is often held up by a peer we heard of only from
        the dead (their last summaries): if it lives in the other subtree of the split
        between us and the region, it bars our takeover, rightly (that subtree repairs
        itself); if it died too, nobody who borders it first-hand may be left to say
        so, and lookups into the region have nobody to reach. This is the expanding
        ring search of the CAN paper (Ratnasamy et al. 2001, §3.3) made exact: a probe
        settles it (an answer is first-hand news, silence a burial). Asked: the peers
        inside such a subtree that did not speak to us lately, known to us or in the
        last neighbour lists of the dead zones next to us; at most MAX_CHECK_LOOKUPS
        a tick."""
        local, table = self.local, self.table
        dead = self.dead_boxes()
        hearsay: dict[int, PeerInfo] = {}
        for stone, _ in table.tombstones.values():
            if stone.lo and abutment(local.lo, local.hi, stone.lo, stone.hi) is not None:
                for info in table.their_neighbors.get(stone.id, ()):
                    if info.id not in table.known:
                        hearsay.setdefault(info.id, info)
        probed = 0
        for k in range(len(local.path) - 1, -1, -1):
            box = self._other_subtree(k)
            if box is None or not any(overlap(lo, hi, box[0], box[1]) for lo, hi, _ in dead):
                continue
            for ident in sorted(hearsay):
                info = hearsay[ident]
                inside = info.lo and contained(info.lo, info.hi, box[0], box[1])
                if inside and table.probe_hearsay(info, now):
                    probed += 1
                    if probed >= MAX_CHECK_LOOKUPS:
                        return

    def _dead_face_points(self, limit: int) -> list[tuple[float, ...]]:
        """Points just across our faces inside dead regions that border us."""
        local = self.local
        out: list[tuple[float, ...]] = []
        for lo, hi in self._dead_pieces_next_to_us(limit):
            face = abutment(local.lo, local.hi, lo, hi)
            if face is None:
                continue
            d, we_are_below = face
            point = [
                local.rng.uniform(max(a0, b0), min(a1, b1))
                for a0, a1, b0, b1 in zip(local.lo, local.hi, lo, hi, strict=True)
            ]
            point[d] = local.hi[d] if we_are_below else math.nextafter(local.lo[d], -math.inf)
            out.append(tuple(point))
            if len(out) >= limit:
                break
        return out

    def _uncovered_points(self, limit: int) -> list[tuple[float, ...]]:
        """Points just across our faces that no known direct neighbour's zone contains."""
        local = self.local
        out: list[tuple[float, ...]] = []
        space = local.space
        boxes = [(lo, hi) for _, lo, hi in self.table.boxes()]
        for d in range(space.n):
            for upper in (False, True):
                at = local.hi[d] if upper else local.lo[d]
                if at == (space.hi[d] if upper else space.lo[d]):
                    continue
                for _ in range(8):
                    point = [
                        local.rng.uniform(a, b) for a, b in zip(local.lo, local.hi, strict=True)
                    ]
                    point[d] = at if upper else math.nextafter(at, -math.inf)
                    if not any(contains(lo, hi, point) for lo, hi in boxes):
                        out.append(tuple(point))
                        if len(out) >= limit:
                            return out
                        break
        return out

    # -- lookups ---------------------------------------------------------------------------------------

    def route_lookup(self, point: tuple[float, ...], now: float) -> None:
        """Send a Lookup for the owner of `point` (it answers us with an Update)."""
        local, known = self.local, self.table.known
        lookup = Lookup(local.rng.getrandbits(32), point, local.info(), 0)
        hop = next_hop(local.space, local.lo, local.hi, self.table.boxes(), point)
        if hop is None or hop == -1:
            if not known:
                return
            # No neighbour of ours is closer: start from a random node we know.
            ident = sorted(known)[local.rng.randrange(len(known))]
        else:
            ident = hop
        info = known[ident].info
        local.send((info.host, info.port), lookup)

    def on_lookup(self, lookup: Lookup, now: float) -> None:
        """Pass a Lookup on towards its point; as its owner, learn the origin and answer."""
        local, table = self.local, self.table
        origin = lookup.origin
        if origin.id == local.id:
            return
        hop = next_hop(local.space, local.lo, local.hi, table.boxes(), lookup.point)
        if hop == -1:
            if table.learn(origin, now, direct=True):
                table.recompute_direct(now)
                if self.taken:
                    self.give_back(now, [origin])
            local.send((origin.host, origin.port), Update(local.info(), (), ()))
            return
        if hop is None:
            # A hole next to us (a dead zone nobody has absorbed yet): the origin is
            # looking into it; tell it the tombstones we hold there (_unblock).
            stones = tuple(
                stone
                for stone, _ in table.tombstones.values()
                if stone.lo and contains(stone.lo, stone.hi, lookup.point)
            )
            if stones:
                local.send(
                    (origin.host, origin.port),
                    Update(local.info(), (), stones[: local.config.max_gossip_tombstones]),
                )
            return
        if lookup.hops >= local.config.max_hops:
            return
        info = table.known[hop].info
        local.send(
            (info.host, info.port), Lookup(lookup.nonce, lookup.point, origin, lookup.hops + 1)
        )
