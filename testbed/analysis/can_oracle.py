# Ground-truth checks of a CAN from the state dumps of all its peers.
#
# Checks (issue "The peer", item 6):
#   membership  every peer expected to be a member is one, with a zone (a
#               peer expected but not dumped at all is reported too)
#   outside     no zone reaches outside the space
#   point       each zone contains its owner's point
#   tiling      zones do not overlap and their volumes add up to the space
#               (a gap is reported with the peers whose faces border it)
#   neighbours  each peer's table holds exactly the peers whose zones share a
#               face with its zone, with their current zones
#   routing     greedy routing over the peers' own tables reaches the owner of
#               sampled points from sampled peers
# Every violation names the peers involved.

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from node.can.geometry import Space, next_hop

__all__ = ["CanReport", "Violation", "check_can", "merge_reports"]

VOLUME_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Violation:
    kind: str
    peers: list[str]
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "peers": self.peers, "detail": self.detail}


@dataclass
class CanReport:
    members: int
    violations: list[Violation] = field(default_factory=list)
    routes_checked: int = 0
    mean_hops: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self.violations:
            out[v.kind] = out.get(v.kind, 0) + 1
        return out

    def to_dict(self, limit: int = 50) -> dict[str, Any]:
        return {
            "members": self.members,
            "violations": len(self.violations),
            "by_kind": self.by_kind(),
            "routes_checked": self.routes_checked,
            "mean_hops": round(self.mean_hops, 3),
            "first": [v.to_dict() for v in self.violations[:limit]],
        }


def merge_reports(reports: Sequence[CanReport]) -> CanReport:
    """One report of several overlays checked apart (the sides of a partition)."""
    if len(reports) == 1:
        return reports[0]
    routes = sum(r.routes_checked for r in reports)
    hops = sum(r.mean_hops * r.routes_checked for r in reports)
    return CanReport(
        sum(r.members for r in reports),
        [v for r in reports for v in r.violations],
        routes,
        hops / routes if routes else 0.0,
    )


def check_can(
    space: Space,
    dumps: Sequence[dict[str, Any]],
    *,
    expected_members: Iterable[str] | None = None,
    routes: int = 2000,
    seed: int = 0,
    hosts_of: Callable[[set[int]], Mapping[int, str]] | None = None,
) -> CanReport:
    """Check every invariant on the dumps of the live peers (see the module comment).

    Args:
        dumps: Peer.dump() of every live peer, each with a "host" name.
        expected_members: hosts that should be members (default: every dumped peer).
        routes: how many (source, random point) routes to check.
        hosts_of: names the hosts that had ids no live member has (a table's
            ghosts), so that a violation names the departed peer too.
    """
    violations: list[Violation] = []
    expected = set(expected_members) if expected_members is not None else {d["host"] for d in dumps}
    members = [d for d in dumps if d["status"] == "member" and d["lo"]]
    violations.extend(_membership(dumps, expected))
    report = CanReport(len(members), violations)
    if not members:
        return report
    names = [d["host"] for d in members]
    ids = [d["id"] for d in members]
    by_id = {ident: k for k, ident in enumerate(ids)}
    if len(by_id) != len(members):
        violations.append(Violation("identity", names, "two peers share an id"))
    lo = np.array([d["lo"] for d in members], dtype=np.float64)
    hi = np.array([d["hi"] for d in members], dtype=np.float64)
    point = np.array([d["point"] for d in members], dtype=np.float64)
    violations.extend(_zones(space, lo, hi, point, names))
    adjacency, tiling = _tiling(space, lo, hi, names)
    violations.extend(tiling)
    violations.extend(_tables(members, names, by_id, adjacency, hosts_of))
    if not any(v.kind in ("overlap", "gap", "outside") for v in violations):
        _check_routing(space, members, by_id, lo, hi, names, routes, seed, report)
    return report


def _membership(dumps: Sequence[dict[str, Any]], expected: set[str]) -> list[Violation]:
    """Expected members that are not members, or left no state dump."""
    out = [
        Violation("membership", [d["host"]], f"status {d['status']}")
        for d in dumps
        if d["host"] in expected and (d["status"] != "member" or not d["lo"])
    ]
    dumped = {d["host"] for d in dumps}
    out.extend(
        Violation("membership", [host], "no state dump (the peer is not running)")
        for host in sorted(expected - dumped)
    )
    return out


def _zones(
    space: Space, lo: np.ndarray, hi: np.ndarray, point: np.ndarray, names: list[str]
) -> list[Violation]:
    """Zones that leave the space, and points outside their own zone."""
    outside = np.any((lo < np.array(space.lo)) | (hi > np.array(space.hi)), axis=1)
    out = [
        Violation(
            "outside", [names[k]], f"zone {lo[k].tolist()}..{hi[k].tolist()} leaves the space"
        )
        for k in np.flatnonzero(outside)
    ]
    inside = np.all((lo <= point) & (point < hi), axis=1)
    out.extend(
        Violation(
            "point",
            [names[k]],
            f"point {point[k].tolist()} outside zone {lo[k].tolist()}..{hi[k].tolist()}",
        )
        for k in np.flatnonzero(~inside)
    )
    return out


