"""P2P Grid Testbed: real peers in network namespaces on a WAN core with matrix latency."""

__version__ = "0.1.0"
