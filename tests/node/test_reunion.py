"""The overlay merge's decision rule and its checks on what peers send (node/can/reunion.py)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node.can.config import ROOT_MAX_AGE, CanConfig
from node.can.geometry import Dimension, Space
from node.can.local import LocalNode
from node.can.neighbours import NeighbourTable
from node.can.reunion import CUT_PERIODS, Reunion, check_dissolve, check_reunite, loses
from node.can.status import Status
from node.fields import FieldError
from node.wire import Dissolve, PathEntry, PeerInfo, Reunite, Root

roots = st.builds(
    Root,
    st.integers(0, 3),
    st.integers(1, 2**48),
    st.integers(0, 100),
    st.floats(1.0, 10_000.0),
)


@given(roots, roots, st.floats(1.5, 10.0))
def test_two_overlays_that_meet_agree_which_one_dissolves(a, b, ratio):
    if (a.epoch, a.id) == (b.epoch, b.id):
        return  # one overlay: nobody asks
    assert loses(a, b, ratio) != loses(b, a, ratio)


def test_a_much_smaller_overlay_dissolves_whatever_its_root():
    island = Root(0, 1, 5, 3.0)  # the old root, cut off with two others
    mainland = Root(1, 99, 0, 900.0)  # re-elected on the other side
    assert loses(island, mainland, 4.0) and not loses(mainland, island, 4.0)
    # Two halves: the side that kept the old root (epoch 0) wins, whatever the ids.
    kept, elected = Root(0, 50, 9, 480.0), Root(1, 2, 0, 510.0)
    assert loses(elected, kept, 4.0) and not loses(kept, elected, 4.0)


INFO = PeerInfo(
    7, "10.0.0.3", 7000, 4, (1.0, 1.0), (0.0, 0.0), (2.0, 2.0), (PathEntry(1, 0, 2.0, False),)
)


def test_what_a_peer_sends_is_checked():
    good = Root(0, 7, 3, 10.0)
    assert check_reunite(Reunite(1, good, INFO, False), 2) is None
    assert check_reunite(Reunite(1, None, None, True), 2) is None
    assert check_reunite(Reunite(1, Root(0, 7, 3, float("nan")), INFO, False), 2) == "bad root size"
    assert check_reunite(Reunite(1, Root(-1, 7, 3, 1.0), INFO, False), 2) == "bad root"
    assert check_reunite(Reunite(1, good, INFO, False), 3) == "bad point"
    assert check_dissolve(Dissolve(good, (INFO,)), 2) is None
    assert check_dissolve(Dissolve(good, ()), 2) == "bad contacts"
    assert check_dissolve(Dissolve(good, (INFO,) * 5), 2) == "bad contacts"


# -- a side cut off from the root that took it back (node/can/reunion.py) ---------------------------


def _member(ident: int, lo: tuple[float, ...], hi: tuple[float, ...], unsettled=lambda: False):
    """A member's Reunion, with what it sends and the rejoins it starts."""
    sent: list[tuple[object, object]] = []
    rejoins: list[list[object]] = []
    space = Space((Dimension("x", 0.0, 2.0), Dimension("y", 0.0, 2.0)))
    local = LocalNode(
        CanConfig(space),
        ("10.0.0.1", 7000 + ident % 1000),
        (0.5, 0.5),
        random.Random(ident),
        lambda addr, message: sent.append((addr, message)),
        lambda event: None,
        status=Status.MEMBER,
        id=ident,
        lo=lo,
        hi=hi,
    )
    reunion = Reunion(
        local, NeighbourTable(local), lambda b, now, wait: rejoins.append(list(b)), unsettled
    )
    return reunion, sent, rejoins


def test_a_root_next_to_dead_regions_counts_only_the_peers_it_sees():
    # A root with a zone of 1/400 of the space: by density, an overlay of 400. Cut
    # off on an island (dead regions all around, not yet absorbed), that says
    # nothing: it counts itself and its direct neighbours (none here).
    settled, _, _ = _member(3, (0.0, 0.0), (0.1, 0.1))
    island, _, _ = _member(3, (0.0, 0.0), (0.1, 0.1), unsettled=lambda: True)
    for reunion in (settled, island):
        reunion.found(0.0)
    assert settled.root is not None and round(settled.root.size) == 400
    assert island.root is not None and island.root.size == 1.0


