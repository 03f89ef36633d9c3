# Mininet hosts on namespaces the testbed made, and Mininet's CLI over them.
#
# Mininet's Host is "a shell in a network namespace": `cmd`, `popen`, `pexec`
# and its CLI all work through that shell and `mnexec -a <shell pid>`. We keep
# all of that, but start the shell inside our named namespace (via nsenter)
# instead of letting `mnexec -n` create an anonymous one, and we describe the
# already-configured eth0 to Mininet instead of letting it build links: links,
# addresses and routes come from the plan (pyroute2, in _build.py).
#
# We do not call Mininet.init(): it raises system-wide sysctls (fixLimits),
# which a testbed that promises to leave the machine as it found it must not.

from __future__ import annotations

from typing import Any

from mininet.link import Intf
from mininet.net import Mininet
from mininet.node import Host

from testbed.net._netns import nsenter_argv
from testbed.net._plan import NetworkPlan

__all__ = ["NamespaceHost", "build_mininet"]


class NamespaceHost(Host):
    """A Mininet host whose shell runs in an existing named namespace."""

    def __init__(self, name: str, *, netns: str, **params: Any) -> None:
        self.netns = netns
        super().__init__(name, inNamespace=False, **params)

    def _popen(self, cmd: list[str], **params: Any):  # type: ignore[override]
        if self.shell is None and cmd and cmd[0] == "mnexec":
            # Starting the shell: enter our namespace first. Later popen() calls
            # use `mnexec -da <shell pid>`, which enters it by itself.
            cmd = [*nsenter_argv(self.netns), *cmd]
        return super()._popen(cmd, **params)


def build_mininet(plan: NetworkPlan) -> tuple[Mininet, list[NamespaceHost]]:
    """Start one shell per host and one for the core; return a Mininet that the CLI can drive.

    The core is reachable by name ("core") from the CLI but is not in
    net.hosts, so pingall and friends cover the emulated hosts only.
    """
    Mininet.inited = True  # skip fixLimits(); see the module comment
    net = Mininet(topo=None, build=False, controller=None, ipBase=plan.subnet)
    shells: list[NamespaceHost] = []
    try:
        for host in plan.hosts:
            node = NamespaceHost(host.name, netns=host.netns)
            shells.append(node)
            intf = Intf("eth0", node=node, port=0)
            intf.ip, intf.prefixLen, intf.mac = host.ip, 32, host.mac
            net.hosts.append(node)
            net.nameToNode[node.name] = node
        core = NamespaceHost("core", netns=plan.core_netns)
        shells.append(core)
        for port, host in enumerate(plan.hosts):
            intf = Intf(host.core_ifname, node=core, port=port)
            intf.mac = host.core_mac
        lo = Intf("lo", node=core, port=len(plan.hosts))
        lo.ip, lo.prefixLen = plan.core_ip, 32
        net.nameToNode["core"] = core
    except BaseException:
        stop_shells(shells)
        raise
    return net, shells


def stop_shells(shells: list[NamespaceHost]) -> None:
    for node in shells:
        try:
            node.terminate()
        except OSError:
            pass
