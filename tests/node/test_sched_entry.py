# The entry's side of exactly-once (node/sched/agent.py), on one agent with a
# hand-made neighbourhood: a representative the entry gave up on as silent
# may still be running the job. Its run is taken back rather than run a second
# time, the first completed run completes the job, and the outcome is
# reported once.

from __future__ import annotations

import random
from types import SimpleNamespace

from node.can.geometry import Dimension, Space
from node.events import JobAdopted, JobEnded
from node.sched.agent import SchedAgent, SchedConfig
from node.wire import (
    JobAck,
    JobCancel,
    JobEnd,
    JobHandover,
    JobInfo,
    JobRoute,
    JobTaken,
    PeerInfo,
)

SPACE = Space([Dimension("size", 0, 64), Dimension("inv", 0, 4), Dimension("v", 0, 1, True)])
ME = ("10.0.0.1", 7000)
NEXT = ("10.0.0.8", 7000)  # the neighbour towards the job's point
REP1, REP2 = ("10.0.0.21", 7000), ("10.0.0.22", 7000)  # the first and second try's representatives
JOB = JobInfo(42, 10, 5.0, 0.0, (10.0, 1.0, 0.5))  # outside our zone: routed to NEXT


def make_agent(address, sent: list, events: list) -> SchedAgent:
    nxt = PeerInfo(8, *NEXT, 1, (16.0, 2.0, 0.7), (8, 0, 0), (64, 4, 1), ())
    can = SimpleNamespace(
        config=SimpleNamespace(space=SPACE),
        point=(2.0, 2.0, 0.5),
        lo=(0.0, 0.0, 0.0),
        hi=(8.0, 4.0, 1.0),
        known={8: SimpleNamespace(info=nxt)},
        direct={8},
    )
    return SchedAgent(
        SchedConfig(beat_s=1.0, dead_after_s=4.0, balance="none"),
        address=address,
        can=can,
        rng=random.Random(1),
        send=lambda addr, msg: sent.append((addr, msg)),
        emit=events.append,
    )


class Entry:
    """An agent the job was submitted to, the job's first try acked as running
    by REP1, which then goes silent until the entry tries again."""

    def __init__(self) -> None:
        self.sent: list = []
        self.events: list = []
        self.agent = make_agent(ME, self.sent, self.events)
        self.now = 0.0
        self.agent.submit(JOB, self.now)
        (self.first,) = self.attempts()
        self.hear(REP1, JobAck(JOB.id, self.first, True))
        while len(self.attempts()) < 2:  # REP1 says nothing more: the entry tries again
            self.tick(0.5)
            assert self.now < 20, "the entry never gave up on a silent representative"
        self.second = self.attempts()[1]
        assert self.second != self.first

    def tick(self, seconds: float) -> None:
        self.now += seconds
        self.agent.handle_timer(self.now)

    def hear(self, source, message) -> None:
        assert self.agent.handle_message(source, message, self.now) is None

    def attempts(self) -> list[int]:
        return [m.attempt for a, m in self.sent if isinstance(m, JobRoute) and a == NEXT]

    def cancelled(self, to) -> list[int]:
        return [m.attempt for a, m in self.sent if isinstance(m, JobCancel) and a == to]

    def outcomes(self) -> list[JobEnded]:
        return [e for e in self.events if isinstance(e, JobEnded)]


def test_a_late_completion_of_a_try_given_up_completes_the_job_and_stops_the_current_one():
    e = Entry()
    e.hear(REP2, JobAck(JOB.id, e.second, True))
    e.hear(REP1, JobEnd(JOB.id, e.first, True, "", 5.0))
    assert [(o.ok, o.run_s) for o in e.outcomes()] == [(True, 5.0)]
    assert e.cancelled(REP2) == [e.second]  # its ranks are killed before they complete
    e.hear(REP2, JobEnd(JOB.id, e.second, True, "", 5.0))  # too late: not reported again
    assert len(e.outcomes()) == 1
    assert e.agent.counts["took_back"] == 1