def _tiling(
    space: Space, lo: np.ndarray, hi: np.ndarray, names: list[str]
) -> tuple[list[set[int]], list[Violation]]:
    """Whether the zones tile the space: who is adjacent to whom (by the zones,
    the truth the neighbour tables are checked against), and each overlap, then
    a gap (checked only without overlaps)."""
    n, dims = len(names), space.n
    violations: list[Violation] = []
    span = np.array(space.span)
    # Pairwise relations, one row at a time (n^2 d work, n^2 memory only per row).
    adjacency: list[set[int]] = []
    overlaps = 0
    for i in range(n):
        touch = (hi[i] == lo) | (hi == lo[i])
        share = np.maximum(lo[i], lo) < np.minimum(hi[i], hi)
        overlap = np.all(share, axis=1)
        overlap[i] = False
        for j in np.flatnonzero(overlap):
            if j > i:
                overlaps += 1
                violations.append(Violation("overlap", [names[i], names[j]], "zones overlap"))
        adjacent = (touch.sum(axis=1) == 1) & (share.sum(axis=1) == dims - 1)
        adjacent[i] = False
        adjacency.append(set(np.flatnonzero(adjacent).tolist()))
    volume = float(np.prod((hi - lo) / span, axis=1).sum())
    if overlaps == 0 and volume < 1.0 - VOLUME_TOLERANCE:
        violations.append(
            Violation(
                "gap",
                _gap_borders(space, lo, hi, names, adjacency),
                f"zones cover {volume:.12f} of the space",
            )
        )
    return adjacency, violations


def _tables(
    members: list[dict[str, Any]],
    names: list[str],
    by_id: dict[int, int],
    adjacency: list[set[int]],
    hosts_of: Callable[[set[int]], Mapping[int, str]] | None,
) -> list[Violation]:
    """Each member's neighbour table against the true adjacency: ghosts (ids of
    no live member), missing and extra neighbours, and stale zones."""
    ids = [d["id"] for d in members]
    out: list[Violation] = []
    all_ghosts = {nb["id"] for d in members for nb in d["neighbors"]} - by_id.keys()
    ghost_names = dict(hosts_of(all_ghosts)) if hosts_of is not None and all_ghosts else {}
    for i, d in enumerate(members):
        table = {nb["id"]: nb for nb in d["neighbors"]}
        known = {by_id[t] for t in table if t in by_id}
        ghosts = [t for t in table if t not in by_id]
        missing = adjacency[i] - known
        extra = known - adjacency[i]
        if ghosts:
            out.append(
                Violation(
                    "neighbor-ghost",
                    [names[i], *sorted({ghost_names[t] for t in ghosts if t in ghost_names})],
                    f"table lists {len(ghosts)} id(s) of no live member: "
                    + ", ".join(f"{t} ({ghost_names.get(t, 'unknown host')})" for t in ghosts),
                )
            )
        if missing:
            out.append(
                Violation(
                    "neighbor-missing",
                    [names[i], *(names[j] for j in sorted(missing))],
                    "adjacent but not in the table",
                )
            )
        if extra:
            out.append(
                Violation(
                    "neighbor-extra",
                    [names[i], *(names[j] for j in sorted(extra))],
                    "in the table but not adjacent",
                )
            )
        stale = [
            j
            for j in known & adjacency[i]
            if table[ids[j]]["lo"] != members[j]["lo"] or table[ids[j]]["hi"] != members[j]["hi"]
        ]
        if stale:
            out.append(
                Violation(
                    "neighbor-stale",
                    [names[i], *(names[j] for j in sorted(stale))],
                    "table holds an old zone",
                )
            )
    return out


def _gap_borders(
    space: Space, lo: np.ndarray, hi: np.ndarray, names: list[str], adjacency: list[set[int]]
) -> list[str]:
    """Peers with an inner face not exactly covered by their true neighbours (they border the gap)."""
    span = np.array(space.span)
    out = []
    for i in range(len(names)):
        for d in range(space.n):
            for upper in (False, True):
                at = hi[i, d] if upper else lo[i, d]
                if at == (space.hi[d] if upper else space.lo[d]):
                    continue
                others = [o for o in range(space.n) if o != d]
                area = float(np.prod((hi[i, others] - lo[i, others]) / span[others]))
                covered = 0.0
                for j in adjacency[i]:
                    if (lo[j, d] if upper else hi[j, d]) == at:
                        covered += float(
                            np.prod(
                                (
                                    np.minimum(hi[i, others], hi[j, others])
                                    - np.maximum(lo[i, others], lo[j, others])
                                )
                                / span[others]
                            )
                        )
                if covered < area * (1 - 1e-9):
                    out.append(names[i])
    return sorted(set(out))[:20]


def _check_routing(space, members, by_id, lo, hi, names, routes, seed, report: CanReport) -> None:
    rng = random.Random(seed)
    n = len(members)
    tables = [[(nb["id"], nb["lo"], nb["hi"]) for nb in d["neighbors"]] for d in members]
    max_hops = 4 * n + 16
    hops_total = 0
    for _ in range(routes):
        source = rng.randrange(n)
        target = tuple(rng.uniform(a, b) for a, b in zip(space.lo, space.hi, strict=True))
        owner = int(np.flatnonzero(np.all((lo <= target) & (target < hi), axis=1))[0])
        at, hops, trail = source, 0, [names[source]]
        while True:
            step = next_hop(space, members[at]["lo"], members[at]["hi"], tables[at], target)
            if step == -1:
                break
            if step is None or step not in by_id or hops > max_hops:
                why = (
                    "stuck: no closer neighbour"
                    if step is None
                    else ("next hop is not a member" if step not in by_id else "too many hops")
                )
                report.violations.append(
                    Violation(
                        "routing",
                        [*trail[-6:], names[owner]],
                        f"to {tuple(round(x, 4) for x in target)}: {why}",
                    )
                )
                break
            at = by_id[step]
            hops += 1
            trail.append(names[at])
        if at == owner:
            hops_total += hops
        elif step == -1:
            report.violations.append(
                Violation(
                    "routing", [names[at], names[owner]], "ended at a peer that is not the owner"
                )
            )
    report.routes_checked = routes
    report.mean_hops = hops_total / routes if routes else 0.0
