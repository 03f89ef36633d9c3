# Real pings between peer processes on an emulated WAN, for latency prediction
# (issue "Latency prediction", seed 002 §5.2.3): one `python -m node` process
# per host, not joined to any overlay, each asked over its control socket to
# measure every other host with its prober (UDP Ping/Pong through the WAN
# core, under the prober's budget). All peers measure at once.
#
# The techniques then read these samples instead of the matrix: a measurement
# a technique asks for is the filter of the first k samples of that pair, so
# a run costs the pings its technique asked for, and every technique and seed
# reads the same pings.

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from node.config import config_to_dict
from node.control import ControlError, request, request_when_up
from testbed.engines.emu import NODE_COMMAND, START_TIMEOUT_S, peer_args
from testbed.engines.peers import build_node_config, draw_point, peer_seed
from testbed.engines.remote import RemotePeers
from testbed.errors import EmulationError
from testbed.net import open_cluster_wan, open_wan
from testbed.runs import write_json
from testbed.spec import NodeSpec
from testbed.topology import Topology

__all__ = ["PingTable", "ping_all_pairs"]


@dataclasses.dataclass
class PingTable:
    """samples_ms[a][b]: the RTTs host a measured to host b, in the order they came."""

    samples_ms: list[list[list[float]]]
    lost: np.ndarray  # (n, n) samples with no answer
    configured_ms: np.ndarray  # (n, n) RTT the WAN core applied (after any clamp)
    wall_s: float
    fidelity: dict[str, Any]  # what the WAN delivered meanwhile (FidelityMonitor's summary)

    def median_error(self) -> float:
        """How far a measurement is from the matrix: over the pairs, the median of
        |mean of a pair's samples - configured RTT| / configured RTT."""
        n = len(self.samples_ms)
        return float(
            np.median(
                [
                    abs(np.mean(self.samples_ms[a][b]) - self.configured_ms[a, b])
                    / self.configured_ms[a, b]
                    for a in range(n)
                    for b in range(n)
                    if a != b and self.samples_ms[a][b]
                ]
            )
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "samples_ms": [
                [[round(x, 4) for x in row] for row in line] for line in self.samples_ms
            ],
            "lost": self.lost.tolist(),
            "configured_ms": np.round(self.configured_ms, 4).tolist(),
            "wall_s": round(self.wall_s, 3),
            "wan_fidelity": self.fidelity,
        }


def ping_all_pairs(
    topology: Topology,
    run_dir: Path,
    *,
    samples: int,
    rate: float,
    clamp: bool,
    seed: int,
    concurrency: int = 8,
    on_host: Callable[[int], None] | None = None,
    cluster: str | None = None,
) -> PingTable:
    """Bring up the WAN, start a prober peer per host, have each measure all
    others with `samples` pings (at most `rate` Pings per second per peer,
    `concurrency` peers measuring at a time), tear down. `on_host(done)`
    reports progress. Lost pings are counted; a pair none of whose pings came
    back either way is an error (its host is unreachable). `cluster`: the hosts
    spread over the machines of that Ray cluster (docs/beyond-one-machine.md)."""
    node = NodeSpec()
    config = build_node_config(node)
    config = dataclasses.replace(
        config,
        probe=dataclasses.replace(config.probe, samples=samples, rate=rate, timeout_s=2.0),
    )
    rng = random.Random(seed)
    if cluster is None:
        wan: Any = open_wan(topology, clamp=clamp, run_dir=run_dir / "wan", seed=seed)
    else:  # the hosts spread over the machines of a Ray cluster
        wan = open_cluster_wan(
            topology, address=cluster, clamp=clamp, run_dir=run_dir / "wan", seed=seed
        )
    with wan:
        config_path = run_dir / "node.json"
        write_json(config_path, config_to_dict(config))
        (run_dir / "peers").mkdir(exist_ok=True)
        n = len(wan.hosts)
        probers = _Probers(wan, config_path, remote=cluster is not None)
        probers.start(node, rng, seed, run_dir)
        configured = wan.configured_one_way_ms()
        configured = configured + configured.T
        started = time.monotonic()
        addresses = [[h.ip, node.port] for h in wan.hosts]
        # The WAN under the pings' load: their errors are the WAN's plus the peers'.
        monitor = wan.monitor_fidelity(seed=seed)
        try:
            table, lost = _measure_all(
                probers.ask,
                addresses,
                samples=samples,
                rate=rate,
                concurrency=concurrency,
                on_host=on_host,
            )
        finally:
            fidelity = monitor.close()
        wall = time.monotonic() - started
        probers.stop(run_dir)
    result = PingTable(table, lost, configured, wall, fidelity)
    write_json(run_dir / "pings.json", result.to_json())
    silent = [(a, b) for a in range(n) for b in range(a + 1, n) if not table[a][b] + table[b][a]]
    if silent:
        raise EmulationError(
            f"{len(silent)} pair(s) never answered a ping, e.g. hosts {silent[0]}; "
            f"see {run_dir / 'pings.json'} and {run_dir / 'wan'}"
        )
    return result