def _contact(ident: int, lo: tuple[float, ...], hi: tuple[float, ...]) -> PeerInfo:
    return PeerInfo(ident, "10.0.0.9", 7000, 4, (1.0, 1.0), lo, hi, ())


def test_a_peer_that_takes_back_a_root_it_dropped_says_it_was_cut_off():
    reunion, _, _ = _member(5, (0.0, 0.0), (1.0, 2.0))
    period = reunion.local.config.root_every_s
    reunion.on_root(Root(0, 1, 10, 64.0), 0.0)
    reunion.tick(0.0)
    assert reunion.word() == Root(0, 1, 10, 64.0)  # not cut off
    # No heartbeat for ROOT_MAX_AGE root periods: dropped, and we claim the next epoch.
    reunion.tick(ROOT_MAX_AGE * period + 0.1)
    assert reunion.root is not None and (reunion.root.epoch, reunion.root.id) == (1, 5)
    reunion.on_root(Root(0, 1, 10, 64.0), 5.0)  # an echo of what we dropped: ignored
    assert reunion.root.epoch == 1
    reunion.on_root(Root(0, 1, 14, 64.0, cut=True), 6.0)  # it lives: the partition healed
    reunion.tick(6.0)
    word = reunion.word()
    assert word is not None and (word.epoch, word.id, word.seq) == (0, 1, 14) and word.cut
    assert not reunion.root.cut  # the mark is ours, never taken from a neighbour
    reunion.tick(6.0 + CUT_PERIODS * reunion.local.config.update_interval_s + 0.1)
    assert not reunion.word().cut


def test_two_members_of_one_root_whose_zones_overlap_the_cut_off_one_dissolves():
    # The side that kept the root, and the side that lost it and took it back: each buried
    # the other and took its zone. Both decide alike, and only on overlapping zones.
    kept, kept_sent, kept_rejoins = _member(7, (0.0, 0.0), (2.0, 2.0))
    cut, _, cut_rejoins = _member(9, (0.0, 0.0), (2.0, 1.0))
    root = Root(0, 1, 10, 64.0)
    kept.on_root(root, 0.0)
    cut.on_root(root, 0.0)
    cut.tick(ROOT_MAX_AGE * cut.local.config.root_every_s + 0.1)  # dropped
    assert cut.root is not None and cut.root.epoch == 1
    cut.on_root(Root(0, 1, 16, 64.0), 5.0)  # taken back
    kept.on_root(Root(0, 1, 16, 64.0), 5.0)  # the heartbeat, as always
    later = 5.0 + ROOT_MAX_AGE * cut.local.config.root_every_s  # both roots settled
    cut.tick(later)
    kept.tick(later)
    theirs = cut.settled(later)
    assert theirs is not None and theirs.cut
    assert kept.meet(theirs, _contact(9, (0.0, 0.0), (2.0, 1.0)), later)
    assert not kept_rejoins and isinstance(kept_sent[-1][1], Reunite)  # we won: we tell it
    assert cut.meet(kept_sent[-1][1].root, _contact(7, (0.0, 0.0), (2.0, 2.0)), later)
    assert cut_rejoins  # it dissolves
    # Far apart, or neither cut off: one overlay, nothing to decide.
    other, _, _ = _member(11, (0.0, 0.0), (1.0, 1.0))
    other.on_root(root, 0.0)
    assert not kept.meet(root, _contact(11, (0.0, 0.0), (1.0, 1.0)), later)
    assert not kept.meet(theirs, _contact(12, (5.0, 5.0), (6.0, 6.0)), later)


def test_a_member_with_no_root_yet_takes_the_winners_root_from_a_dissolve():
    # It joined lately, most likely into the winner: dissolving would make every joiner of
    # the winner next to a dissolving peer rejoin, over and over.
    joiner, _, rejoins = _member(13, (0.0, 0.0), (1.0, 1.0))
    winner = Root(0, 1, 20, 64.0)
    joiner.on_dissolve(Dissolve(winner, (_contact(7, (1.0, 0.0), (2.0, 2.0)),)), 3.0)
    assert joiner.root == winner and not rejoins


def test_a_root_period_too_long_for_suspect_after_is_refused():
    space = Space((Dimension("x", 0.0, 2.0), Dimension("y", 0.0, 2.0)))
    assert CanConfig(space).root_every_s == 1.0  # half the update period
    with pytest.raises(FieldError, match="root_period_s"):
        CanConfig(space, root_period_s=1.5)  # four of them: 6 s, not below suspect_after_s
