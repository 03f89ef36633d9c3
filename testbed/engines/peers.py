# One peer configuration for both engines: the NodeConfig a spec describes, the point a peer
# takes in the CAN space, and the seed of its random generator.
#
# Rule: a peer's random draws depend only on (run seed, host, incarnation), never on the engine
# or on the order in which peers start; `peer_seed` (testbed/seeds.py, below the simulator
# core, which seeds its peers with it too) is the one derivation.

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

from node.can.geometry import Dimension, Space
from node.can.overlay import CanConfig
from node.cluster.agent import ClusterConfig
from node.peer import NodeConfig
from node.sched.agent import SchedConfig
from testbed.seeds import peer_seed
from testbed.spec import NodeSpec, RunClustersSpec, config_fields

__all__ = ["build_node_config", "datagram_totals", "draw_point", "peer_seed"]


def build_node_config(
    node: NodeSpec,
    clusters: RunClustersSpec | None = None,
    *,
    space: Space | None = None,
    sched: SchedConfig | None = None,
) -> NodeConfig:
    """The peers' configuration; `space` replaces the CAN space the node spec
    describes (a jobs run's resource coordinates), `sched` adds the scheduler."""
    if space is None:
        space = Space([Dimension(d.name, d.lo, d.hi, d.virtual) for d in node.dimensions])
    can = CanConfig(space, **config_fields(CanConfig, node))
    cluster = ClusterConfig(**config_fields(ClusterConfig, clusters)) if clusters else None
    key = bytes.fromhex(node.grid_key) if node.grid_key else None
    return NodeConfig(can, key, cluster=cluster, sched=sched)


def draw_point(node: NodeSpec, rng: random.Random) -> tuple[float, ...]:
    """A peer's capabilities, plus a random virtual coordinate (seed 000 §3.1.1)."""
    point = []
    for d in node.dimensions:
        if d.virtual:
            point.append(rng.uniform(d.lo, d.hi))
        elif d.values is not None:
            point.append(float(d.values[rng.randrange(len(d.values))]))
        else:
            assert d.uniform is not None
            point.append(rng.uniform(*d.uniform))
    return tuple(point)


def messages_by_kind(stats: Iterable[Mapping[str, Any]], peer_minutes: float) -> dict[str, Any]:
    """What the peers sent per peer-minute, by message type: datagrams and bytes
    (summed over their counters, Peer.stats: tx.<type>, tx_bytes.<type>)."""
    sent: dict[str, int] = {}
    size: dict[str, int] = {}
    for counters in stats:
        for key, value in counters.items():
            if key.startswith("tx."):
                sent[key[3:]] = sent.get(key[3:], 0) + int(value)
            elif key.startswith("tx_bytes."):
                size[key[9:]] = size.get(key[9:], 0) + int(value)
    if peer_minutes <= 0:
        return {}
    return {
        kind: {
            "per_node_minute": round(sent[kind] / peer_minutes, 3),
            "bytes_per_node_minute": round(size.get(kind, 0) / peer_minutes, 1),
        }
        for kind in sorted(sent)
    }


def datagram_totals(stats: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What the peers received, summed over their counters (Peer.stats): every datagram
    in `rx` is `accepted` or dropped for a reason (a flood's beyond the per-source
    limit: `rate_limited`)."""
    rx = accepted = 0
    drops: dict[str, int] = {}
    for counters in stats:
        rx += int(counters.get("rx", 0))
        accepted += int(counters.get("accepted", 0))
        for key, value in counters.items():
            if key.startswith("drop.") and value:
                drops[key[5:]] = drops.get(key[5:], 0) + int(value)
    return {"rx": rx, "accepted": accepted, "dropped": dict(sorted(drops.items()))}
