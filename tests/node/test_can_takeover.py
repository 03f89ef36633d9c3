# Crash takeover on CanOverlay directly (sans-IO): before taking over a dead
# subtree, a node looks into it, and a live owner there stops the takeover.
#
# The space is cut as below (cpu across, v up); A owns the lower left quarter.
# Split 1 (cpu = 50) has B = [50, 100) x [0, 1) on its other side. A learns by
# gossip that D died and that Y died with Y's zone before Y split for S (stale
# news, as in a burst of crashes): B then looks all dead to A, but S lives in
# it and does not border A.
#
#     v=1 +-----------+------+------+
#         |     N     |      |  S   |
#     0.5 +-----------+  D   +------+
#         |     A     |      |  Y   |
#     v=0 +-----------+------+------+
#        cpu=0       50     75     100

from __future__ import annotations

import dataclasses
import math

import msgspec
import pytest

from node.can.config import CanConfig
from node.events import Inconsistent, TookOver
from node.fields import FieldError
from node.wire import (
    COMMIT_MERGE,
    Commit,
    Lookup,
    PathEntry,
    PeerInfo,
    ProbeReply,
    Tombstone,
    Update,
)

from .conftest import CONFIG, SPACE, overlay

LEFT, RIGHT = PathEntry(1, 0, 50.0, False), PathEntry(1, 0, 50.0, True)
A_PATH = (LEFT, PathEntry(2, 1, 0.5, False))
N = PeerInfo(
    20, "10.0.0.20", 7000, 3, (10.0, 0.7), (0, 0.5), (50.0, 1), (LEFT, PathEntry(2, 1, 0.5, True))
)
D = Tombstone(30, 4, (50.0, 0), (75.0, 1), (RIGHT, PathEntry(3, 0, 75.0, False)))
Y_PATH = (RIGHT, PathEntry(3, 0, 75.0, True))
Y_STALE = Tombstone(40, 2, (75.0, 0), (100, 1), Y_PATH)
S = PeerInfo(
    50,
    "10.0.0.50",
    7000,
    1,
    (90.0, 0.8),
    (75.0, 0.5),
    (100, 1),
    (*Y_PATH, PathEntry(4, 1, 0.5, True)),
)


def member_a():
    a, wire = overlay(point=(20.0, 0.3))
    a.join([], 0.0)
    a.neighbours.set_zone((0, 0), (50.0, 0.5), A_PATH, "test", 0.0)  # as if it had joined long ago
    a.handle_message(N.id, (N.host, N.port), Update(N, (), ()), 0.1)
    wire.sent.clear()
    wire.events.clear()
    return a, wire


def hear_of_the_deaths(a, now: float) -> None:
    a.handle_message(N.id, (N.host, N.port), Update(N, (), (D, Y_STALE)), now)


def test_a_dead_subtree_is_looked_into_and_taken_after_silence():
    a, wire = member_a()
    hear_of_the_deaths(a, 1.0)
    lookups = [m for _, m in wire.take(Lookup)]
    assert (a.lo, a.hi) == ((0, 0), (50.0, 0.5))  # not yet
    # one lookup into each dead zone of B
    assert sorted(50 <= m.point[0] < 75 for m in lookups) == [False, True]
    assert all(m.origin.id == a.id for m in lookups)
    # it asks to be woken when the lookups have had their time, not before
    deadline = 1.0 + CONFIG.propose_timeout_s
    while (wake := a.get_timer()) < deadline:
        a.handle_timer(wake)
        assert (a.lo, a.hi) == ((0, 0), (50.0, 0.5))
    assert wake == deadline
    a.handle_timer(wake)
    assert (a.lo, a.hi) == ((0, 0), (SPACE.hi[0], 0.5))
    assert a.path == A_PATH[1:]
    [took] = [e for e in wire.events if isinstance(e, TookOver)]
    assert sorted(took.dead) == [D.id, Y_STALE.id]


def test_a_live_owner_found_in_the_subtree_stops_the_takeover():
    a, wire = member_a()
    hear_of_the_deaths(a, 1.0)
    assert wire.take(Lookup)
    a.handle_message(S.id, (S.host, S.port), Update(S, (), ()), 1.3)  # S answers a lookup
    for now in (3.0, 3.5, 5.0):
        a.handle_timer(now)
    assert (a.lo, a.hi) == ((0, 0), (50.0, 0.5))  # B repairs itself: S takes D
    assert not [e for e in wire.events if isinstance(e, TookOver)]


