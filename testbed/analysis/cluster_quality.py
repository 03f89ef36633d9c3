# How good a clustering is, judged against the configured matrix (issue
# "Dynamic cluster discovery", item 5): what the peers advertise, checked for
# the size bound N, the membership bound M and accuracy (every pair of an
# advertised cluster within the diameter D by the matrix).

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["cluster_quality"]


def cluster_quality(
    advertised: Sequence[Sequence[int]],
    rtt_ms: np.ndarray,
    diameter_ms: float,
    *,
    max_size: int | None = None,
    max_memberships: int | None = None,
) -> dict[str, Any]:
    """The figures of one clustering: `advertised[i]` is what node i advertises
    (its members, node indices; empty: nothing). Distinct clusters count once.

    count, size_p50, size_max: the distinct advertised clusters and their sizes;
    peer_size_p50: the median size of what a node advertises (nodes advertising nothing left out);
    membership_max: the most distinct clusters one node belongs to;
    accuracy: the share of distinct clusters whose every pair is within D;
    capacity: the share of the ground truth's capacity realised: the sizes of the
    accurate clusters peers advertise (at most N) over, for each advertising peer,
    the most a cluster holding it could have (1 + its peers within D, at most N);
    violations: clusters over N, nodes in more than M, inaccurate clusters
    (each with its members: the first 20 of each kind).
    """
    matrix = np.asarray(rtt_ms, dtype=np.float64)
    distinct = sorted({tuple(sorted(c)) for c in advertised if len(c)})
    sizes = np.array([len(c) for c in distinct]) if distinct else np.zeros(0, dtype=int)
    memberships = np.zeros(len(advertised), dtype=int)
    inaccurate = []
    for cluster in distinct:
        members = np.array(cluster, dtype=np.intp)
        memberships[members] += 1
        block = matrix[np.ix_(members, members)]
        if len(cluster) > 1 and float(np.max(np.maximum(block, block.T))) > diameter_ms:
            inaccurate.append(cluster)
    oversized = [c for c in distinct if max_size is not None and len(c) > max_size]
    advertising = [len(c) for c in advertised if len(c)]
    # Capacity: what peers advertise that is usable (an accurate cluster, at
    # most N), over what they could: a cluster holding peer i lies within D of
    # i, so it has at most 1 + |{j : rtt(i, j) <= D}| members (and N).
    bad = set(inaccurate)
    usable = sum(
        min(len(c), max_size or len(c))
        for c in advertised
        if len(c) and tuple(sorted(c)) not in bad
    )
    near = (np.maximum(matrix, matrix.T) <= diameter_ms).sum(axis=1)  # i itself included
    ideal = np.minimum(near, max_size) if max_size is not None else near
    running = [k for k, c in enumerate(advertised) if len(c)]
    crowded = (
        [int(i) for i in np.flatnonzero(memberships > max_memberships)]
        if max_memberships is not None
        else []
    )
    return {
        "count": len(distinct),
        "size_p50": float(np.median(sizes)) if len(sizes) else None,
        "size_max": int(sizes.max()) if len(sizes) else 0,
        # What a peer advertises, over the peers that advertise (the distinct
        # count weighs a singleton like a cluster of 64; a peer that is not
        # running advertises nothing).
        "peer_size_p50": float(np.median(advertising)) if advertising else None,
        "membership_max": int(memberships.max()) if len(memberships) else 0,
        "accuracy": round(1.0 - len(inaccurate) / len(distinct), 6) if distinct else None,
        "capacity": round(usable / float(ideal[running].sum()), 6) if running else None,
        "violations": {
            "oversized": [list(c) for c in oversized[:20]],
            "crowded_nodes": crowded[:20],
            "inaccurate": [list(c) for c in inaccurate[:20]],
            "counts": {
                "oversized": len(oversized),
                "crowded_nodes": len(crowded),
                "inaccurate": len(inaccurate),
            },
        },
    }
