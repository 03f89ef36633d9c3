"""Job traces: the Standard Workload Format, filters, slicing, time compression,
run-time scaling and synthetic generators (docs/workloads.md)."""

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
    "Job",
    "Workload",
    "compress",
    "describe",
    "head",
    "parse_swf",
    "prepare_workload",
    "read_swf",
    "scale_runtime",
    "select",
    "shortest_slice",
    "synthetic",
    "write_swf",
]
