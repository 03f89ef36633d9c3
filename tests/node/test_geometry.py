from __future__ import annotations

import pytest

from node.can.geometry import Dimension, Space, abutment, adjacent, choose_split, next_hop, overlap
from node.wire import PathEntry

SPACE = Space(
    [Dimension("cpu", 0, 100), Dimension("mem", 0, 100), Dimension("v", 0, 1, virtual=True)]
)


def test_space_validation():
    with pytest.raises(ValueError, match="finite lo < hi"):
        Dimension("x", 1, 1)
    with pytest.raises(ValueError, match="repeat"):
        Space([Dimension("a", 0, 1), Dimension("a", 0, 2)])
    with pytest.raises(ValueError, match="at most one virtual"):
        Space([Dimension("a", 0, 1, virtual=True), Dimension("b", 0, 1, virtual=True)])
    assert SPACE.real == (0, 1) and SPACE.virtual == 2
    assert SPACE.contains_point((0, 99.9, 0.5)) and not SPACE.contains_point((100, 1, 0.5))


def test_adjacency_needs_a_shared_face_of_positive_area():
    a = ((0, 0, 0), (50, 50, 1))
    assert abutment(*a, (50, 0, 0), (100, 50, 1)) == (0, True)
    assert abutment(*a, (0, 50, 0), (50, 100, 1)) == (1, True)
    assert abutment((50, 0, 0), (100, 50, 1), *a) == (0, False)
    assert not adjacent(*a, (50, 50, 0), (100, 100, 1))  # only an edge
    assert not adjacent(*a, (60, 0, 0), (100, 50, 1))  # a gap
    assert overlap(*a, (49, 49, 0), (60, 60, 1))
    assert not overlap(*a, (50, 0, 0), (100, 50, 1))


def test_split_rule_cycles_through_real_dimensions_then_virtual():
    zone = ((0, 0, 0), (100, 100, 1))
    # differs in both real dims: first real dim after the last split's (none yet -> cpu)
    assert choose_split(SPACE, *zone, (), (10, 10, 0.1), (90, 90, 0.9)) == (0, 50.0)
    # last split was on cpu: now mem
    assert choose_split(
        SPACE, *zone, (PathEntry(1, 0, 50, False),), (10, 10, 0.1), (20, 90, 0.9)
    ) == (1, 50.0)
    # the midpoint does not separate the points: midpoint of the two
    assert choose_split(SPACE, *zone, (), (10, 10, 0.1), (30, 10, 0.9)) == (0, 20.0)
    # identical hardware: the virtual dimension
    assert choose_split(SPACE, *zone, (), (10, 10, 0.1), (10, 10, 0.9)) == (2, 0.5)
    assert choose_split(SPACE, *zone, (), (10, 10, 0.5), (10, 10, 0.5)) is None


def test_box_of_path():
    path = (PathEntry(1, 0, 50, True), PathEntry(2, 1, 25, False))
    assert SPACE.box_of_path(path) == ((50, 0, 0), (100, 25, 1))


def test_next_hop_is_greedy_and_strict():
    me = ((0, 0, 0), (50, 50, 1))
    right = (1, (50, 0, 0), (100, 50, 1))
    up = (2, (0, 50, 0), (50, 100, 1))
    assert next_hop(SPACE, *me, [right, up], (10, 10, 0.5)) == -1
    assert next_hop(SPACE, *me, [right, up], (70, 10, 0.5)) == 1  # right contains it
    assert next_hop(SPACE, *me, [right, up], (90, 90, 0.5)) in (1, 2)
    assert next_hop(SPACE, *me, [up], (90, 10, 0.5)) is None  # nobody closer: a hole


def test_a_point_on_a_corner_is_routed_round_it():
    # A point on the corner of four zones, owned by the diagonal one, which is
    # no neighbour of ours (corners are not faces). Half-open boxes: the point
    # is outside ours and both neighbours' on their upper faces; that must count
    # as a little distance, more faces more, or greedy routing sees a three-way
    # tie at 0 and stops (campaign-sim: 34 joins retried "no route" and 3 never
    # joined in a 1,000-peer build, where splits fall on capability values).
    space = Space([Dimension("x", 0, 10), Dimension("y", 0, 10)])
    ours = ((0.0, 0.0), (5.0, 5.0))
    right = (2, (5.0, 0.0), (10.0, 5.0))
    above = (3, (0.0, 5.0), (5.0, 10.0))
    assert next_hop(space, *ours, [right, above], (5.0, 5.0)) == 2  # the tie goes to the smaller id
    assert next_hop(space, right[1], right[2], [(4, (5.0, 5.0), (10.0, 10.0))], (5.0, 5.0)) == 4
    assert (
        space.distance((0.0, 0.0), (5.0, 5.0), (5.0, 5.0))
        > space.distance((5.0, 0.0), (10.0, 5.0), (5.0, 5.0))
        > 0
    )
