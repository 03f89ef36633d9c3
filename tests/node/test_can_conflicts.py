# Conflict detection and joins between crossing commands, on CanOverlay
# directly (sans-IO): each test feeds messages by hand and reads what the
# overlay sends back.

from __future__ import annotations

from node.can.overlay import CanOverlay, Status
from node.events import Left, PeerDeclaredDead
from node.wire import (
    COMMIT_MERGE,
    COMMIT_NOOP,
    COMMIT_SPLIT,
    Commit,
    JoinAccept,
    JoinAck,
    JoinRequest,
    JoinRetry,
    PathEntry,
    PeerInfo,
    Propose,
    ProposeOK,
    Update,
)

from .conftest import CONFIG, SPACE, Wire, overlay


def founder() -> tuple[CanOverlay, Wire]:
    can, wire = overlay()
    can.join([], 0.0)
    assert can.status == Status.MEMBER and can.lo == SPACE.lo and can.hi == SPACE.hi
    wire.sent.clear()
    return can, wire


def newcomer(ident: int, point=(80.0, 0.6), port=7100) -> PeerInfo:
    return PeerInfo(ident, "10.0.0.9", port, 0, point, (), (), ())


def test_a_declined_accept_is_taken_back_at_once():
    owner, wire = founder()
    joiner = newcomer(77)
    owner.handle_message(77, ("10.0.0.9", 7100), JoinRequest(5, joiner, 0, 1), 1.0)
    [(to, accept)] = wire.take(JoinAccept)
    assert to == ("10.0.0.9", 7100) and accept.you.id == 77
    assert owner.hi != SPACE.hi or owner.lo != SPACE.lo  # we split for it
    owner.handle_message(77, to, JoinRetry(5, "declined"), 1.2)
    assert (owner.lo, owner.hi) == (SPACE.lo, SPACE.hi)  # the half is ours again
    assert 77 in owner.tombstones
    assert any(
        isinstance(e, PeerDeclaredDead) and e.reason == "declined our accept" for e in wire.events
    )


def test_an_accept_nobody_takes_is_taken_back_after_the_retries():
    owner, wire = founder()
    owner.handle_message(77, ("10.0.0.9", 7100), JoinRequest(5, newcomer(77), 0, 1), 1.0)
    now = 1.0
    while owner.joins.pending_accept and now < 60:
        now = owner.get_timer()
        owner.handle_timer(now)
    assert (owner.lo, owner.hi) == (SPACE.lo, SPACE.hi)
    assert len(wire.take(JoinAccept)) == 4  # sent, then resent three times
    assert now < 10


def test_a_joiner_takes_an_accept_for_an_attempt_it_gave_up_and_declines_the_next():
    joiner, wire = overlay(point=(80.0, 0.6), address=("10.0.0.9", 7100), seed=3)
    boot = ("10.0.0.1", 7000)
    joiner.join([boot], 0.0)
    [(_, first)] = wire.take(JoinRequest)
    joiner.handle_message(1, boot, JoinRetry(first.req, "neighbourhood busy"), 0.5)
    now = joiner.get_timer()
    joiner.handle_timer(now)
    [(_, second)] = wire.take(JoinRequest)
    assert second.req != first.req and second.attempt == 2
    # The first owner split for the first attempt after all.
    you = PeerInfo(first.joiner.id, "10.0.0.9", 7100, 1, (80.0, 0.6), (50.0, 0.0), (100.0, 1.0), ())
    owner_info = PeerInfo(1, *boot, 2, (20.0, 0.3), (0.0, 0.0), (50.0, 1.0), ())
    joiner.handle_message(1, boot, JoinAccept(first.req, you, (owner_info,)), now + 0.1)
    assert joiner.status == Status.MEMBER and joiner.id == first.joiner.id
    assert wire.take(JoinAck) == [(boot, JoinAck(first.req))]
    # The second attempt's owner splits too: declined, so it takes its half back.
    other = ("10.0.0.5", 7000)
    late = PeerInfo(
        second.joiner.id, "10.0.0.9", 7100, 1, (80.0, 0.6), (75.0, 0.0), (100.0, 1.0), ()
    )
    joiner.handle_message(5, other, JoinAccept(second.req, late, ()), now + 0.2)
    assert wire.take(JoinRetry) == [(other, JoinRetry(second.req, "declined"))]
    assert joiner.id == first.joiner.id


