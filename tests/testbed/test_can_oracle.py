# The CAN oracle (testbed/analysis/can_oracle.py) on hand-made peer dumps:
# a correct tiling passes, and each kind of violation is found and names the
# peers involved.

from __future__ import annotations

import pytest

from node.can.geometry import Dimension, Space
from testbed.analysis.can_oracle import check_can

SPACE = Space([Dimension("cpu", 0, 100), Dimension("v", 0, 1, virtual=True)])

# Two halves (split on cpu), and four quarters (each half split again on v):
#   b | d      a-b, a-c, b-d and c-d share a face;
#   --+--      a-d and b-c only touch at the centre corner.
#   a | c
HALVES = {"a": ([0, 0], [50, 1]), "b": ([50, 0], [100, 1])}
QUARTERS = {
    "a": ([0, 0], [50, 0.5]),
    "b": ([0, 0.5], [50, 1]),
    "c": ([50, 0], [100, 0.5]),
    "d": ([50, 0.5], [100, 1]),
}
ADJACENT = {"a": "b", "b": "a"}, {"a": "bc", "b": "ad", "c": "ad", "d": "bc"}
IDS = {"a": 11, "b": 12, "c": 13, "d": 14, "e": 15}


def entry(host, lo, hi):
    return {"id": IDS[host], "lo": list(lo), "hi": list(hi)}


def dump(host, lo, hi, neighbors=(), *, status="member", point=None):
    """A peer's dump as CanOverlay.dump() makes it, plus its host name."""
    if point is None:
        point = [(x + y) / 2 for x, y in zip(lo, hi, strict=True)] if lo else [10.0, 0.1]
    return {
        "host": host,
        "id": IDS[host],
        "status": status,
        "address": ["10.0.0.1", 7000],
        "point": point,
        "lo": list(lo),
        "hi": list(hi),
        "path": [],
        "instance": 1,
        "neighbors": list(neighbors),
    }


def tiling(zones, adjacent):
    """Dumps (by host) of peers owning `zones`, each with an exact neighbour table."""
    return {
        host: dump(host, lo, hi, [entry(n, *zones[n]) for n in adjacent[host]])
        for host, (lo, hi) in zones.items()
    }


def halves():
    return tiling(HALVES, ADJACENT[0])


def quarters():
    return tiling(QUARTERS, ADJACENT[1])


def check(dumps, **kwargs):
    kwargs.setdefault("routes", 200)
    return check_can(SPACE, list(dumps.values()), **kwargs)


def only(report, kind):
    """The one violation of `kind` in the report."""
    found = [v for v in report.violations if v.kind == kind]
    assert len(found) == 1, report.to_dict()
    return found[0]


@pytest.mark.parametrize("layout", [halves, quarters])
def test_correct_tiling_passes(layout):
    dumps = layout()
    report = check(dumps)
    assert report.ok and report.violations == []
    assert report.members == len(dumps)
    assert report.routes_checked == 200 and report.mean_hops > 0
    summary = report.to_dict()
    assert summary["violations"] == 0 and summary["by_kind"] == {} and summary["first"] == []


def test_overlap_names_both_peers_and_skips_routing():
    dumps = quarters()
    dumps["c"]["lo"] = [40, 0]  # c now reaches into a
    report = check(dumps)
    assert only(report, "overlap").peers == ["a", "c"]
    assert "gap" not in report.by_kind()
    assert report.routes_checked == 0


def test_gap_names_the_peers_that_border_it():
    dumps = quarters()
    dumps["c"]["hi"] = [90, 0.5]  # nobody owns [90, 100) x [0, 0.5)
    report = check(dumps)
    gap = only(report, "gap")
    assert gap.peers == ["c", "d"]  # c's right face, and the part of d's lower face past c
    assert "0.95" in gap.detail
    assert report.routes_checked == 0


@pytest.mark.parametrize(
    "point",
    [[75.0, 0.25], [25.0, 0.75], [50.0, 0.25]],
    ids=["in-a-neighbour", "in-another-zone", "on-the-open-upper-bound"],
)
def test_point_outside_own_zone(point):
    dumps = quarters()
    dumps["a"]["point"] = point
    report = check(dumps)
    assert report.by_kind() == {"point": 1}
    assert only(report, "point").peers == ["a"]


def test_point_on_the_closed_lower_bound_is_inside():
    dumps = quarters()
    dumps["c"]["point"] = [50.0, 0.0]
    assert check(dumps).ok


def test_missing_neighbour():
    dumps = quarters()
    dumps["a"]["neighbors"] = [entry("b", *QUARTERS["b"])]  # c left out
    report = check(dumps)
    assert only(report, "neighbor-missing").peers == ["a", "c"]


def test_extra_neighbour_touching_only_at_a_corner():
    dumps = quarters()
    dumps["a"]["neighbors"].append(entry("d", *QUARTERS["d"]))
    report = check(dumps)
    assert report.by_kind() == {"neighbor-extra": 1}
    assert only(report, "neighbor-extra").peers == ["a", "d"]


def test_ghost_neighbour_unknown_id():
    dumps = quarters()
    dumps["a"]["neighbors"].append({"id": 999, "lo": [0, 0], "hi": [50, 0.5]})
    report = check(dumps)
    assert report.by_kind() == {"neighbor-ghost": 1}
    assert only(report, "neighbor-ghost").peers == ["a"]
    assert "999 (unknown host)" in only(report, "neighbor-ghost").detail