class _Probers:
    """One prober peer per host: processes of this machine asked on their control
    sockets, or on a network across machines each machine's (RemotePeers)."""

    def __init__(self, wan: Any, config_path: Path, *, remote: bool) -> None:
        self.wan = wan
        self.controls = [str(wan.sockets_dir / f"{h.name}.ctl") for h in wan.hosts]
        self.remote = RemotePeers(wan, config_path, False, list(NODE_COMMAND)) if remote else None
        self.config_path = config_path
        self.procs: list[Any] = []

    def start(self, node: NodeSpec, rng: random.Random, seed: int, run_dir: Path) -> None:
        """Start one peer per host (its point drawn from `rng` in host order) and
        wait until each answers on its control socket."""
        for k, host in enumerate(self.wan.hosts):
            args = peer_args(
                host.name,
                f"{host.ip}:{node.port}",
                self.config_path,
                draw_point(node, rng),
                peer_seed(seed, k, 1),
                run_dir / "peers" / f"{host.name}.jsonl",
                self.controls[k],
            )
            if self.remote is not None:
                self.procs.append(self.remote.spawn(k, args))
            else:
                self.procs.append(self.wan.popen(host, [*NODE_COMMAND, *args], label="node"))
        for k in range(len(self.procs)):
            self.ask(k, "status", wait_s=START_TIMEOUT_S)

    def ask(
        self, k: int, op: str, *, timeout_s: float = 5.0, wait_s: float | None = None, **fields: Any
    ) -> dict[str, Any]:
        if self.remote is not None:
            return self.remote.ask(k, op, timeout_s=timeout_s, wait_s=wait_s, **fields)
        if wait_s is None:
            return request(self.controls[k], op, timeout_s=timeout_s, **fields)
        proc = self.procs[k]
        return request_when_up(
            self.controls[k], op, running=lambda: proc.poll() is None, wait_s=wait_s, **fields
        )

    def stop(self, run_dir: Path) -> None:
        for k, proc in enumerate(self.procs):
            with contextlib.suppress(ControlError):
                self.ask(k, "exit", timeout_s=2.0)
            proc.terminate(grace_s=3.0)
        if self.remote is not None:  # their logs, as a local run has them
            self.remote.sync_logs(run_dir / "peers")


def _measure_all(
    ask: Callable[..., dict[str, Any]],
    addresses: list[list[Any]],
    *,
    samples: int,
    rate: float,
    concurrency: int,
    on_host: Callable[[int], None] | None,
) -> tuple[list[list[list[float]]], np.ndarray]:
    """Have every peer measure all others (`concurrency` at a time): the RTTs in
    ms per ordered pair, and the samples lost per pair."""
    n = len(addresses)
    done = 0

    def measure(a: int) -> dict[str, Any]:
        others = [addresses[b] for b in range(n) if b != a]
        # every sample can take the prober's timeout; the budget paces the rest
        budget_s = 60.0 + len(others) * samples / rate + 2.0 * samples
        return ask(a, "rtt", targets=others, samples=samples, timeout_s=budget_s)

    table: list[list[list[float]]] = [[[] for _ in range(n)] for _ in range(n)]
    lost = np.zeros((n, n), dtype=np.int64)
    with ThreadPoolExecutor(max(1, min(concurrency, n))) as pool:
        for a, answer in enumerate(pool.map(measure, range(n))):
            others = [b for b in range(n) if b != a]
            for b, rtts, missing in zip(others, answer["rtts_s"], answer["lost"], strict=True):
                table[a][b] = [x * 1e3 for x in rtts]
                lost[a, b] = missing
            done += 1
            if on_host is not None:
                on_host(done)
    return table, lost
