# Liveness between scheduling peers (seed 000 §2.1, seed 002 §4.2): our load
# figures ride the overlay's periodic updates to its direct neighbours
# (figures(), take(): seed 000 §4.1.1, they add no messages); every `beat_s` a
# SchedBeat goes, with the same figures, to every peer we share an attempt with
# (entry and representative, representative and members), to our cluster's
# members and, with neighbours = "indirect", to the peers we balance over that
# get no update of ours, naming the shared (job, attempt) pairs with
# each task's queue position; a side that no longer lists one has forgotten it
# (crashed and came back, or lost the message), and what was lost is sent
# again or given up. Representatives send JobAck (or their JobEnd, until the
# entry acknowledges it) to the entry every beat; members send TaskDone until
# acknowledged. Any message from a peer counts as a sign of life. Our
# cluster's members beat each other: the live view, its residue and maxQL.
#
# Rules
#   One beat is built in a fixed order: the representative's attempts, the
#   member's tasks, the entry's jobs, our cluster's members, the peers we
#   reach; the datagrams go out in the order their peers were first named.
#   A beat, or the figures an update carries, is checked (bounds on its lists
#   and figures) before anything in it is believed.

from __future__ import annotations

from node.sched.config import MAX_AGGREGATE, MAX_SHARED, Address
from node.sched.context import Context
from node.sched.entry import EntryRole
from node.sched.liveness import Liveness
from node.sched.matchmaking import Matchmaker
from node.sched.member import MemberRole
from node.sched.records import Heard
from node.sched.representative import RepRole
from node.wire import NeighbourLoad, SchedBeat

__all__ = ["Beats"]

Key = tuple[int, int]  # (job, attempt)


class Beats:
    """Sends our beats and takes the others'; each role does its share."""

    def __init__(
        self,
        ctx: Context,
        live: Liveness,
        match: Matchmaker,
        *,
        entry: EntryRole,
        rep: RepRole,
        member: MemberRole,
    ) -> None:
        self._ctx = ctx
        self._live = live
        self._match = match
        self._entry = entry
        self._rep = rep
        self._member = member

    def check(self, figures: SchedBeat | NeighbourLoad) -> str | None:
        """Why a peer's load figures cannot be believed, or None."""
        if len(figures.above) != len(self._live.above) or not all(
            0 <= x <= MAX_AGGREGATE for x in figures.above
        ):
            return "bad aggregates"
        if not (figures.load >= -1 and 0 <= figures.free <= figures.size and figures.maxql >= 0):
            return "bad load figures"
        return None

    def take(self, source: Address, figures: SchedBeat | NeighbourLoad, now: float) -> None:
        """What `source` says of its load now (checked)."""
        self._live.state_of[source] = Heard(
            figures.load, figures.size, figures.free, figures.maxql, figures.above, now
        )

    def figures(self, now: float) -> NeighbourLoad:
        """Our load figures now, Kim's aggregates computed afresh (seed 000 §4.1.1:
        before each update)."""
        live = self._live
        live.above = self._match.aggregate(now)
        load = -1 if self._ctx.gone else self._member.load()
        size, free, maxql = self._match.cluster_view(now)
        return NeighbourLoad(load, size, free, maxql, live.above)

    def on_beat(self, source: Address, beat: SchedBeat, now: float) -> str | None:
        if len(beat.tasks) > MAX_SHARED:
            return "too many tasks"
        problem = self.check(beat)
        if problem is not None:
            return problem
        self.take(source, beat, now)
        listed = {(job, attempt) for job, attempt, _ in beat.tasks}
        self._rep.heard_beat(source, beat, listed, now)
        self._member.heard_beat(source, beat, listed, now)
        return None

    def beat(self, now: float) -> None:
        ctx, live = self._ctx, self._live
        shared: dict[Address, list[Key]] = {}
        self._rep.beat(now, shared)
        self._member.beat(now, shared)
        if not ctx.gone:
            self._entry.beat(now, shared)
        for member in live.members[1:]:
            if member not in live.lost and live.silent(member, live.member_since, now):
                live.lost.add(member)
            shared.setdefault(member, [])
        if ctx.config.neighbours == "indirect":
            # Our direct neighbours have our figures from our updates.
            direct = {(info.host, info.port) for info in self._match.neighbours()}
            for info in self._match.reach():
                if (info.host, info.port) not in direct:
                    shared.setdefault((info.host, info.port), [])
        shared.pop(ctx.address, None)
        if not shared:
            return
        mine = self.figures(now)
        positions = self._member.positions()
        for addr, keys in shared.items():
            tasks = tuple((j, a, positions.get((j, a), 0)) for j, a in sorted(set(keys)))
            ctx.send(
                addr,
                SchedBeat(
                    mine.load, mine.size, mine.free, mine.maxql, mine.above, tasks[:MAX_SHARED]
                ),
            )

    def forget(self, now: float) -> None:
        """Keep a peer's state bounded on a long run (late messages about what
        was forgotten are answered as about unknown ones)."""
        self._live.forget(now)
        self._entry.forget(now)