def test_a_ghost_is_named_when_the_runner_knows_whose_id_it_was():
    dumps = quarters()
    dumps["a"]["neighbors"].append({"id": 999, "lo": [0, 0], "hi": [50, 0.5]})
    asked: list[set[int]] = []

    def hosts_of(ids):
        asked.append(set(ids))
        return {999: "h42"}

    ghost = only(check(dumps, hosts_of=hosts_of), "neighbor-ghost")
    assert ghost.peers == ["a", "h42"] and "999 (h42)" in ghost.detail
    assert asked == [{999}]  # once per check, for the ghosts only
    check(quarters(), hosts_of=hosts_of)
    assert len(asked) == 1  # no ghosts: not asked


def test_ghost_neighbour_that_is_dumped_but_not_a_member():
    dumps = quarters()
    dumps["e"] = dump("e", [], [], status="joining")
    dumps["a"]["neighbors"].append({"id": IDS["e"], "lo": [0, 0], "hi": [50, 0.5]})
    report = check(dumps, expected_members="abcd")
    assert report.by_kind() == {"neighbor-ghost": 1}
    assert only(report, "neighbor-ghost").peers == ["a"]


def test_stale_neighbour_entry():
    dumps = quarters()
    dumps["a"]["neighbors"] = [entry("b", *QUARTERS["b"]), entry("c", [50, 0], [100, 1])]
    report = check(dumps)
    assert report.by_kind() == {"neighbor-stale": 1}
    assert only(report, "neighbor-stale").peers == ["a", "c"]


@pytest.mark.parametrize(
    ("status", "lo", "hi"),
    [("joining", [], []), ("left", [], []), ("member", [], []), ("idle", [50, 0], [100, 1])],
)
def test_expected_member_that_is_not_one(status, lo, hi):
    dumps = halves()
    dumps["b"] = dump("b", lo, hi, status=status)
    dumps["a"]["neighbors"] = []
    report = check(dumps, expected_members=["a", "b"])
    assert only(report, "membership").peers == ["b"]
    assert status in only(report, "membership").detail
    assert report.members == 1


def test_a_non_member_that_is_not_expected_is_fine():
    dumps = halves()
    dumps["e"] = dump("e", [], [], status="joining")
    assert check(dumps, expected_members=["a", "b"]).ok
    assert only(check(dumps), "membership").peers == ["e"]  # expected by default


def test_expected_member_without_a_dump():
    report = check(halves(), expected_members=["a", "b", "e"])
    assert only(report, "membership").peers == ["e"]


def test_two_peers_with_one_id():
    dumps = quarters()
    dumps["d"]["id"] = IDS["a"]
    report = check(dumps)
    assert only(report, "identity").peers == ["a", "b", "c", "d"]


def three_strips_with_a_loop():
    """a | b | c along cpu, where a and b each believe the other owns c's strip."""
    zones = {"a": ([0, 0], [30, 1]), "b": ([30, 0], [60, 1]), "c": ([60, 0], [100, 1])}
    dumps = tiling(zones, {"a": "b", "b": "ac", "c": "b"})
    dumps["a"]["neighbors"] = [entry("b", [30, 0], [100, 1])]
    dumps["b"]["neighbors"] = [entry("a", [0, 0], [100, 1]), entry("c", *zones["c"])]
    return dumps


def halves_with_empty_table():
    dumps = halves()
    dumps["a"]["neighbors"] = []
    return dumps


def halves_through_a_ghost():
    dumps = halves()
    dumps["a"]["neighbors"] = [{"id": 999, "lo": [50, 0], "hi": [100, 1]}]
    return dumps


@pytest.mark.parametrize(
    ("layout", "why", "route", "owner"),
    [
        (halves_with_empty_table, "stuck: no closer neighbour", {"a"}, "b"),
        (halves_through_a_ghost, "next hop is not a member", {"a"}, "b"),
        (three_strips_with_a_loop, "too many hops", {"a", "b"}, "c"),
    ],
    ids=["stuck", "ghost-hop", "loop"],
)
def test_routing_failure_names_the_route_and_the_owner(layout, why, route, owner):
    report = check(layout(), routes=100)
    assert report.routes_checked == 100
    failures = [v for v in report.violations if v.kind == "routing"]
    assert failures, report.to_dict()
    for v in failures:
        assert why in v.detail
        assert set(v.peers[:-1]) == route and v.peers[-1] == owner


def test_to_dict_counts_violations_by_kind():
    dumps = quarters()
    dumps["a"]["point"] = [75.0, 0.25]
    dumps["b"]["point"] = [75.0, 0.75]
    dumps["a"]["neighbors"].append(entry("d", *QUARTERS["d"]))
    summary = check(dumps).to_dict(limit=2)
    assert summary["violations"] == 3
    assert summary["by_kind"] == {"point": 2, "neighbor-extra": 1}
    assert summary["members"] == 4 and summary["routes_checked"] == 200
    assert [v["kind"] for v in summary["first"]] == ["point", "point"]
    assert {v["peers"][0] for v in summary["first"]} == {"a", "b"}


def test_gap_hidden_by_a_zone_outside_the_space():
    dumps = tiling({"a": ([0, 0], [40, 1]), "b": ([50, 0], [110, 1])}, {"a": "", "b": ""})
    report = check(dumps)  # volumes add up to 0.4 + 0.6 = 1
    assert only(report, "outside").peers == ["b"]
    assert report.routes_checked == 0  # routing is meaningless on a broken tiling
