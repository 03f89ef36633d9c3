# Ground-truth checks of the peers' dynamic clusters (issue "Dynamic cluster
# discovery", item 3), from the state dumps of the live peers, after a quiet
# period:
#   cluster-unsettled   a peer's head or client is not STEADY
#   cluster-stale       a cluster lists a peer that is not running (crashed, left)
#   cluster-oversized   a cluster holds more than N peers
#   cluster-crowded     a peer is in more than M peers' own clusters
#   cluster-inaccurate  two members are further apart than D by the configured
#                       matrix (its current state: latency changes count)
#   cluster-foreign     a peer advertises a cluster it is not in
# Every violation names the peers involved (for a cluster: its head first).

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from testbed.analysis.can_oracle import Violation

__all__ = ["check_clusters"]


def check_clusters(
    dumps: Sequence[dict[str, Any]],
    rtt_ms: np.ndarray,
    index: Mapping[str, int],
    hosts: Mapping[tuple[str, int], str],
    *,
    diameter_ms: float,
    size: int,
    memberships: int,
    frozen: Collection[str] = (),
) -> list[Violation]:
    """Check the clusters in `dumps` (Peer.dump() with "host" and "cluster").

    Args:
        rtt_ms: the configured RTTs, host by host (matrix index by `index[host]`).
        hosts: every host's name by its peer's address.
        frozen: hosts that are running but frozen (not dumped, not stale).
    """
    running = {d["host"] for d in dumps} | set(frozen)
    name_of = {a: n for a, n in hosts.items() if n in running}
    out: list[Violation] = []
    crowd: Counter[str] = Counter()
    for d in dumps:
        state = d.get("cluster")
        if state is None:
            continue
        host = d["host"]
        if state["head"] != "STEADY" or state["client"] != "STEADY":
            out.append(
                Violation(
                    "cluster-unsettled",
                    [host],
                    f"head {state['head']}, client {state['client']}",
                )
            )
        own = [tuple(a) for a in state["own"]]
        advertised = [tuple(a) for a in state["advertised"]]
        for which, members in (("own", own), ("advertised", advertised)):
            out.extend(
                _check_cluster(
                    host,
                    which,
                    members,
                    name_of=name_of,
                    hosts=hosts,
                    rtt_ms=rtt_ms,
                    index=index,
                    size=size,
                    diameter_ms=diameter_ms,
                )
            )
        if (
            advertised
            and name_of.get(advertised[0]) is not None
            and host not in {name_of.get(a) for a in advertised}
        ):
            out.append(Violation("cluster-foreign", [host], "advertises a cluster it is not in"))
        crowd.update(n for a in own if (n := name_of.get(a)) is not None)
    out.extend(
        Violation("cluster-crowded", [host], f"in {count} clusters > M={memberships}")
        for host, count in sorted(crowd.items())
        if count > memberships
    )
    return out


def _check_cluster(
    host: str,
    which: str,
    members: list[tuple[Any, ...]],
    *,
    name_of: Mapping[tuple[Any, ...], str],
    hosts: Mapping[tuple[str, int], str],
    rtt_ms: np.ndarray,
    index: Mapping[str, int],
    size: int,
    diameter_ms: float,
) -> list[Violation]:
    """One cluster `host` reports (`which`: its own or the one it advertises):
    stale, oversized or inaccurate."""
    out: list[Violation] = []
    names = [name_of.get(a) for a in members]
    gone = [
        hosts.get(a, f"{a[0]}:{a[1]}") for a, n in zip(members, names, strict=True) if n is None
    ]
    if gone:
        out.append(
            Violation(
                "cluster-stale",
                [host, *gone[:5]],
                f"{which} cluster lists {len(gone)} peer(s) not running: {', '.join(gone[:5])}",
            )
        )
    live = [n for n in names if n is not None]
    if len(members) > size:
        out.append(
            Violation("cluster-oversized", [host], f"{which} cluster of {len(members)} > N={size}")
        )
    far = _far_pair(live, rtt_ms, index, diameter_ms)
    if far is not None:
        a, b, rtt = far
        out.append(
            Violation(
                "cluster-inaccurate",
                [live[0], a, b],
                f"{which} cluster: {a}-{b} at {rtt:.4g} ms > D={diameter_ms:g} ms",
            )
        )
    return out


def _far_pair(
    names: Sequence[str], rtt_ms: np.ndarray, index: Mapping[str, int], diameter_ms: float
) -> tuple[str, str, float] | None:
    """The farthest pair of the cluster if it is beyond D, else None."""
    if len(names) < 2:
        return None
    k = np.array([index[n] for n in names])
    block = rtt_ms[np.ix_(k, k)]
    block = np.maximum(block, block.T)
    i, j = np.unravel_index(int(np.argmax(block)), block.shape)
    worst = float(block[i, j])
    return (names[i], names[j], worst) if worst > diameter_ms else None