def test_the_look_covers_parts_of_the_subtree_nobody_known_holds():
    # Eight dead zones (a burst) tile exactly the slab in front of A; their
    # subtree's other half S, alive, touches A only at a corner, so A never
    # heard of it. The look must reach S's part, however many dead zones there are.
    a, wire = member_a()
    lower, upper = PathEntry(5, 1, 0.5, False), PathEntry(5, 1, 0.5, True)
    stones = []
    for k in range(8):
        path, lo, hi = [RIGHT, lower], 50.0, 100.0
        for level in range(3):
            mid = (lo + hi) / 2
            high = bool(k >> (2 - level) & 1)
            path.append(PathEntry(10 + 10 * level + (k >> (3 - level)), 0, mid, high))
            lo, hi = (mid, hi) if high else (lo, mid)
        stones.append(Tombstone(60 + k, 2, (lo, 0), (hi, 0.5), tuple(path)))
    a.handle_message(N.id, (N.host, N.port), Update(N, (), tuple(stones)), 1.0)
    lookups = [m for _, m in wire.take(Lookup)]
    assert any(m.point[0] >= 50 and m.point[1] >= 0.5 for m in lookups)  # into S's part
    s = PeerInfo(51, "10.0.0.51", 7000, 1, (90.0, 0.8), (50.0, 0.5), (100, 1), (RIGHT, upper))
    a.handle_message(s.id, (s.host, s.port), Update(s, (), ()), 1.2)  # S answers
    for now in (3.0, 3.5, 5.0):
        a.handle_timer(now)
    assert (a.lo, a.hi) == ((0, 0), (50.0, 0.5))  # S takes its dead half, not A


def test_a_takeover_of_a_live_subtree_is_given_back_when_its_owner_shows_up():
    # The look found nobody (S's answer was lost), A took the slab; S's news
    # arrives later: A returns to its zone and path of before, S keeps the slab.
    a, wire = member_a()
    hear_of_the_deaths(a, 1.0)
    a.handle_timer(1.0 + CONFIG.propose_timeout_s)
    assert (a.lo, a.hi) == ((0, 0), (100, 0.5))  # taken
    taker = PeerInfo(S.id, S.host, S.port, 3, S.point, (75.0, 0), (100, 1), Y_PATH)  # took Y
    # Second-hand news of it does not count (it may be of a dead node); S's own word does.
    a.handle_message(N.id, (N.host, N.port), Update(N, (taker,), ()), 3.4)
    assert (a.lo, a.hi) == ((0, 0), (100, 0.5))
    a.handle_message(S.id, (S.host, S.port), Update(taker, (), ()), 3.5)
    assert (a.lo, a.hi, a.path) == ((0, 0), (50.0, 0.5), A_PATH)
    [event] = [e for e in wire.events if isinstance(e, Inconsistent)]
    assert event.peers == [S.id]
    a.handle_message(N.id, (N.host, N.port), Update(N, (), ()), 4.0)  # later news: no flapping
    assert (a.lo, a.hi) == ((0, 0), (50.0, 0.5))


def test_a_leaf_of_the_subtree_that_grew_inside_it_makes_us_give_back():
    # The look missed it: a survivor of B (its path holds the split A dropped) that
    # grew inside B at the same time and does not overlap A. Kept, A's slab would
    # leave a strip between them that neither may absorb (docs/can.md); given back,
    # B repairs itself. A zone inside B from A's side (no such split) changes nothing.
    a, wire = member_a()
    took_over(a)
    ours = PeerInfo(71, "10.0.0.71", 7000, 1, (60.0, 0.8), (50.0, 0.5), (75.0, 1), A_PATH[1:])
    a.handle_message(ours.id, (ours.host, ours.port), Update(ours, (), ()), 3.3)
    assert (a.lo, a.hi) == ((0, 0), (100, 0.5))
    leaf = PeerInfo(70, "10.0.0.70", 7000, 1, (60.0, 0.8), (50.0, 0.5), (75.0, 1), (RIGHT,))
    a.handle_message(leaf.id, (leaf.host, leaf.port), Update(leaf, (), ()), 3.4)
    assert (a.lo, a.hi, a.path) == ((0, 0), (50.0, 0.5), A_PATH)
    [event] = [e for e in wire.events if isinstance(e, Inconsistent)]
    assert event.peers == [leaf.id]


