# Peers on the hosts of a network across machines (testbed/net/_sites.py): each
# machine's agent starts, signals, asks and measures the peers of its own hosts;
# the emulator's engine (emu.py) drives them through RemotePeer proxies.
#
# Theory of operation
#   The functions named `on_*` run inside a machine's agent (ClusterWan.call):
#   they keep the machine's peers in the agent's state, start them as the
#   local engine does (forked by a zygote of that machine, or `python -m node`),
#   with the peer's configuration, log and control socket in the agent's folder.
#   The driver mirrors the peers' logs into <run>/peers/ (sync_logs: what was
#   written since the last sync), so the runner reads them as it does locally.
#
# Rule: a peer's argv is the local engine's (peer_args), with the three paths
# that name this machine's files swapped for the agent's.

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from node.control import ControlError, request, request_when_up
from testbed.engines.procstats import cpu_seconds, private_memory_kb, resident_kb
from testbed.runs import read_appended

__all__ = [
    "RemotePeer",
    "RemotePeers",
    "on_ask",
    "on_figures",
    "on_poll",
    "on_read_logs",
    "on_signal",
    "on_spawn",
    "on_terminate",
    "on_wait",
]

PATH_FLAGS = ("--config", "--log", "--control")


def _peers(agent: Any) -> dict[int, Any]:
    return agent.state.setdefault("peers", {})


def on_spawn(
    agent: Any, host: int, args: list[str], config: bytes, fork: bool, command: list[str]
) -> None:
    """Start the peer of `host` on this machine (args: peer_args' list)."""
    from testbed.engines.zygote import PeerZygote

    folder = agent.folder / "peers"
    folder.mkdir(exist_ok=True)
    config_path = agent.folder / "node.json"
    if not config_path.exists():
        config_path.write_bytes(config)
    name = agent.wan.hosts[host].name
    paths = {
        "--config": str(config_path),
        "--log": str(folder / f"{name}.jsonl"),
        "--control": str(agent.wan.sockets_dir / f"{name}.ctl"),
    }
    argv = list(args)
    for k, arg in enumerate(argv[:-1]):
        if arg in PATH_FLAGS:
            argv[k + 1] = paths[arg]
    emu_host = agent.wan.hosts[host]
    if fork:
        zygote = agent.state.get("zygote")
        if zygote is None:
            zygote = agent.state["zygote"] = PeerZygote(agent.wan, agent.folder / "zygote")
            agent.state.setdefault("on_close", []).append(zygote.close)
        _peers(agent)[host] = zygote.spawn(emu_host, argv, label="node")
    else:
        _peers(agent)[host] = agent.wan.popen(emu_host, [*command, *argv], label="node")
    agent.state.setdefault("controls", {})[host] = paths["--control"]


def on_poll(agent: Any) -> dict[int, int | None]:
    """Every peer's exit status (None: running)."""
    return {host: proc.poll() for host, proc in _peers(agent).items()}


def on_signal(agent: Any, host: int, sig: int) -> None:
    """Signal the process group of the peer of `host` (as the local engine does)."""
    proc = _peers(agent).get(host)
    if proc is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)


def on_wait(agent: Any, host: int) -> None:
    proc = _peers(agent).get(host)
    if proc is not None:
        proc.wait()


def on_terminate(agent: Any, host: int, grace_s: float) -> None:
    proc = _peers(agent).pop(host, None)
    if proc is not None:
        proc.terminate(grace_s=grace_s)


def on_ask(
    agent: Any, host: int, op: str, timeout_s: float, wait_s: float | None, fields: dict[str, Any]
) -> dict[str, Any]:
    """A control request to the peer of `host` (wait_s: wait for one still starting)."""
    control = agent.state.get("controls", {}).get(host)
    if control is None:
        raise ControlError(f"no peer on host {host}")
    if wait_s is None:
        return request(control, op, timeout_s=timeout_s, **fields)
    proc = _peers(agent).get(host)
    running = lambda: proc is not None and proc.poll() is None  # noqa: E731
    return request_when_up(control, op, running=running, wait_s=wait_s, **fields)


def on_figures(agent: Any) -> dict[str, Any]:
    """The peers' CPU seconds and private memory, the delay engine's CPU seconds and
    resident memory, on this machine."""
    peers = {
        host: (cpu_seconds(proc.pid), private_memory_kb(proc.pid), proc.started)
        for host, proc in _peers(agent).items()
    }
    pid = agent.wan.engine_pid
    return {
        "peers": peers,
        "now": time.monotonic(),
        "engine": None if pid is None else (cpu_seconds(pid), resident_kb(pid)),
    }


def on_read_logs(agent: Any, offsets: dict[str, int]) -> dict[str, bytes]:
    """What each peer's log holds past `offsets` (whole lines only)."""
    return read_appended(agent.folder / "peers", "*.jsonl", offsets)


class RemotePeers:
    """The peers of a network across machines, as the emulator's engine sees them."""

    def __init__(self, wan: Any, config_path: Path, fork: bool, command: list[str]) -> None:
        self.wan = wan
        self.config = config_path.read_bytes()
        self.fork = fork
        self.command = command
        self._status: dict[int, int | None] = {}
        self._polled = 0.0
        self._offsets: dict[str, int] = {}
        self.closed = False  # the machines are gone: the copies are all there is

    def spawn(self, host: int, args: list[str]) -> RemotePeer:
        self.wan.call(host, on_spawn, host, args, self.config, self.fork, self.command)
        self._status[host] = None
        return RemotePeer(self, host)

    def status(self, host: int) -> int | None:
        """The peer's exit status, from a poll of every machine at most every 0.2 s."""
        if time.monotonic() - self._polled > 0.2:
            for answer in self.wan.call_all(on_poll):
                self._status.update(answer)
            self._polled = time.monotonic()
        return self._status.get(host)

    def ask(
        self,
        host: int,
        op: str,
        *,
        timeout_s: float = 5.0,
        wait_s: float | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        return self.wan.call(host, on_ask, host, op, timeout_s, wait_s, fields)

    def figures(self) -> list[dict[str, Any]]:
        return self.wan.call_all(on_figures)

    def sync_logs(self, folder: Path) -> None:
        """Append what the machines' peer logs gained since the last sync to folder's copies."""
        if self.closed:
            return
        for answer in self.wan.call_all(on_read_logs, dict(self._offsets)):
            for name, data in answer.items():
                with (folder / name).open("ab") as copy:
                    copy.write(data)
                self._offsets[name] = self._offsets.get(name, 0) + len(data)


class RemotePeer:
    """A peer on another machine, with what the engine asks of a local peer's process."""

    def __init__(self, peers: RemotePeers, host: int) -> None:
        self.peers = peers
        self.host = host
        self.pid = -1  # not a process of this machine
        self.started = time.monotonic()
        self.stderr_path = f"machine of host {host}: hosts/<name>/ in <run>/wan/machines/"

    def poll(self) -> int | None:
        return self.peers.status(self.host)

    def signal_group(self, sig: int) -> None:
        self.peers.wan.call(self.host, on_signal, self.host, int(sig))

    def wait(self) -> None:
        self.peers.wan.call(self.host, on_wait, self.host)

    def terminate(self, grace_s: float = 2.0) -> None:
        self.peers.wan.call(self.host, on_terminate, self.host, grace_s)
