# The exact maximum clique of the filtering step (seed 002 §5.1, step 3) and
# the membership criteria (Algorithm 3), in pure Python: the peer's cluster
# agent needs them, and a peer process stays light (no numpy; DESIGN.md).
# node/cluster/refine.py, the serialized reference, uses the same function on
# numpy matrices.
#
# Rules
#   `close` is any square matrix of truth values (nested lists, or a numpy
#   array): row k's true columns are k's close members. The result depends
#   only on those truth values, so both callers get the same clique.

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy only for the type: the peer process does not import it
    import numpy as np
    import numpy.typing as npt

__all__ = ["CRITERIA", "max_clique_with"]

CRITERIA = ("fcfs", "global", "greedy")


def max_clique_with(
    head: int, members: Sequence[int], close: Sequence[Sequence[bool]] | npt.NDArray[np.bool_]
) -> tuple[int, ...]:
    """Step 3: the largest set of `members` (head included) all pairwise close,
    by Bron-Kerbosch with pivoting on the head's neighbourhood. `close` is the
    boolean matrix of the members, in `members` order."""
    index = {m: k for k, m in enumerate(members)}
    h = index[head]
    neighbours = [{j for j, near in enumerate(close[k]) if near} - {k} for k in range(len(members))]
    best: list[int] = []

    def expand(clique: list[int], candidates: set[int], excluded: set[int]) -> None:
        nonlocal best
        if len(clique) + len(candidates) <= len(best):
            return
        if not candidates:
            if not excluded and len(clique) > len(best):
                best = list(clique)
            return
        pivot = max(candidates | excluded, key=lambda u: len(neighbours[u] & candidates))
        for v in list(candidates - neighbours[pivot]):
            expand([*clique, v], candidates & neighbours[v], excluded & neighbours[v])
            candidates.discard(v)
            excluded.add(v)

    expand([h], set(neighbours[h]), set())
    return tuple(sorted(members[k] for k in best))
