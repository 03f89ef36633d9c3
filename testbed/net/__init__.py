"""The emulator: hosts in network namespaces on a WAN core that delays every
packet by its pair's latency.

Public API::

    with open_wan("planetlab", hosts=32) as wan:
        wan.exec("ping -c3 {peers}")          # on every host, logs in the run folder
        wan.partition(["h1", "h2"], ["h3"])   # runtime control
        wan.heal()
        wan.cli()                             # Mininet's CLI

Names are imported lazily, so that ``python -m testbed.net.delay`` (the delay
engine process) does not load Mininet, pyroute2 or numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "AccessLink",
    "BOUND_ABS_MS",
    "BOUND_REL",
    "Calibration",
    "ChurnRun",
    "Cluster",
    "ClusterWan",
    "EmuHost",
    "EngineClient",
    "ExecResult",
    "FidelityMonitor",
    "HostProcess",
    "IcmpProber",
    "NetworkPlan",
    "Wan",
    "WanVerbs",
    "clean",
    "clean_machines",
    "cluster_down",
    "cluster_status",
    "entered_netns",
    "find_cluster",
    "list_netns",
    "list_runs",
    "local_cluster_up",
    "netns_of_run",
    "new_run_id",
    "nsenter_argv",
    "open_cluster_wan",
    "open_wan",
    "parse_target",
    "place_hosts",
    "plan_network",
    "process_report",
    "rtt_errors",
    "ssh_cluster_up",
]

if TYPE_CHECKING:
    from testbed.net._churn import ChurnRun as ChurnRun
    from testbed.net._churn import WanVerbs as WanVerbs
    from testbed.net._clean import clean as clean
    from testbed.net._clean import clean_machines as clean_machines
    from testbed.net._clean import netns_of_run as netns_of_run
    from testbed.net._cluster import Cluster as Cluster
    from testbed.net._cluster import cluster_down as cluster_down
    from testbed.net._cluster import cluster_status as cluster_status
    from testbed.net._cluster import find_cluster as find_cluster
    from testbed.net._cluster import local_cluster_up as local_cluster_up
    from testbed.net._cluster import parse_target as parse_target
    from testbed.net._cluster import ssh_cluster_up as ssh_cluster_up
    from testbed.net._fidelity import BOUND_ABS_MS as BOUND_ABS_MS
    from testbed.net._fidelity import BOUND_REL as BOUND_REL
    from testbed.net._fidelity import FidelityMonitor as FidelityMonitor
    from testbed.net._fidelity import rtt_errors as rtt_errors
    from testbed.net._host import EmuHost as EmuHost
    from testbed.net._netns import entered_netns as entered_netns
    from testbed.net._netns import list_netns as list_netns
    from testbed.net._netns import nsenter_argv as nsenter_argv
    from testbed.net._plan import NetworkPlan as NetworkPlan
    from testbed.net._plan import new_run_id as new_run_id
    from testbed.net._plan import plan_network as plan_network
    from testbed.net._probe import IcmpProber as IcmpProber
    from testbed.net._programs import ExecResult as ExecResult
    from testbed.net._programs import HostProcess as HostProcess
    from testbed.net._programs import process_report as process_report
    from testbed.net._registry import list_runs as list_runs
    from testbed.net._shaping import AccessLink as AccessLink
    from testbed.net._sites import ClusterWan as ClusterWan
    from testbed.net._sites import open_cluster_wan as open_cluster_wan
    from testbed.net._sites import place_hosts as place_hosts
    from testbed.net._wan import Calibration as Calibration
    from testbed.net._wan import Wan as Wan
    from testbed.net._wan import open_wan as open_wan
    from testbed.net.delay import EngineClient as EngineClient

_LAZY = {
    "clean_machines": "testbed.net._clean",
    "ClusterWan": "testbed.net._sites",
    "open_cluster_wan": "testbed.net._sites",
    "place_hosts": "testbed.net._sites",
    "Cluster": "testbed.net._cluster",
    "cluster_down": "testbed.net._cluster",
    "cluster_status": "testbed.net._cluster",
    "find_cluster": "testbed.net._cluster",
    "local_cluster_up": "testbed.net._cluster",
    "parse_target": "testbed.net._cluster",
    "ssh_cluster_up": "testbed.net._cluster",
    "AccessLink": "testbed.net._shaping",
    "entered_netns": "testbed.net._netns",
    "list_netns": "testbed.net._netns",
    "nsenter_argv": "testbed.net._netns",
    "list_runs": "testbed.net._registry",
    "netns_of_run": "testbed.net._clean",
    "Calibration": "testbed.net._wan",
    "ChurnRun": "testbed.net._churn",
    "WanVerbs": "testbed.net._churn",
    "process_report": "testbed.net._programs",
    "EmuHost": "testbed.net._host",
    "ExecResult": "testbed.net._programs",
    "HostProcess": "testbed.net._programs",
    "Wan": "testbed.net._wan",
    "open_wan": "testbed.net._wan",
    "clean": "testbed.net._clean",
    "BOUND_ABS_MS": "testbed.net._fidelity",
    "BOUND_REL": "testbed.net._fidelity",
    "FidelityMonitor": "testbed.net._fidelity",
    "rtt_errors": "testbed.net._fidelity",
    "NetworkPlan": "testbed.net._plan",
    "new_run_id": "testbed.net._plan",
    "plan_network": "testbed.net._plan",
    "IcmpProber": "testbed.net._probe",
    "EngineClient": "testbed.net.delay",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'testbed.net' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
