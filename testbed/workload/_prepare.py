# A spec's [workload] table applied to its trace: selection, slicing, run-time scaling and
# time compression, in that order (docs/workloads.md).

from __future__ import annotations

from testbed.errors import InputError
from testbed.spec import WorkloadSpec
from testbed.workload._swf import Workload, read_swf
from testbed.workload._transform import compress, head, scale_runtime, select, shortest_slice

__all__ = ["prepare_workload"]


def prepare_workload(w: WorkloadSpec, nodes: int) -> Workload:
    """The trace after the spec's steps; `load` compresses the submissions so
    that the work offered per second is `load` times the grid's `nodes`."""
    workload = select(read_swf(w.trace), min_size=w.min_size, max_size=w.max_size)
    if w.slice is not None:
        if len(workload) < w.slice:
            raise InputError(
                f"workload.slice: {w.slice} jobs asked, the trace has {len(workload)} after selection",
                source=w.trace,
            )
        workload = shortest_slice(workload, w.slice)
    if w.runtime_scale != 1.0:
        workload = scale_runtime(workload, w.runtime_scale)
    window = w.window_s
    if w.load is not None:
        work = sum(j.size * j.runtime_s for j in workload.jobs)
        window = work / (w.load * nodes)
    if window is not None:
        workload = compress(workload, window)
    if w.first is not None:
        workload = head(workload, w.first)
    return workload
