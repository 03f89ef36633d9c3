"""Clusters for parallel jobs: the static clusterings of seed 002 §4.3.4 (dynamic
discovery and refinement, seed 002 ch. 5, come next)."""

from node.cluster.static import actual, disjoint, overlap, static_clustering

__all__ = ["actual", "disjoint", "overlap", "static_clustering"]
