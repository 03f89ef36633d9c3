# Periodic updates (node/can/neighbours.py, rule 4): the sender counts the changes
# of what its updates say, and a receiver takes an update with the count of the
# last one it took from that sender as that one, without reading it again.

from __future__ import annotations

from node.wire import PathEntry, PeerInfo, Update

from .test_can_takeover import N, member_a

# A peer N knows of, above A's zone across v = 0.5 (beside N).
M = PeerInfo(
    21,
    "10.0.0.21",
    7000,
    1,
    (60.0, 0.7),
    (50.0, 0.5),
    (100.0, 1),
    (PathEntry(1, 0, 50.0, True),),
)
M_LATER = PeerInfo(21, M.host, M.port, 2, M.point, M.lo, (75.0, 1), M.path)


def updates_to_n(wire) -> list[Update]:
    return [m for to, m in wire.take(Update) if to == (N.host, N.port)]


def test_the_count_changes_only_when_what_the_updates_say_does():
    a, wire = member_a()

    def tick(now: float) -> None:  # N speaks, then A's update period ends
        a.handle_message(N.id, (N.host, N.port), Update(N, (), ()), now - 0.1)
        a.handle_timer(now)

    tick(1.2)
    tick(2.4)
    first, second = updates_to_n(wire)
    assert first.news > 0 and second.news == first.news
    assert (first.me, first.neighbors) == (second.me, second.neighbors)
    a.neighbours.set_zone((0, 0), (40.0, 0.5), a.path, "test", 2.5)
    wire.sent.clear()
    tick(3.6)
    [third] = updates_to_n(wire)
    assert third.news == first.news + 1 and third.me.hi == (40.0, 0.5)


def test_an_update_with_the_last_count_is_the_last_update():
    a, _ = member_a()
    a.handle_message(N.id, (N.host, N.port), Update(N, (M,), (), news=7), 1.0)
    assert a.neighbours.known[M.id].info == M
    # Same count, other content: the one taken stands (its content is not read) ...
    a.handle_message(N.id, (N.host, N.port), Update(N, (M_LATER,), (), news=7), 2.0)
    assert a.neighbours.known[M.id].info == M
    assert a.neighbours.known[M.id].heard_at == 2.0  # ... and it refreshes what it said
    # A new count is read.
    a.handle_message(N.id, (N.host, N.port), Update(N, (M_LATER,), (), news=8), 3.0)
    assert a.neighbours.known[M.id].info == M_LATER


def test_an_update_without_a_count_is_compared_by_its_content():
    a, _ = member_a()
    a.handle_message(N.id, (N.host, N.port), Update(N, (M,), ()), 1.0)
    a.handle_message(N.id, (N.host, N.port), Update(N, (M_LATER,), ()), 2.0)
    assert a.neighbours.known[M.id].info == M_LATER
