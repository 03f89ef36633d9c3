# The static clusterings of seed 002 §4.3.4, built from the grid's own groups
# (a topology label such as `cluster`): what each node advertises and schedules on.
#
#   ACTUAL       every node advertises its whole group;
#   DISJOINT-n   each group cut into consecutive pieces of n (the remainder is a
#                smaller piece); a node advertises its piece;
#   OVERLAP-n    node k of a group of m advertises the window k .. k+n-1 (mod m):
#                its own and the next n-1 nodes, wrapping round (the whole group
#                when m <= n).
#
# Groups keep the nodes in the order given (the topology's order); a node's
# clusters are tuples of node indices, sorted. Pure functions: the testbed uses
# them as baselines, a peer could use them as configuration.

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence

__all__ = ["actual", "disjoint", "overlap", "static_clustering"]

Clustering = list[tuple[int, ...]]  # node index -> the cluster it advertises


def _groups(group_of: Sequence[Hashable]) -> list[list[int]]:
    members: dict[Hashable, list[int]] = {}
    for node, group in enumerate(group_of):
        members.setdefault(group, []).append(node)
    return list(members.values())


def actual(group_of: Sequence[Hashable]) -> Clustering:
    out: Clustering = [()] * len(group_of)
    for members in _groups(group_of):
        cluster = tuple(members)
        for node in members:
            out[node] = cluster
    return out


def disjoint(group_of: Sequence[Hashable], n: int) -> Clustering:
    _check_size(n)
    out: Clustering = [()] * len(group_of)
    for members in _groups(group_of):
        for start in range(0, len(members), n):
            piece = tuple(members[start : start + n])
            for node in piece:
                out[node] = piece
    return out


def overlap(group_of: Sequence[Hashable], n: int) -> Clustering:
    _check_size(n)
    out: Clustering = [()] * len(group_of)
    for members in _groups(group_of):
        m = len(members)
        for k, node in enumerate(members):
            window = members if m <= n else [members[(k + j) % m] for j in range(n)]
            out[node] = tuple(sorted(window))
    return out


def static_clustering(name: str, group_of: Sequence[Hashable]) -> Clustering:
    """By name, as the thesis writes them: ACTUAL, DISJOINT-64, OVERLAP-128 (any case)."""
    match = re.fullmatch(r"(ACTUAL|DISJOINT-(\d+)|OVERLAP-(\d+))", name.strip().upper())
    if match is None:
        raise ValueError(
            f"unknown clustering {name!r}; expected ACTUAL, DISJOINT-<n> or OVERLAP-<n>"
        )
    if match.group(2) is not None:
        return disjoint(group_of, int(match.group(2)))
    if match.group(3) is not None:
        return overlap(group_of, int(match.group(3)))
    return actual(group_of)


def _check_size(n: int) -> None:
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"a cluster size must be a positive integer, not {n!r}")
