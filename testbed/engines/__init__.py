"""The two engines an experiment runs on, behind one protocol.

* `testbed.engines.sim`: the simulator driver (`SimEngine`), every peer core in one process
  in virtual time (the discrete-event core itself is `testbed.sim`);
* `testbed.engines.emu`: the emulator's peer driver (`EmuEngine`), one `python -m node`
  process per host in a network namespace on the WAN core (`testbed.net`).

Both configure their peers with `testbed.engines.peers` (one `NodeConfig` per spec, one
`peer_seed(seed, host, incarnation)`), so the same spec gives the same peers on either.
"""

from __future__ import annotations

from typing import Any, Protocol

from testbed.churn import ChurnEngine

__all__ = ["Engine"]


class Engine(ChurnEngine, Protocol):
    """What the runner needs from an engine (simulator or emulator); the churn
    language's verbs (freeze, partition, set_matrix, ...) come from ChurnEngine."""

    now: float

    def start(self, host: int, point: tuple[float, ...]) -> None: ...
    def join(self, host: int, bootstraps: list[int]) -> None: ...
    def dumps(self) -> list[dict[str, Any]]: ...
    def hosts_of(self, ids: set[int]) -> dict[int, int]: ...  # overlay ids -> hosts (known ones)
    def address_of(self, host: int) -> tuple[str, int]: ...
    def set_cluster_candidates(self, host: int, candidates: list[int]) -> None: ...
    def members(self) -> list[int]: ...
    def resources(self) -> dict[str, Any] | None: ...  # at each check; None: nothing to say
    def finish(self) -> dict[str, Any]: ...
    def unfinished(self) -> dict[str, Any]: ...  # an interrupted run's figures so far
    def close(self) -> None: ...
