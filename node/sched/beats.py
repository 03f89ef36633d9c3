# Liveness between scheduling peers (seed 000 §2.1, seed 002 §4.2): every
# `beat_s` a SchedBeat goes to the overlay's direct neighbours (load) and to
# every peer we share an attempt with (entry and representative,
# representative and members), naming the shared (job, attempt) pairs with
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
#   A beat is checked (bounds on its lists and figures) before anything in it
#   is believed.

from __future__ import annotations

from node.sched.config import MAX_AGGREGATE, MAX_SHARED, Address
from node.sched.context import Context
from node.sched.entry import EntryRole
from node.sched.liveness import Liveness
from node.sched.matchmaking import Matchmaker
from node.sched.member import MemberRole
from node.sched.records import Heard
from node.sched.representative import RepRole
from node.wire import SchedBeat

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

    def on_beat(self, source: Address, beat: SchedBeat, now: float) -> str | None:
        if len(beat.tasks) > MAX_SHARED:
            return "too many tasks"
        if len(beat.above) != len(self._live.above) or not all(
            0 <= x <= MAX_AGGREGATE for x in beat.above
        ):
            return "bad aggregates"
        if not (beat.load >= -1 and 0 <= beat.free <= beat.size and beat.maxql >= 0):
            return "bad load figures"
        heard = Heard(beat.load, beat.size, beat.free, beat.maxql, beat.above, now)
        self._live.state_of[source] = heard
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
        for info in self._match.reach():
            shared.setdefault((info.host, info.port), [])
        shared.pop(ctx.address, None)
        live.above = self._match.aggregate(now)
        load = -1 if ctx.gone else self._member.load()
        size, free, maxql = self._match.cluster_view(now)
        positions = self._member.positions()
        for addr, keys in shared.items():
            tasks = tuple((j, a, positions.get((j, a), 0)) for j, a in sorted(set(keys)))
            ctx.send(addr, SchedBeat(load, size, free, maxql, live.above, tasks[:MAX_SHARED]))

    def forget(self, now: float) -> None:
        """Keep a peer's state bounded on a long run (late messages about what
        was forgotten are answered as about unknown ones)."""
        self._live.forget(now)
        self._entry.forget(now)
