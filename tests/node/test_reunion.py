"""The overlay merge's decision rule and its checks on what peers send (node/can/reunion.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from node.can.reunion import check_dissolve, check_reunite, loses
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
