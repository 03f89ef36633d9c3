"""The `testbed` command: one module per command group.

    _common.py   the top-level group, exit codes, options several commands share
    network.py   up, exec, clean, demo
    bench.py     bench delay / probes / bringup / mpi
    inputs.py    workload, churn, topology show / generate
    runs.py      run, campaign, table
    fuzz.py      fuzz
    cluster.py   cluster up / status / down (machines in one Ray cluster)

Every subcommand validates its input before it touches the machine, shows progress on stderr
for long steps, prints results as a table (or one JSON object with --json on stdout), and tears
down whatever it brought up on exit, error, Ctrl-C or SIGTERM. Exit codes: 0 ok, 1 runtime
failure, 2 bad input, 130 interrupted. Modules import what a command needs inside it, so that
`testbed --help` starts without numpy, Mininet or pyroute2.
"""

from __future__ import annotations

import signal

from testbed.cli import bench, cluster, fuzz, inputs, network, runs
from testbed.cli._common import cli

__all__ = ["cli", "main"]

_GROUPS = (bench, cluster, fuzz, inputs, network, runs)  # imported for their commands


def main() -> None:
    # SIGTERM and SIGHUP unwind like Ctrl-C, so that every `with` tears down.
    def _terminate(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    cli(prog_name="testbed")
