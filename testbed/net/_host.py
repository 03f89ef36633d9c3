# One emulated host: its name, address, namespace and the topology node it stands for.

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed.net._netns import NETNS_DIR, nsenter_argv

__all__ = ["EmuHost"]


@dataclass(frozen=True, slots=True)
class EmuHost:
    """One emulated host."""

    index: int  # 0-based: row of the matrix, position in Wan.hosts
    name: str  # "h1"
    ip: str
    netns: str
    node: str  # the topology node it emulates
    labels: Mapping[str, str] = field(default_factory=dict)
    # A container host (testbed/net/_containers.py): Docker's id, the pid of its
    # init, and the argv prefix that runs a command in it (in its cgroups).
    container: str | None = None
    container_pid: int | None = None
    enter: tuple[str, ...] = ()

    @property
    def number(self) -> int:
        return self.index + 1

    def argv(self, argv: Sequence[str]) -> list[str]:
        """argv that runs `argv` on this host: in its network namespace, or for a
        container host in all of the container's namespaces and its cgroups."""
        if self.enter:
            return [*self.enter, *argv]
        return [*nsenter_argv(self.netns), *argv]

    @property
    def root(self) -> Path:
        """Where this host's file system is seen from the testbed ("/" but for containers)."""
        return Path(f"/proc/{self.container_pid}/root") if self.container_pid else Path("/")

    @property
    def netns_path(self) -> Path:
        """The namespace's file, for setns (what `nsenter --net=` opens)."""
        return NETNS_DIR / self.netns
