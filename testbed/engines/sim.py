# The simulator behind the experiment runner's engine verbs.

from __future__ import annotations

import resource
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from node.can.overlay import Status
from node.peer import NodeConfig
from node.wire import JobInfo
from testbed.analysis.stats import quantiles
from testbed.engines.peers import datagram_totals, messages_by_kind
from testbed.errors import InputError
from testbed.linkmodel import LinkModel, Reorder
from testbed.net import new_run_id, plan_network
from testbed.net.flooder import Pings
from testbed.sim import Simulator
from testbed.spec import ExperimentSpec
from testbed.topology import Topology

__all__ = ["SimEngine"]


class SimEngine:
    """Runs an experiment's peers in the simulator, addressed as the emulator would address them."""

    def __init__(
        self, spec: ExperimentSpec, topology: Topology, config: NodeConfig, run_dir: Path
    ) -> None:
        plan = plan_network(topology.n, new_run_id())
        self.config = config
        self._log = (run_dir / "events.jsonl").open("w", encoding="utf-8")
        self._crashed_at: dict[int, float] = {}
        self._id_host: dict[int, int] = {}  # every overlay id a peer has had -> its host
        self._repaired_at: dict[int, float] = {}
        self._leaves = {"graceful": 0, "abrupt": 0}
        self._merges: list[list[float | None]] = []  # [merging t, rejoined t] (reunion.py)
        self._merging: dict[int, list[float | None]] = {}  # host -> its open merge
        self.graveyard: dict[
            int, tuple[float, Any]
        ] = {}  # host -> (time, overlay) of its last crash, for post-mortems
        self.sim = Simulator(
            LinkModel(_seconds(topology.one_way_ms())),
            seed=spec.seed,
            ips=[h.ip for h in plan.hosts],
            port=spec.node.port,
            log=self._log,
            observer=self._observe,
        )
        self._wall0 = time.monotonic()
        self._job_records: list[dict[str, Any]] = []  # job_* records not yet taken
        self._peer_seconds = 0.0
        self._last = 0.0
        self._gone_stats: list[dict[str, int]] = []  # counters of the peers that ended
        self._floods: dict[int, _Flood] = {}  # source host -> its flood, while it runs
        self._flood_reports: list[dict[str, Any]] = []

    @property
    def now(self) -> float:
        return self.sim.now

    def _observe(self, host: int, record: dict[str, Any]) -> None:
        kind = record["kind"]
        if kind.startswith("job_"):
            self._job_records.append({"host": host, **record})
        elif kind == "joined":
            self._id_host[record["id"]] = host
            merge = self._merging.pop(host, None)
            if merge is not None:
                merge[1] = record["t"]
        elif kind == "merging":
            self._merging[host] = merge = [record["t"], None]
            self._merges.append(merge)
        elif kind == "crashed":
            self._crashed_at[record["id"]] = record["t"]
            self._repaired_at.pop(record["id"], None)  # a takeover before the crash is no repair
        elif kind == "takeover":
            for dead in record["dead"]:
                if dead in self._crashed_at and dead not in self._repaired_at:
                    self._repaired_at[dead] = record["t"]
        elif kind == "left":
            self._leaves["graceful" if record["graceful"] else "abrupt"] += 1

    def start(self, host: int, point: tuple[float, ...]) -> None:
        if host in self.sim.peers:
            self._gone_stats.append(self.sim.peers[host].stats())
            self.sim.stop(host)
        self.sim.start_peer(host, self.config, point)

    def join(self, host: int, bootstraps: list[int]) -> None:
        self.sim.join(host, bootstraps)

    def leave(self, host: int) -> None:
        self.sim.leave(host)

    def crash(self, host: int) -> None:
        peer = self.sim.peers.get(host)
        if peer is not None:
            self.graveyard[host] = (self.sim.now, peer.can)
            self._gone_stats.append(peer.stats())
        self.sim.crash(host)
        if peer is not None and not peer.member:  # nothing to repair (as the emulator counts)
            self._crashed_at.pop(peer.can.id, None)

    def freeze(self, host: int) -> None:
        self.sim.freeze(host)

    def thaw(self, host: int) -> None:
        self.sim.thaw(host)

    # -- the network (the churn language's faults) --------------------------------------------------

    def set_matrix(self, one_way_s: np.ndarray, why: str = "") -> int:
        self.sim.model.load(one_way_s.tolist())
        return 0

    def partition(self, groups: list[list[int]]) -> None:
        self.sim.model.partition(groups)

    def heal(self) -> None:
        self.sim.model.heal()

    def set_loss(self, rate: float, src: list[int] | None, dst: list[int] | None) -> None:
        self.sim.model.set_loss(rate, src, dst)

    def shape(
        self, verb: str, groups: list[list[int]], value: float | None, params: dict[str, float]
    ) -> None:
        """Reordering is the LinkModel's (both engines); bandwidth, access links and
        duplication are the emulator's: the simulator refuses them (the runner checks
        the schedule before it starts, so this is a last guard)."""
        if verb != "reorder":
            raise InputError(
                f"`set {verb}` needs the emulator (the simulator models delay, loss, jitter, "
                "partitions and reordering, not bandwidth or duplication)",
                source="<churn>",
            )
        reorder = None if not value else Reorder(value * 1.0, params["gap_s"] * 1e3)
        directions = (
            [(None, None)] if not groups else [(groups[0], groups[1]), (groups[1], groups[0])]
        )
        for src, dst in directions:
            self.sim.model.set_reorder(reorder, src, dst)

    def flood(self, sources: list[int], targets: list[int], per_s: float, port: int | None) -> None:
        """`flood`: valid-looking Pings from each source, as testbed/net/flooder.py sends
        them, paced in slices of FLOOD_SLICE_S of virtual time (0: they stop)."""
        for source in sources:
            running = self._floods.pop(source, None)
            if running is not None:
                self._flood_reports.append(running.report(self.sim.now))
            if per_s > 0:
                flood = _Flood(self, source, targets, per_s, port or self.sim.port)
                self._floods[source] = flood
                flood.tick()

    def flood_reports(self) -> list[dict[str, Any]]:
        """Stop every flood still running; what each flood sent."""
        for source in list(self._floods):
            self._flood_reports.append(self._floods.pop(source).report(self.sim.now))
        return self._flood_reports

    def advance(self, until: float) -> None:
        if until > self.sim.now:
            self._peer_seconds += len(self.sim.peers) * (until - self.sim.now)
        self.sim.run_until(until)
        for host in [h for h, p in self.sim.peers.items() if p.status == "left"]:
            self._gone_stats.append(self.sim.peers[host].stats())
            self.sim.stop(host)  # a peer that left has exited

    def peer_counters(self) -> dict[int, dict[str, int]]:
        """Every running peer's datagram counters (Peer.stats()), by host."""
        return {host: peer.stats() for host, peer in self.sim.peers.items()}

    def sched_counts(self) -> Counter[str]:
        """The running peers' scheduler counters, summed (placements, pushes, hops)."""
        total: Counter[str] = Counter()
        for peer in self.sim.peers.values():
            if peer.sched is not None:
                total.update(peer.sched.counts)
        return total

    def members(self) -> list[int]:
        return sorted(h for h, p in self.sim.peers.items() if p.member)

    def hosts_of(self, ids: set[int]) -> dict[int, int]:
        """The hosts that had these overlay ids (those known)."""
        return {i: self._id_host[i] for i in ids if i in self._id_host}

    def address_of(self, host: int) -> tuple[str, int]:
        return self.sim.addresses[host]

    def set_cluster_candidates(self, host: int, candidates: list[int]) -> None:
        if host in self.sim.peers:
            self.sim.set_cluster_candidates(host, candidates)

    # -- jobs (testbed/experiments/overlay_jobs.py) ------------------------------------------------------------------------

    def set_sched_cluster(self, host: int, members: list[int]) -> None:
        if host in self.sim.peers:
            self.sim.set_sched_cluster(host, members)

    def submit(self, host: int, job: JobInfo) -> bool:
        peer = self.sim.peers.get(host)
        if peer is None or not peer.member or host in self.sim.frozen_hosts():
            return False
        self.sim.submit(host, job)
        return True

    def job_records(self) -> list[dict[str, Any]]:
        out, self._job_records = self._job_records, []
        return out

    def live(self) -> dict[int, int]:
        """Running peers (host -> incarnation)."""
        return self.sim.incarnations()

    def departing(self) -> list[int]:
        return sorted(h for h, p in self.sim.peers.items() if p.status == Status.LEAVING)

    def dumps(self) -> list[dict[str, Any]]:
        return self.sim.dump_all()

    def resources(self) -> None:
        """Nothing per check: the simulator's peers share this process (its peak
        resident memory is in the summary, sim.max_rss_kb)."""
        return

    def close(self) -> None:
        self._log.close()

    def unfinished(self) -> dict[str, Any]:
        """How far an interrupted run got (the "sim" block of finish())."""
        return {"sim": self._figures()}

    def _figures(self) -> dict[str, Any]:
        wall = time.monotonic() - self._wall0
        stats = self.sim.stats
        handled = self.sim.steps
        minutes = self._peer_seconds / 60 or 1.0
        return {
            "virtual_s": round(self.sim.now, 3),
            # This process's peak resident memory (it holds every peer), a machine figure.
            "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "events": handled,  # the simulator's steps (timers, deliveries, actions)
            "datagrams": stats["sent"],
            "delivered": stats["delivered"],
            "dropped": {k[8:]: v for k, v in stats.items() if k.startswith("dropped.")},
            "events_per_s": round(handled / wall, 1) if wall > 0 else None,
            "messages_per_peer_minute": round(stats["sent"] / minutes, 2),
            "peer_datagrams": datagram_totals(
                [*self._gone_stats, *(p.stats() for p in self.sim.peers.values())]
            ),
            "by_kind": messages_by_kind(
                [*self._gone_stats, *(p.stats() for p in self.sim.peers.values())],
                self._peer_seconds / 60,
            ),
        }

    def finish(self) -> dict[str, Any]:
        self._log.flush()
        repair = [
            self._repaired_at[i] - t for i, t in self._crashed_at.items() if i in self._repaired_at
        ]
        unrepaired = sum(1 for i in self._crashed_at if i not in self._repaired_at)
        return {
            "sim": self._figures(),
            "repair_s": quantiles(repair)
            | {
                "crashes": len(self._crashed_at),
                "unrepaired": unrepaired,
                "values": [round(r, 3) for r in repair],
            },
            "leaves": dict(self._leaves),
            "merges": [list(m) for m in self._merges],
            "floods": self.flood_reports(),
        }


