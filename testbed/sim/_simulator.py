# The deterministic discrete-event simulator that hosts peer cores.
#
# Theory of operation
#   A heap of (time, seq, kind, ...) entries; seq breaks ties in insertion
#   order. Three kinds: a datagram arriving at a host, a peer's timer, and a
#   scheduled command (join, leave, crash, anything callable). After every
#   input to a peer the simulator drains its events (to the event log) and its
#   datagrams (each scheduled at now + LinkModel.fate(src, dst)), then
#   re-arms its timer from get_timer(). Exactly what node.runtime does on real
#   sockets, with the matrix's one-way delays instead of the WAN core.
#
# Determinism: one master seed. Link randomness (loss, jitter) comes from one
# Random derived from it; every peer incarnation gets its own Random derived
# from (seed, host, incarnation), so adding a peer does not change the draws
# of the others. The same seed gives the same event log, byte for byte.
#
# Ranks of parallel jobs (node/sched) are simulated: a RunTask ends after its
# compute time, failing if a peer of another rank crashed or left meanwhile
# (the real ranks' sockets would break).
#
# Speed: the peers of one grid share a Codec that keeps recent decoded bodies
# (messages are immutable), so an update sent to 30 neighbours is decoded once.

from __future__ import annotations

import gc
import heapq
import itertools
import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import IO, Any

from node.drive import drain
from node.peer import Address, NodeConfig, Peer
from node.sched.agent import KillTask, RunTask
from node.wire import Codec, JobInfo
from testbed.linkmodel import DROP_REASONS, LinkModel
from testbed.seeds import peer_seed

__all__ = ["Simulator"]

_DELIVER = 0
_TIMER = 1
_CALL = 2
# Decoded datagram bodies the peers' shared codec keeps: an update reaches its
# 20-40 receivers within the largest one-way delay, a few thousand datagrams.
SHARED_BODIES = 8192
# Datagrams a frozen peer's socket holds (a default 208 KiB receive buffer of ~1 KiB updates).
FROZEN_BUFFER = 200


# The collector's thresholds inside run_until (Python's are 700, 10, 10): a young
# collection every 100,000 allocations instead of every 700.
GC_THRESHOLDS = (100_000, 50, 100)
# run_until freezes what is alive; a finished simulator's peers stay frozen, never
# collected, until thawed. A new simulator thaws and collects once more objects are
# frozen than twice those alive at the last such collection, plus this slack: memory
# stays within about twice what is alive, at one collection per doubling (a process
# that made a simulator per example leaked 1.4 MB per example).
GC_THAW_SLACK = 100_000
_frozen_alive = 0  # objects frozen right after the last thaw and collection


def _collect_dead_simulators() -> None:
    global _frozen_alive
    if gc.get_freeze_count() > 2 * _frozen_alive + GC_THAW_SLACK:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _frozen_alive = gc.get_freeze_count()