def test_a_try_given_up_that_runs_is_taken_back_while_the_current_one_waits():
    e = Entry()
    e.hear(REP2, JobAck(JOB.id, e.second, False))  # placed, not started
    e.hear(REP1, JobAck(JOB.id, e.first, True))
    assert e.cancelled(REP2) == [e.second]
    assert e.cancelled(REP1) == []
    for _ in range(3):  # REP1 beats as the current try now: no new try
        e.tick(1.0)
        e.hear(REP1, JobAck(JOB.id, e.first, True))
    assert len(e.attempts()) == 2
    e.hear(REP1, JobEnd(JOB.id, e.first, True, "", 5.0))
    assert [o.ok for o in e.outcomes()] == [True]


def test_when_both_tries_run_the_current_one_is_kept():
    e = Entry()
    e.hear(REP2, JobAck(JOB.id, e.second, True))
    e.hear(REP1, JobAck(JOB.id, e.first, True))
    assert e.cancelled(REP1) == [e.first]
    assert e.cancelled(REP2) == []
    e.hear(REP2, JobEnd(JOB.id, e.second, True, "", 5.0))
    assert [o.ok for o in e.outcomes()] == [True]


def test_a_late_failure_of_a_try_given_up_changes_nothing():
    e = Entry()
    e.hear(REP2, JobAck(JOB.id, e.second, True))
    e.hear(REP1, JobEnd(JOB.id, e.first, False, "a rank failed", 0.0))
    assert e.outcomes() == [] and e.cancelled(REP2) == []
    assert e.agent.counts["late_end"] == 1


def test_an_adopting_entry_can_take_back_a_try_the_leaver_gave_up_on():
    e = Entry()
    e.hear(REP2, JobAck(JOB.id, e.second, False))
    e.agent.leave(e.now)
    ((to, handover),) = [(a, m) for a, m in e.sent if isinstance(m, JobHandover)]
    assert to == NEXT and handover.earlier == (e.first,) and handover.attempt == e.second
    sent, events = [], []
    adopter = make_agent(NEXT, sent, events)
    assert adopter.handle_message(ME, handover, e.now) is None
    assert adopter.handle_message(REP1, JobAck(JOB.id, e.first, True), e.now) is None
    assert (REP2, JobCancel(JOB.id, e.second)) in sent and (
        REP1,
        JobCancel(JOB.id, e.first),
    ) not in sent
    assert adopter.handle_message(REP1, JobEnd(JOB.id, e.first, True, "", 5.0), e.now) is None
    assert [(ev.ok, ev.run_s) for ev in events if isinstance(ev, JobEnded)] == [(True, 5.0)]


def test_a_hand_over_sent_again_after_the_job_ended_is_taken_but_not_adopted_again():
    sent, events = [], []
    adopter = make_agent(NEXT, sent, events)
    handover = JobHandover(JOB, 7, 1, None, ())
    assert adopter.handle_message(ME, handover, 0.0) is None
    assert adopter.handle_message(REP1, JobAck(JOB.id, 7, True), 0.5) is None
    assert adopter.handle_message(REP1, JobEnd(JOB.id, 7, True, "", 5.0), 6.0) is None
    assert adopter.handle_message(ME, handover, 6.2) is None  # our JobTaken was lost
    assert sum(isinstance(ev, JobAdopted) for ev in events) == 1
    assert sum(isinstance(ev, JobEnded) for ev in events) == 1
    assert [m for a, m in sent if isinstance(m, JobTaken)] == [JobTaken(JOB.id)] * 2


def test_a_leaving_entry_leaves_a_result_to_its_adopter():
    e = Entry()
    e.hear(REP2, JobAck(JOB.id, e.second, True))
    e.agent.leave(e.now)
    before = len(e.cancelled(REP2))
    e.hear(REP2, JobEnd(JOB.id, e.second, True, "", 5.0))
    assert len(e.cancelled(REP2)) == before  # not acknowledged: REP2 keeps it for the adopter
    assert e.outcomes() == []
