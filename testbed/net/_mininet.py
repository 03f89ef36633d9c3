# Mininet hosts on namespaces the testbed made, and Mininet's CLI over them.
#
# Mininet's Host is "a shell in a network namespace": `cmd`, `popen`, `pexec`
# and its CLI all work through that shell and `mnexec -a <shell pid>`. We keep
# all of that, but start the shell inside our named namespace (via nsenter)
# instead of letting `mnexec -n` create an anonymous one, and we describe the
# already-configured eth0 to Mininet instead of letting it build links: links,
# addresses and routes come from the plan (ip -batch, in _build.py).
#
# We do not call Mininet.init(): it raises system-wide sysctls (fixLimits),
# which a testbed that promises to leave the machine as it found it must not.
#
# Shells start on first use (a command, popen, the CLI), not at bring-up: a
# shell is a bash on a pseudo-terminal, 14 s for 1,000 hosts, and the kernel
# has 4,096 ptys, so 5,000 hosts could not all have one. `on_start` is told
# each shell's pid (for `testbed clean`).

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mininet.link import Intf
from mininet.net import Mininet
from mininet.node import Host

from testbed.net._netns import nsenter_argv
from testbed.net._plan import NetworkPlan

__all__ = ["NamespaceHost", "build_mininet"]


class NamespaceHost(Host):
    """A Mininet host whose shell runs in an existing named namespace, started
    the first time something needs it (its pid, its terminal, a command)."""

    def __init__(
        self, name: str, *, netns: str, on_start: Callable[[int], None], **params: Any
    ) -> None:
        self.netns = netns
        self._on_start = on_start
        self._deferred = True  # Node.__init__'s startShell() does nothing
        super().__init__(name, inNamespace=False, **params)
        self._deferred = False

    def startShell(self, mnopts: str | None = None) -> None:
        if self._deferred:
            return
        super().startShell(mnopts)
        self._on_start(self._state["pid"])

    def _ensure_shell(self) -> None:
        if self.shell is None and not self._deferred:
            self.startShell()

    def cmd(self, *args: Any, **kwargs: Any) -> str | None:
        self._ensure_shell()
        return super().cmd(*args, **kwargs)  # type: ignore[no-any-return]

    def sendCmd(self, *args: Any, **kwargs: Any) -> None:
        self._ensure_shell()
        super().sendCmd(*args, **kwargs)

    def __repr__(self) -> str:  # Node's shows the pid, which would start the shell
        pid = self._state.get("pid") or "not started"
        return (
            f"<{type(self).__name__} {self.name}: {','.join(map(str, self.intfList()))} pid={pid}>"
        )

    def _popen(self, cmd: list[str], **params: Any):  # type: ignore[override]
        if self.shell is None and cmd and cmd[0] == "mnexec":
            # Starting the shell: enter our namespace first. Later popen() calls
            # use `mnexec -da <shell pid>`, which enters it by itself.
            cmd = [*nsenter_argv(self.netns), *cmd]
        return super()._popen(cmd, **params)


def _lazy(field: str) -> property:
    """An attribute of Node that only a running shell has: reading it starts the shell."""

    def get(node: NamespaceHost) -> Any:
        if field != "shell":
            node._ensure_shell()
        return node._state.get(field)

    def put(node: NamespaceHost, value: Any) -> None:
        node.__dict__.setdefault("_state", {})[field] = value

    return property(get, put)


for _field in ("pid", "stdin", "stdout", "pollOut"):
    setattr(NamespaceHost, _field, _lazy(_field))


def build_mininet(
    plan: NetworkPlan, on_start: Callable[[int], None]
) -> tuple[Mininet, list[NamespaceHost]]:
    """One Mininet host per emulated host and one for the core (their shells start on
    first use; on_start(pid) for each); return a Mininet that the CLI can drive.

    The core is reachable by name ("core") from the CLI but is not in
    net.hosts, so pingall and friends cover the emulated hosts only.
    """
    Mininet.inited = True  # skip fixLimits(); see the module comment
    net = Mininet(topo=None, build=False, controller=None, ipBase=plan.subnet)
    shells: list[NamespaceHost] = []
    try:
        for host in plan.hosts:
            node = NamespaceHost(host.name, netns=host.netns, on_start=on_start)
            shells.append(node)
            intf = Intf("eth0", node=node, port=0, up=None)  # up already (netlink)
            intf.ip, intf.prefixLen, intf.mac = host.ip, 32, host.mac
            net.hosts.append(node)
            net.nameToNode[node.name] = node
        core = NamespaceHost("core", netns=plan.core_netns, on_start=on_start)
        shells.append(core)
        for port, host in enumerate(plan.hosts):
            intf = Intf(host.core_ifname, node=core, port=port, up=None)
            intf.mac = host.core_mac
        lo = Intf("lo", node=core, port=len(plan.hosts), up=None)
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
