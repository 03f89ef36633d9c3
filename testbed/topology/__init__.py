"""Latency matrices and host sets: loading, validating, selecting, scaling, generating.

Public API::

    load_topology("planetlab:3")            # a Topology (490 nodes)
    resolve_topology(spec.topology, seed)    # what a spec's [topology] table describes
    topo.select(32)                          # the first 32 nodes
    topo.select(32, pick="random", seed=7)   # a seeded sample
    topo.select(hosts=["n3", "n17"])         # an explicit list
    topo.scaled(10.0)                        # every latency x 10
    read_matrix("my.txt")                    # any N x N RTT file (ms)
    sharcnet_grid(load_topology("planetlab"), seed=1)
"""

from testbed.topology._matrix import LinkSetting as LinkSetting
from testbed.topology._matrix import Topology as Topology
from testbed.topology._matrix import read_matrix as read_matrix
from testbed.topology._matrix import write_matrix as write_matrix
from testbed.topology._resolve import PLANETLAB_FRAMES as PLANETLAB_FRAMES
from testbed.topology._resolve import load_topology as load_topology
from testbed.topology._resolve import planetlab_frame as planetlab_frame
from testbed.topology._resolve import resolve_topology as resolve_topology
from testbed.topology._sharcnet import DEFAULT_CLUSTERS as DEFAULT_CLUSTERS
from testbed.topology._sharcnet import IntraLatency as IntraLatency
from testbed.topology._sharcnet import sharcnet_grid as sharcnet_grid

__all__ = [
    "DEFAULT_CLUSTERS",
    "IntraLatency",
    "LinkSetting",
    "PLANETLAB_FRAMES",
    "Topology",
    "load_topology",
    "planetlab_frame",
    "read_matrix",
    "resolve_topology",
    "sharcnet_grid",
    "write_matrix",
]
