# Dynamic balancing in the peer's scheduler (seed 002 §4.2, Algorithms 1 and
# 2), on one agent with a hand-made neighbourhood: DLB moves an idle job to a
# neighbour whose residue runs it now, QB to one whose longest queue is
# shorter than the job's average queue position less one; a job moves once.

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from node.can.geometry import Dimension, Space
from node.sched.agent import SchedAgent, SchedConfig
from node.wire import (
    Endpoint,
    JobInfo,
    JobRoute,
    PeerInfo,
    SchedBeat,
    TaskCancel,
    TaskOffer,
)

SPACE = Space([Dimension("size", 0, 64), Dimension("inv", 0, 4), Dimension("v", 0, 1, True)])
ME = ("10.0.0.1", 7000)
MATE = ("10.0.0.2", 7000)  # in our cluster
ENTRY = ("10.0.0.9", 7000)  # where the job was submitted
SMALL = ("10.0.0.7", 7000)  # a neighbour in a 4-node cluster
BIG = ("10.0.0.8", 7000)  # a neighbour in a 16-node cluster, more capable in every way
FAR = ("10.0.0.6", 7000)  # a neighbour's neighbour (indirect), in a 6-node cluster
HEARD_AT, BALANCE_AT = 4.0, 5.0  # balance_s = 5: the first pass is due by then


def info(ident: int, addr, point, lo, hi) -> PeerInfo:
    return PeerInfo(ident, addr[0], addr[1], 1, point, lo, hi, ())


def agent(balance: str = "qb+dlb", neighbours: str = "direct") -> tuple[SchedAgent, list, list]:
    sent: list = []
    events: list = []
    known = {
        7: SimpleNamespace(info=info(7, SMALL, (4.0, 1.5, 0.2), (4, 0, 0), (8, 4, 1))),
        8: SimpleNamespace(info=info(8, BIG, (16.0, 2.0, 0.7), (8, 0, 0), (64, 4, 1))),
        6: SimpleNamespace(info=info(6, FAR, (6.0, 1.5, 0.9), (4, 0, 0.5), (8, 4, 1))),
    }
    can = SimpleNamespace(
        config=SimpleNamespace(space=SPACE),
        point=(8.0, 2.0, 0.5),
        lo=(0.0, 0.0, 0.0),
        hi=(4.0, 4.0, 1.0),
        known=known,
        direct={7, 8},  # FAR is known through them
    )
    config = SchedConfig(
        beat_s=1.0, dead_after_s=4.0, balance=balance, balance_s=5.0, neighbours=neighbours
    )
    a = SchedAgent(
        config,
        address=ME,
        can=can,
        rng=random.Random(1),
        send=lambda addr, msg: sent.append((addr, msg)),
        emit=events.append,
    )
    a.set_cluster([ME, MATE], 0.0)
    return a, sent, events


def beat(a: SchedAgent, addr, *, load=0, size=4, free=4, maxql=0, tasks=()) -> None:
    message = SchedBeat(load, size, free, maxql, (0.0,) * 6, tasks)
    assert a.handle_message(addr, message, HEARD_AT) is None


def idle_job(a: SchedAgent, *, size: int = 2, ahead: int = 3, mate_position: int = 3) -> None:
    """Job 42 placed on us: its task here waits behind `ahead` older tasks; our
    mate says its task there is at `mate_position`; its entry is alive."""
    for k in range(ahead):  # older jobs of another representative (our mate)
        older = JobInfo(10 + k, 2, 5.0, float(k), (2.0, 1.0, 0.5))
        assert a.handle_message(MATE, TaskOffer(older, 1000 + k, 1), 0.5) is None
    job = JobInfo(42, size, 5.0, 100.0, (float(size), 1.0, 0.5))
    route = JobRoute(job, 77, Endpoint(*ENTRY), 2, 2)  # placed here
    assert a.handle_message(("10.0.0.5", 7000), route, 0.5) is None
    assert a.handle_message(ME, TaskOffer(job, 77, 1), 0.5) is None  # our own task
    beat(a, ENTRY, load=-1, size=1, free=0, tasks=((42, 77, 0),))
    shared = ((42, 77, mate_position), *((10 + k, 1000 + k, 0) for k in range(ahead)))
    beat(a, MATE, load=ahead + 1, size=2, free=0, maxql=ahead + 1, tasks=shared)


def moves(sent: list) -> list:
    return [(addr, m) for addr, m in sent if isinstance(m, JobRoute) and m.moved]