def answers(wire: Wire) -> list[tuple[int, bool, str]]:
    return [(m.instance, m.yes, m.reason) for _, m in wire.take(ProposeOK)]


def test_a_busy_neighbour_holds_its_answer_for_a_higher_rank_and_refuses_a_lower():
    voter, wire = founder()
    x, y, z = ("10.0.0.2", 7000), ("10.0.0.3", 7000), ("10.0.0.4", 7000)
    voter.handle_message(2, x, Propose(10, 1, COMMIT_MERGE), 1.0)
    assert answers(wire) == [(10, True, "")]
    voter.handle_message(3, y, Propose(20, 3, COMMIT_MERGE), 1.1)  # outranks x's: waits
    assert answers(wire) == []
    voter.handle_message(4, z, Propose(30, 0, COMMIT_MERGE), 1.2)  # outranked: dies
    assert answers(wire) == [(30, False, "neighbour busy")]
    voter.handle_message(2, x, Commit(10, COMMIT_NOOP, None, None, ()), 1.3)
    assert answers(wire) == [(20, True, "")]  # x is done: y's turn


def test_splits_do_not_conflict_but_a_merge_waits_for_them():
    voter, wire = founder()
    x, y, z = ("10.0.0.2", 7000), ("10.0.0.3", 7000), ("10.0.0.4", 7000)
    voter.handle_message(2, x, Propose(10, 1, COMMIT_SPLIT), 1.0)
    voter.handle_message(3, y, Propose(20, 1, COMMIT_SPLIT), 1.0)
    assert answers(wire) == [(10, True, ""), (20, True, "")]
    voter.handle_message(4, z, Propose(30, 5, COMMIT_MERGE), 1.1)
    assert answers(wire) == []  # held: it outranks both splits
    voter.handle_message(2, x, Commit(10, COMMIT_NOOP, None, None, ()), 1.2)
    assert answers(wire) == []  # y's split still holds us
    voter.handle_message(3, y, Commit(20, COMMIT_NOOP, None, None, ()), 1.3)
    assert answers(wire) == [(30, True, "")]


def test_a_held_answer_is_dropped_when_the_proposer_gives_up():
    voter, wire = founder()
    x, y = ("10.0.0.2", 7000), ("10.0.0.3", 7000)
    voter.handle_message(2, x, Propose(10, 1, COMMIT_MERGE), 1.0)
    voter.handle_message(3, y, Propose(20, 3, COMMIT_MERGE), 1.1)
    wire.sent.clear()
    voter.handle_message(3, y, Commit(20, COMMIT_NOOP, None, None, ()), 1.5)  # y timed out
    voter.handle_message(2, x, Commit(10, COMMIT_NOOP, None, None, ()), 1.6)
    assert answers(wire) == []  # no late YES that would hold us for y's sake
    assert voter.busy == {}


def test_out_of_range_ranks_and_kinds_are_invalid():
    voter, _ = founder()
    x = ("10.0.0.2", 7000)
    assert voter.handle_message(2, x, Propose(10, -1, COMMIT_MERGE), 1.0) is not None
    assert voter.handle_message(2, x, Propose(10, 1, 9), 1.0) is not None
    assert voter.handle_message(2, x, JoinRequest(1, newcomer(9), 0, 1 << 20), 1.0) is not None


LEFT, RIGHT = PathEntry(1, 0, 50.0, False), PathEntry(1, 0, 50.0, True)
N = PeerInfo(20, "10.0.0.20", 7000, 3, (80.0, 0.5), (50.0, 0), (100, 1), (RIGHT,))


