# One peer configuration for both engines: the NodeConfig a spec describes, the point a peer
# takes in the CAN space, and the seed of its random generator.
#
# Rule: a peer's random draws depend only on (run seed, host, incarnation), never on the engine
# or on the order in which peers start; `peer_seed` (testbed/seeds.py, below the simulator
# core, which seeds its peers with it too) is the one derivation.

from __future__ import annotations

import random

from node.can.geometry import Dimension, Space
from node.can.overlay import CanConfig
from node.cluster.agent import ClusterConfig
from node.peer import NodeConfig
from node.sched.agent import SchedConfig
from testbed.seeds import peer_seed
from testbed.spec import NodeSpec, RunClustersSpec, config_fields

__all__ = ["build_node_config", "draw_point", "peer_seed"]


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