def took_over(a, now: float = 1.0) -> None:
    hear_of_the_deaths(a, now)
    a.handle_timer(now + CONFIG.propose_timeout_s)
    assert (a.lo, a.hi) == ((0, 0), (100, 0.5))


S_TOOK_Y = PeerInfo(S.id, S.host, S.port, 3, S.point, (75.0, 0), (100, 1), Y_PATH)


def test_a_zone_that_changed_since_its_takeover_is_kept():
    a, _ = member_a()
    took_over(a)
    split = (*A_PATH[1:], PathEntry(9, 0, 75.0, False))
    a.neighbours.set_zone(
        (0, 0), (75.0, 0.5), split, "split", 3.0
    )  # as if it had split for a joiner
    a.handle_message(S.id, (S.host, S.port), Update(S_TOOK_Y, (), ()), 3.5)
    assert (a.lo, a.hi, a.path) == ((0, 0), (75.0, 0.5), split)


def test_what_lies_across_the_split_is_given_back_after_later_takeovers():
    # A took B, then more (here the upper half, as if N died): a survivor of B speaks.
    # A keeps its later gains but gives back what lies across the split it dropped,
    # and puts that split back in its path (at 1,000 peers a takeover during a
    # partition, kept through later ones, left a gap nobody could take).
    a, wire = member_a()
    took_over(a)
    a.neighbours.set_zone((0, 0), (100, 1), (), "takeover", 3.0)  # grew: no split since
    a.handle_message(S.id, (S.host, S.port), Update(S_TOOK_Y, (), ()), 3.5)
    assert (a.lo, a.hi, a.path) == ((0, 0), (50.0, 1), (LEFT,))
    [event] = [e for e in wire.events if isinstance(e, Inconsistent)]
    assert event.peers == [S.id]


def test_a_proposal_since_the_takeover_does_not_stop_the_give_back():
    a, _ = member_a()
    took_over(a)
    a.instance += 1  # a proposal bumps the instance; the zone is still the takeover's
    a.handle_message(S.id, (S.host, S.port), Update(S_TOOK_Y, (), ()), 3.5)
    assert (a.lo, a.hi, a.path) == ((0, 0), (50.0, 0.5), A_PATH)


def test_a_neighbour_known_second_hand_is_not_first_hand_news():
    # A hears of S only from summaries: first S's zone as it borders A's new
    # zone (a new neighbour gets a suspicion grace period, which is not S
    # speaking), then S's takeover of Y, which overlaps A.
    a, _ = member_a()
    took_over(a)
    s_before = PeerInfo(S.id, S.host, S.port, 2, S.point, S.lo, S.hi, S.path)
    a.handle_message(N.id, (N.host, N.port), Update(N, (s_before,), ()), 3.4)
    assert S.id in a.direct
    a.handle_message(N.id, (N.host, N.port), Update(N, (S_TOOK_Y,), ()), 3.6)
    assert (a.lo, a.hi) == ((0, 0), (100, 0.5))


def test_the_give_back_ends_with_the_tombstones_behind_it():
    # After the dead members' tombstones expire nobody would take back what A
    # gives back: a gap. So the record lives no longer than those tombstones.
    a, _ = member_a()
    took_over(a)
    late = 1.0 + CONFIG.tombstone_ttl_s + 0.1  # tombstones learned at 1.0
    assert late < 1.0 + CONFIG.propose_timeout_s + CONFIG.tombstone_ttl_s
    a.handle_message(S.id, (S.host, S.port), Update(S_TOOK_Y, (), ()), late)
    assert (a.lo, a.hi) == ((0, 0), (100, 0.5))


# B borders A across cpu = 50 (below D's zone in the picture, as if D had split for it).
B = PeerInfo(
    60,
    "10.0.0.60",
    7000,
    2,
    (60.0, 0.2),
    (50.0, 0),
    (75.0, 0.5),
    (RIGHT, PathEntry(3, 0, 75.0, False)),
)