# How often a simulated flood sends what is due (virtual time).
FLOOD_SLICE_S = 0.01
# Where a simulated flooder sends from (answers to it are dropped: no peer there).
FLOOD_SOURCE_PORT = 9


class _Flood:
    """One source's flood in the simulator: what is due each slice, until it is replaced."""

    def __init__(
        self, engine: SimEngine, source: int, targets: list[int], per_s: float, port: int
    ) -> None:
        self.engine, self.source, self.targets = engine, source, targets
        self.per_s, self.port = per_s, port
        self.pings = Pings(len(engine._flood_reports) + len(engine._floods) + 1)
        self.t0 = engine.sim.now
        self.sent = 0

    def tick(self) -> None:
        sim = self.engine.sim
        if self.engine._floods.get(self.source) is not self:
            return  # stopped
        due = int((sim.now - self.t0) * self.per_s) - self.sent
        for _ in range(due):
            data = self.pings()
            target = self.targets[self.pings.seq % len(self.targets)]
            # No peer, or another port than the peers': no socket, the datagram goes nowhere.
            if self.port == sim.port and target in sim.peers:
                sim.inject(self.source, target, data, FLOOD_SOURCE_PORT)
            self.sent += 1
        sim.at(sim.now + FLOOD_SLICE_S, self.tick)

    def report(self, now: float) -> dict[str, Any]:
        seconds = now - self.t0
        return {
            "host": self.engine.sim.names[self.source],
            "per_s_asked": self.per_s,
            "targets": len(self.targets),
            "sent": self.sent,
            "send_errors": 0,
            "seconds": round(seconds, 3),
            "per_s": round(self.sent / seconds, 1) if seconds > 0 else 0.0,
        }


def _seconds(one_way_ms: np.ndarray) -> np.ndarray:
    """ms to s in place (the same values as `/ 1e3`, without a second n x n array)."""
    one_way_ms /= 1e3
    return one_way_ms
