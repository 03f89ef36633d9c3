"""Job traces: the Standard Workload Format, filters, slicing, time compression,
run-time scaling and synthetic generators, and Kim's synthetic grid (docs/workloads.md)."""

from testbed.workload._kim import (
    RESOURCES,
    KimJob,
    kim_jobs,
    kim_nodes,
    ladder_top,
    read_kim_jobs,
    read_kim_nodes,
)
from testbed.workload._prepare import prepare_workload
from testbed.workload._swf import FIELDS, Job, Workload, parse_swf, read_swf, write_swf
from testbed.workload._transform import (
    compress,
    describe,
    head,
    scale_runtime,
    select,
    shortest_slice,
    synthetic,
)

__all__ = [
    "FIELDS",
    "RESOURCES",
    "Job",
    "KimJob",
    "Workload",
    "compress",
    "describe",
    "head",
    "kim_jobs",
    "kim_nodes",
    "read_kim_jobs",
    "read_kim_nodes",
    "ladder_top",
    "parse_swf",
    "prepare_workload",
    "read_swf",
    "scale_runtime",
    "select",
    "shortest_slice",
    "synthetic",
    "write_swf",
]