def busy_member():
    """The left half, whose neighbour (the right half) is running a SPLIT it said
    YES to: a MERGE of ours must wait."""
    a, wire = overlay(point=(20.0, 0.3))
    a.join([], 0.0)
    a.neighbours.set_zone((0, 0), (50.0, 1), (LEFT,), "test", 0.0)
    a.handle_message(N.id, (N.host, N.port), Update(N, (), ()), 0.1)
    wire.sent.clear()
    a.handle_message(N.id, (N.host, N.port), Propose(10, 1, COMMIT_SPLIT), 1.0)
    assert answers(wire) == [(10, True, "")]
    return a, wire


def test_a_leave_waits_for_quiet_without_spending_attempts():
    a, wire = busy_member()
    a.leave(1.5)
    assert a.status == Status.LEAVING and not wire.take(Propose)
    now = 1.5
    while not (proposed := wire.take(Propose)):
        a.handle_message(N.id, (N.host, N.port), Update(N, (), ()), now)  # alive
        now = a.get_timer()
        a.handle_timer(now)
        assert now < 1.0 + CONFIG.busy_for_s + 2 * CONFIG.retry_min_s
    # The neighbour's command was forgotten after busy_for_s: the first MERGE, rank 1.
    [(_, propose)] = proposed
    assert propose.kind == COMMIT_MERGE and propose.rank == 1
    a.handle_message(N.id, (N.host, N.port), ProposeOK(propose.instance, True), now + 0.1)
    [left] = [e for e in wire.events if isinstance(e, Left)]
    assert left.graceful and left.attempts == 1


def test_a_leave_that_never_finds_quiet_ends_abruptly_after_its_timeout():
    a, wire = busy_member()
    a.leave(1.5)
    now, instance = 1.5, 10
    while a.status == Status.LEAVING:
        instance += 1  # the neighbour proposes again and again: never quiet
        a.handle_message(N.id, (N.host, N.port), Update(N, (), ()), now)
        a.handle_message(N.id, (N.host, N.port), Propose(instance, 1, COMMIT_SPLIT), now)
        now = a.get_timer()
        a.handle_timer(now)
    assert not wire.take(Propose)
    [left] = [e for e in wire.events if isinstance(e, Left)]
    assert not left.graceful and left.attempts == 0
    assert 1.5 + CONFIG.leave_timeout_s <= left.t < 1.5 + CONFIG.leave_timeout_s + 1.0
    [(_, notice)] = wire.take(Commit)[-1:]  # the abrupt leave still says so
    assert notice.kind == COMMIT_MERGE


def test_a_hole_on_the_way_is_retried_soon_and_does_not_raise_the_back_off():
    joiner, wire = overlay(point=(80.0, 0.6), address=("10.0.0.9", 7100), seed=3)
    boot, middle = ("10.0.0.1", 7000), ("10.0.0.2", 7000)
    joiner.join([boot], 0.0)
    now, waits = 0.0, []
    for _ in range(8):  # a member on the way knows no way on: a dead zone not yet absorbed
        [(_, request)] = wire.take(JoinRequest)
        assert request.attempt == 1  # a hole does not count as an attempt
        joiner.handle_message(2, middle, JoinRetry(request.req, "no route"), now + 0.1)
        waits.append(joiner.get_timer() - (now + 0.1))
        now = joiner.get_timer()
        joiner.handle_timer(now)
    assert max(waits) <= 4 * CONFIG.retry_min_s + 1e-9
    assert waits[-1] > CONFIG.retry_min_s  # it does back off a little: a hole can last
    # A busy neighbourhood after the hole backs off as a first attempt's would.
    [(_, request)] = wire.take(JoinRequest)
    joiner.handle_message(2, middle, JoinRetry(request.req, "neighbourhood busy"), now + 0.1)
    assert joiner.get_timer() - (now + 0.1) <= CONFIG.retry_min_s + 1e-9