def test_a_neighbour_first_known_from_a_probes_answer_is_listed():
    a, _ = member_a()
    a.handle_message(B.id, (B.host, B.port), ProbeReply(1, B), 2.0)
    assert B.id in a.direct


def test_a_neighbour_first_known_by_hearsay_is_listed_when_it_speaks():
    # N tells us of B without its path (a summary); B's own update only fills the path in,
    # which is no news, yet B borders us and must be listed (else our face at cpu = 50 is
    # never covered and we refuse every join, as after a partition during a join burst).
    a, _ = member_a()
    summary = msgspec.structs.replace(B, path=())
    a.neighbours.learn(summary, 1.0)
    a.neighbours.recompute_direct(1.0)
    a.neighbours.direct.discard(B.id)  # as if the summary had come before our zone grew
    a.handle_message(B.id, (B.host, B.port), Update(B, (), ()), 2.0)
    assert B.id in a.direct


# -- a slab held up (takeover.py, _unblock and on_lookup) -------------------------------------------


def test_a_lookup_that_meets_a_hole_is_answered_with_its_tombstones():
    # A borders D's dead zone, not yet absorbed; a lookup for a point in it from a peer
    # that lacks the tombstone ends at A (nobody is closer), which tells it.
    a, wire = member_a()
    hear_of_the_deaths(a, 1.0)
    wire.sent.clear()
    origin = PeerInfo(80, "10.0.0.80", 7000, 1, (10.0, 0.9), (0, 0.75), (50.0, 1), ())
    a.handle_message(N.id, (N.host, N.port), Lookup(9, (60.0, 0.2), origin, 3), 1.2)
    [(to, answer)] = wire.take(Update)
    assert to == (origin.host, origin.port)
    assert answer.me.id == a.id and answer.tombstones == (D,)


def test_a_slab_part_no_tombstone_covers_is_looked_up():
    # A knows D died, not Y (its zone never bordered A): the slab in front of A is
    # only partly covered by the dead zones it knows, so it may not take it yet.
    # After two unsettled ticks it looks into the part it knows nothing of (Y's).
    a, wire = member_a()
    a.handle_message(N.id, (N.host, N.port), Update(N, (), (D,)), 1.0)
    for now in (2.1, 3.2, 4.3):
        a.handle_message(N.id, (N.host, N.port), Update(N, (), ()), now - 0.05)
        a.handle_timer(now)
    assert (a.lo, a.hi) == ((0, 0), (50.0, 0.5))
    points = [m.point for _, m in wire.take(Lookup)]
    assert any(p[0] >= 75.0 and p[1] < 0.5 for p in points)


def test_a_zone_left_by_its_owners_merge_is_taken_at_once():
    # The leaver's own commit gives its zone as it was when it went: nobody unknown
    # can live in it, so no look (which held every change around it for
    # propose_timeout_s) comes first.
    a, wire = member_a()
    leaver = PeerInfo(60, "10.0.0.60", 7000, 5, (80.0, 0.5), (50.0, 0), (100, 1), (RIGHT,))
    addr = (leaver.host, leaver.port)
    a.handle_message(leaver.id, addr, Commit(6, COMMIT_MERGE, leaver, None, (N,)), 1.0)
    assert not wire.take(Lookup)
    assert (a.lo, a.hi) == ((0, 0), (SPACE.hi[0], 0.5))
    [took] = [e for e in wire.events if isinstance(e, TookOver)]
    assert took.dead == [leaver.id]


def test_a_zone_left_by_a_merge_but_buried_stale_is_looked_into():
    # The same zone known only by gossip of an older instance: looked into as after a crash.
    a, wire = member_a()
    old = Tombstone(60, 3, (50.0, 0), (100, 1), (RIGHT,))
    a.handle_message(N.id, (N.host, N.port), Update(N, (), (old,)), 1.0)
    assert wire.take(Lookup)
    assert (a.lo, a.hi) == ((0, 0), (50.0, 0.5))


# Orphans: paths that describe different trees (after partitions that each side repaired
# its own way). By A's path the other side of its face at cpu = 60 is all of [0, 60) x
# [0, 0.5), over which L's zone reaches, so the rule never lets A take the dead zone D in
# front of it, and nobody else borders D's face but L and N, whose slabs overlap live zones.
#
#     v=1 +---------+---------------------+
#         |         |          N          |
#     0.5 +    L    +------+--------------+
#         |         |  D   |      A       |
#     v=0 +---------+------+--------------+
#        cpu=0      40     60            100