def test_dlb_moves_an_idle_job_to_the_least_capable_neighbour_that_runs_it_now():
    a, sent, events = agent("dlb")
    idle_job(a)
    beat(a, SMALL, free=4, size=4)
    beat(a, BIG, free=16, size=16)
    a.handle_timer(BALANCE_AT)
    ((to, route),) = moves(sent)
    assert to == SMALL  # both could run it now; the one less capable in every way fits
    assert (route.job.id, route.attempt, route.entry.host) == (42, 77, "10.0.0.9")
    assert (42, 77) not in a.reps
    assert (MATE, TaskCancel(42, 77, 1)) in sent  # its tasks are taken back
    assert [(e.kind, e.to, e.by) for e in events if e.kind == "job_moved"] == [
        ("job_moved", "10.0.0.7", "dlb")
    ]


def test_dlb_leaves_a_job_where_no_neighbour_has_room():
    a, sent, _ = agent("dlb")
    idle_job(a)
    beat(a, SMALL, free=1, size=4, load=1, maxql=1)
    beat(a, BIG, free=1, size=16, load=3, maxql=3)
    a.handle_timer(BALANCE_AT)
    assert not moves(sent) and (42, 77) in a.reps


@pytest.mark.parametrize(("maxql", "moved"), [(0, True), (1, True), (2, False), (5, False)])
def test_qb_moves_only_to_queues_shorter_than_the_average_position_less_one(maxql, moved):
    a, sent, _ = agent("qb")
    idle_job(a, ahead=4, mate_position=2)  # positions 4 here, 2 there: averageQP 3
    beat(a, SMALL, free=0, size=4, load=maxql, maxql=maxql)
    beat(a, BIG, free=0, size=16, load=9, maxql=9)
    a.handle_timer(BALANCE_AT)
    assert [to for to, _ in moves(sent)] == ([SMALL] if moved else [])


def test_a_moved_job_never_moves_again():
    a, sent, _ = agent("qb+dlb")
    job = JobInfo(42, 2, 5.0, 100.0, (2.0, 1.0, 0.5))
    moved_here = JobRoute(job, 77, Endpoint(*ENTRY), 3, 2, None, 0, True)
    assert a.handle_message(("10.0.0.5", 7000), moved_here, 0.5) is None
    beat(a, ENTRY, load=-1, size=1, free=0, tasks=((42, 77, 0),))
    assert a.reps[(42, 77)].moved
    beat(a, SMALL, free=4, size=4)
    a.handle_timer(BALANCE_AT)
    assert not moves(sent) and (42, 77) in a.reps


def test_a_neighbour_whose_cluster_shrank_below_the_job_is_no_candidate():
    a, sent, _ = agent("dlb")
    idle_job(a)
    beat(a, SMALL, free=1, size=1)  # one live member left
    a.handle_timer(BALANCE_AT)
    assert not moves(sent)


@pytest.mark.parametrize("neighbours", ["direct", "indirect"])
def test_indirect_neighbours_are_beaten_and_balanced_over_only_when_asked(neighbours):
    # Direct neighbours are never beaten: our load rides our overlay updates to them.
    a, sent, _ = agent("dlb", neighbours)
    idle_job(a)
    beat(a, SMALL, free=1, size=4, load=1, maxql=1)
    beat(a, BIG, free=1, size=16, load=3, maxql=3)
    beat(a, FAR, free=6, size=6)  # room for the job, one hop further
    a.handle_timer(BALANCE_AT)
    indirect = neighbours == "indirect"
    assert [to for to, _ in moves(sent)] == ([FAR] if indirect else [])
    beaten = {to for to, m in sent if isinstance(m, SchedBeat)}
    assert not {SMALL, BIG} & beaten and (FAR in beaten) == indirect


def test_nonsense_aggregates_are_refused_and_tiny_ones_do_not_divide_by_zero():
    a, _, _ = agent()
    huge = SchedBeat(0, 4, 4, 0, (1e200, 5.0, 0.0, 0.0, 0.0, 0.0), ())
    assert a.handle_message(SMALL, huge, HEARD_AT) == "bad aggregates"
    tiny = SchedBeat(0, 4, 4, 0, (1e-200, 5.0, 0.0, 0.0, 0.0, 0.0), ())
    assert a.handle_message(SMALL, tiny, HEARD_AT) is None
    assert a.match.push_target(HEARD_AT) == (SMALL, 0)  # no score, but no crash either