class Simulator:
    """Hosts peers at the host indices of a latency matrix and runs them in virtual time.

    Host k (0-based) has the address (ips[k], port), the same address the
    emulator gives it, so peers cannot tell the two worlds apart.
    """

    def __init__(
        self,
        model: LinkModel,
        *,
        seed: int,
        ips: Sequence[str],
        port: int = 7000,
        names: Sequence[str] | None = None,
        log: IO[str] | None = None,
        observer: Callable[[int, dict[str, Any]], None] | None = None,
    ) -> None:
        if len(ips) != model.n:
            raise ValueError(f"{len(ips)} addresses for {model.n} hosts")
        _collect_dead_simulators()
        self.model = model
        self.seed = seed
        self.port = port
        self.addresses: list[Address] = [(ip, port) for ip in ips]
        self.names = list(names) if names is not None else [f"h{k + 1}" for k in range(model.n)]
        self._host_of = {addr: k for k, addr in enumerate(self.addresses)}
        self._ip_host = {ip: k for k, ip in enumerate(ips)}
        self._ranks: dict[tuple[int, int, int], dict[int, int]] = {}  # running ranks
        self._link_rng = random.Random(f"{seed}/links")
        self.now = 0.0
        self._heap: list[tuple[Any, ...]] = []
        self._seq = itertools.count()
        self.peers: dict[int, Peer] = {}
        self._incarnation = Counter[int]()
        self._timer_at: dict[int, float] = {}
        self._outputs: dict[int, _PeerOutputs] = {}  # _after: each host's sink, made once
        self._log = log
        self._observer = observer
        self.stats = Counter[str]()
        self.steps = 0  # heap entries processed: deliveries, timers, scheduled calls
        self._codecs: dict[bytes | None, Codec] = {}  # one per grid key, shared by its peers
        # Frozen peers (SIGSTOP): what arrives waits in their socket buffer.
        self._frozen: dict[int, list[tuple[bytes, Address]]] = {}

    # -- peers --------------------------------------------------------------------------------------

    def start_peer(self, host: int, config: NodeConfig, point: Sequence[float]) -> Peer:
        """Start a (new incarnation of a) peer process on `host`; not yet a member."""
        if host in self.peers:
            raise RuntimeError(f"{self.names[host]} already runs a peer")
        self._incarnation[host] += 1
        rng = random.Random(peer_seed(self.seed, host, self._incarnation[host]))
        codec = self._codecs.get(config.grid_key)
        if codec is None:
            codec = self._codecs[config.grid_key] = Codec(
                config.grid_key, shared_bodies=SHARED_BODIES
            )
        peer = Peer(config, address=self.addresses[host], point=point, rng=rng, codec=codec)
        self.peers[host] = peer
        return peer

    def crash(self, host: int) -> None:
        """Kill the peer at once (kill -9): no goodbye, its datagrams in flight still arrive elsewhere."""
        peer = self.peers.pop(host, None)
        self._frozen.pop(host, None)
        if peer is not None:
            self._timer_at.pop(host, None)
            self._write(host, {"t": round(self.now, 6), "kind": "crashed", "id": peer.can.id})

    def frozen_hosts(self) -> set[int]:
        return set(self._frozen)

    def incarnations(self) -> dict[int, int]:
        """The running peers' hosts and which incarnation each is (1 for the first)."""
        return {host: self._incarnation[host] for host in self.peers}

    def stop(self, host: int) -> None:
        """Remove a peer that has finished (left gracefully)."""
        self.peers.pop(host, None)
        self._timer_at.pop(host, None)
        self._frozen.pop(host, None)

    def freeze(self, host: int) -> None:
        """Stop the peer as SIGSTOP does: no timers, datagrams wait in its socket
        buffer (up to FROZEN_BUFFER of them; the rest are dropped)."""
        if host in self.peers:
            self._frozen.setdefault(host, [])

    def thaw(self, host: int) -> None:
        """Let a frozen peer run again (SIGCONT): it reads what waited, then its late timer fires."""
        backlog = self._frozen.pop(host, None)
        peer = self.peers.get(host)
        if backlog is None or peer is None:
            return
        for data, src in backlog:
            self.stats["delivered"] += 1
            peer.receive_datagram(data, src, self.now)
        self._timer_at.pop(host, None)
        self._after(host)

    def join(self, host: int, bootstraps: Sequence[int]) -> None:
        peer = self.peers[host]
        peer.join([self.addresses[b] for b in bootstraps], self.now)
        self._after(host)

    def leave(self, host: int) -> None:
        peer = self.peers.get(host)
        if peer is not None:
            peer.leave(self.now)
            self._after(host)

    def set_cluster_candidates(self, host: int, candidates: Sequence[int]) -> None:
        """Give the peer at `host` its first-approximation cluster (hosts, nearest first)."""
        peer = self.peers[host]
        peer.set_cluster_candidates([self.addresses[c] for c in candidates], self.now)
        self._after(host)

    def set_sched_cluster(self, host: int, members: Sequence[int]) -> None:
        """Give the peer at `host` its cluster for co-scheduling (hosts)."""
        peer = self.peers[host]
        peer.set_sched_cluster([self.addresses[m] for m in members], self.now)
        self._after(host)

    def submit(self, host: int, job: JobInfo) -> None:
        """Submit a job at the peer at `host` (its entry)."""
        peer = self.peers[host]
        peer.submit(job, self.now)
        self._after(host)

    def _run_rank(self, host: int, action: RunTask) -> None:
        incarnation = self._incarnation[host]
        key = (host, action.job, action.attempt)
        ranks = {
            k: self._incarnation[k]
            for ip, _ in action.peers
            if (k := self._ip_host.get(ip)) is not None and k in self.peers
        }
        if len(ranks) < len(action.peers):
            self.at(self.now + 1.0, lambda: self._end_rank(host, incarnation, action, False))
            return
        self._ranks[key] = ranks

        def end() -> None:
            if self._ranks.pop(key, None) is None:
                return  # killed
            broken = [
                k for k, inc in ranks.items() if self._incarnation[k] != inc or k not in self.peers
            ]
            self._end_rank(host, incarnation, action, not broken)

        self.at(self.now + action.compute_s, end)

    def _end_rank(self, host: int, incarnation: int, action: RunTask, ok: bool) -> None:
        peer = self.peers.get(host)
        if peer is None or self._incarnation[host] != incarnation:
            return
        reason = "" if ok else "a peer closed its connection"
        peer.task_finished(action.job, action.attempt, ok, reason, self.now)
        self._after(host)

    def measure_rtt(self, host: int, target: int, samples: int | None = None) -> int | None:
        """Have the peer at `host` measure RTTs to the peer at `target` (reported
        as an "rtt" event with target = the target's host index)."""
        peer = self.peers[host]
        request = peer.measure_rtt(target, self.addresses[target], self.now, samples)
        self._after(host)
        return request

    # -- time ---------------------------------------------------------------------------------------

    def inject(self, src: int, dst: int, data: bytes, port: int) -> None:
        """A datagram from something on host `src` besides its peer (a flooder, sending
        from `port`) to the peer of host `dst`, over the same links as the peers'."""
        self._transmit(src, dst, data, (self.addresses[src][0], port), "injected")

    def _transmit(self, src: int, dst: int, data: bytes, source: Address, counter: str) -> None:
        """Onto the heap at the pair's delay, or dropped as the link model decides."""
        delay = self.model.fate(src, dst, self._link_rng) if dst != src else 0.0
        if delay < 0:
            self.stats[f"dropped.{DROP_REASONS[delay]}"] += 1
            return
        self.stats[counter] += 1
        heapq.heappush(self._heap, (self.now + delay, next(self._seq), _DELIVER, dst, data, source))

    def at(self, t: float, action: Callable[[], None]) -> None:
        """Run `action` at virtual time t (>= now)."""
        heapq.heappush(self._heap, (max(t, self.now), next(self._seq), _CALL, action, None, None))

    def run_until(self, t: float) -> None:
        """Process every event up to and including time t; then now = t.

        The cyclic garbage collector runs rarely meanwhile (GC_THRESHOLDS): the
        peers make almost no cyclic garbage, but its frequent scans of their
        millions of objects took a fifth of the run (docs/performance.md). What
        is still alive at the end is the peers' long-lived state: it is frozen
        (gc.freeze) so that the collector, back at its usual thresholds, does
        not scan it all again at the next allocation."""
        thresholds = gc.get_threshold()
        gc.set_threshold(*GC_THRESHOLDS)
        try:
            self._run_until(t)
        finally:
            gc.freeze()
            gc.set_threshold(*thresholds)

    def _run_until(self, t: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= t:
            when, _seq, kind, a, b, c = heapq.heappop(heap)
            self.now = when
            self.steps += 1
            if kind == _DELIVER:
                peer = self.peers.get(a)
                if peer is None:
                    self.stats["dropped.no_peer"] += 1
                    continue
                backlog = self._frozen.get(a)
                if backlog is not None:
                    if len(backlog) < FROZEN_BUFFER:
                        backlog.append((b, c))
                    else:
                        self.stats["dropped.frozen_buffer"] += 1
                    continue
                self.stats["delivered"] += 1
                peer.receive_datagram(b, c, when)
                self._after(a)
            elif kind == _TIMER:
                if self._timer_at.get(a) != when or a not in self.peers:
                    continue
                if a in self._frozen:  # re-armed when it thaws
                    del self._timer_at[a]
                    continue
                del self._timer_at[a]
                self.peers[a].handle_timer(when)
                self._after(a)
            else:
                a()
        self.now = max(self.now, t)

    def _after(self, host: int) -> None:
        """Drain a peer's outputs after an input (node/drive.py, the runtime's step too)."""
        peer = self.peers.get(host)
        if peer is None:
            return
        outputs = self._outputs.get(host)
        if outputs is None:
            outputs = self._outputs[host] = _PeerOutputs(self, host)
        drain(peer, self.now, outputs)

    def _write(self, host: int, record: dict[str, Any]) -> None:
        self.stats["events"] += 1
        if self._observer is not None:
            self._observer(host, record)
        if self._log is not None:
            self._log.write(
                json.dumps({"host": self.names[host], **record}, separators=(",", ":")) + "\n"
            )

    # -- introspection ------------------------------------------------------------------------------

    def dump(self, host: int) -> dict[str, Any]:
        return {"host": self.names[host], **self.peers[host].dump(self.now)}

    def dump_all(self) -> list[dict[str, Any]]:
        return [self.dump(h) for h in sorted(self.peers)]

    @property
    def pending(self) -> int:
        return len(self._heap)


class _PeerOutputs:
    """One peer's outputs into the simulator: events to the log, ranks pretended, datagrams
    onto the heap at their pair's delay, the timer onto the heap."""

    __slots__ = ("host", "sim")

    def __init__(self, sim: Simulator, host: int) -> None:
        self.sim = sim
        self.host = host

    def on_event(self, record: dict[str, Any]) -> None:
        self.sim._write(self.host, record)

    def on_action(self, action: RunTask | KillTask) -> None:
        if isinstance(action, KillTask):
            self.sim._ranks.pop((self.host, action.job, action.attempt), None)
        else:
            self.sim._run_rank(self.host, action)

    def on_datagram(self, data: bytes, addr: Address) -> None:
        sim, host = self.sim, self.host
        dst = sim._host_of.get(addr)
        if dst is None:
            sim.stats["dropped.no_host"] += 1
            return
        sim._transmit(host, dst, data, sim.addresses[host], "sent")

    def on_timer(self, deadline: float | None) -> None:
        sim, host = self.sim, self.host
        if deadline is not None and sim._timer_at.get(host) != deadline:
            sim._timer_at[host] = deadline
            heapq.heappush(
                sim._heap, (max(deadline, sim.now), next(sim._seq), _TIMER, host, None, None)
            )