A2_PATH = (PathEntry(2, 1, 0.5, False), PathEntry(7, 0, 60.0, True))
L2 = PeerInfo(
    21, "10.0.0.21", 7000, 5, (10.0, 0.5), (0, 0), (40.0, 1), (PathEntry(9, 0, 40.0, False),)
)
N2 = PeerInfo(
    22, "10.0.0.22", 7000, 5, (70.0, 0.7), (40.0, 0.5), (100, 1), (PathEntry(2, 1, 0.5, True),)
)
D2 = Tombstone(
    31, 3, (40.0, 0), (60.0, 0.5), (PathEntry(2, 1, 0.5, False), PathEntry(7, 0, 60.0, False))
)


def orphan_scene(config=CONFIG):
    a, wire = overlay(point=(80.0, 0.3), config=config)
    a.join([], 0.0)
    a.neighbours.set_zone((60.0, 0), (100, 0.5), A2_PATH, "test", 0.0)
    wire.sent.clear()

    def news(now: float) -> None:  # N gossips D's death; L speaks (lookups' answers, say)
        a.handle_message(N2.id, (N2.host, N2.port), Update(N2, (), (D2,)), now)
        a.handle_message(L2.id, (L2.host, L2.port), Update(L2, (), ()), now)

    return a, wire, news


def run(a, news, until: float) -> None:
    now = 0.5
    while now < until:
        news(now)
        for _ in range(20):
            wake = a.get_timer()
            if wake is None or wake > now + 0.5:
                break
            a.handle_timer(wake)
        now += 0.5


def test_a_dead_region_the_rule_leaves_alone_is_taken_by_its_extent():
    a, wire, news = orphan_scene()
    run(a, news, CONFIG.orphan_wait_s - 1)
    assert (a.lo, a.hi) == ((60.0, 0), (100, 0.5))  # the rule's turn: it cannot
    run(a, news, CONFIG.orphan_wait_s + 6)
    assert (a.lo, a.hi) == ((40.0, 0), (100, 0.5))  # D's extent, not L's side
    [took] = [e for e in wire.events if isinstance(e, TookOver)]
    assert took.dead == [D2.id]
    # Its path describes its zone: the split it took across is replaced by one at 40.
    assert a.path[0] == A2_PATH[0] and len(a.path) == 2
    assert (a.path[1].dim, a.path[1].pos, a.path[1].upper) == (0, 40.0, True)
    assert a.path[1].sid != A2_PATH[1].sid
    assert any(
        isinstance(e, Inconsistent) and e.what == "orphan dead region taken by its extent"
        for e in wire.events
    )


def test_an_orphan_taken_yields_to_a_live_zone_found_in_it():
    a, _wire, news = orphan_scene()
    run(a, news, CONFIG.orphan_wait_s + 6)
    assert a.lo == (40.0, 0)
    # D's real survivor shows up (it took half of D while we were not looking).
    s = PeerInfo(
        32,
        "10.0.0.32",
        7000,
        9,
        (45.0, 0.2),
        (40.0, 0),
        (50.0, 0.5),
        (PathEntry(11, 0, 50.0, False),),
    )
    a.handle_message(s.id, (s.host, s.port), Update(s, (), ()), 20.0)
    assert (a.lo, a.hi, a.path) == ((60.0, 0), (100, 0.5), A2_PATH)


def test_orphans_are_left_alone_when_switched_off():
    a, wire, news = orphan_scene(dataclasses.replace(CONFIG, orphan_after_s=0.0))
    run(a, news, CONFIG.orphan_wait_s + 20)
    assert (a.lo, a.hi) == ((60.0, 0), (100, 0.5))
    assert not [e for e in wire.events if isinstance(e, TookOver)]


def test_the_orphan_wait_follows_the_update_period_and_is_checked():
    assert CanConfig(SPACE, update_interval_s=3.0, suspect_after_s=9.0).orphan_wait_s == 30.0
    with pytest.raises(FieldError, match="orphan_after_s"):
        CanConfig(SPACE, orphan_after_s=-1.0)
    with pytest.raises(FieldError, match="orphan_after_s"):
        CanConfig(SPACE, orphan_after_s=math.inf)
