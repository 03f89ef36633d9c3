# An emulated network across the machines of a Ray cluster.
#
# Theory of operation
#   The hosts are placed on the machines (place_hosts: a balanced cut of the
#   latency graph, so that close pairs share a machine). On each machine an
#   agent (SiteAgent, a Ray actor pinned to that machine's node, running as
#   root in the machine's own network) builds its share as an ordinary Wan
#   does: the hosts' namespaces, a core of its own, its own delay engine, which
#   knows every host of the network (the same addresses, names and matrix
#   rows everywhere) but only ever sees packets its own hosts send. The cores
#   are joined by VXLAN tunnels, one per pair of machines: the device is made
#   in the machine's network, over its address, and moved into the core (it
#   keeps its underlay where it was made). A core routes the other machines'
#   hosts through their tunnel and hands the delay engine only what its own
#   hosts send (what comes out of a tunnel was held at its source already).
#
#   A packet between machines is held at its source for its pair's delay
#   minus the one-way latency between the two cores, measured at bring-up
#   through the tunnel; the engines get matrices with that subtracted, and a
#   pair whose delay is shorter than it is refused (or clamped) naming the pair.
#
#   ClusterWan is the driver's Wan: the same runtime control (partition, loss,
#   latency, ...) sent to every machine's engine (_FanOut), the same host
#   lookups; probes run on the machine of their source host.
#
# Rule: bring-up is all or nothing: an agent that fails closes every agent.

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import CleanupError, EmulationError, FloorError
from testbed.net._build import ip_batch
from testbed.net._fidelity import FidelityMonitor
from testbed.net._host import EmuHost
from testbed.net._netns import nsenter_argv
from testbed.net._plan import NetworkPlan, new_run_id, plan_network
from testbed.net._probe import IcmpProber
from testbed.net._remote import Files, RemotePrograms, on_run, on_set_access, on_spoofed
from testbed.net._shaping import AccessLink
from testbed.net._wan import Wan, _engine_choice
from testbed.net.delay import read_delay_file, write_delay_file
from testbed.pool import ray_get, ray_session
from testbed.runs import new_run_dir, pack_folder, unpack_folder, write_json
from testbed.topology import Topology

__all__ = ["ClusterWan", "SiteAgent", "open_cluster_wan", "place_hosts"]

TUNNEL_PORT = 4789
LINK_PROBES = 50


def place_hosts(rtt_ms: np.ndarray, shares: Sequence[float]) -> list[list[int]]:
    """Hosts (matrix rows) for each machine, as many as its share of the total: the
    order of the latency graph's Fiedler vector (close hosts near each other) cut
    into consecutive blocks, so that few close pairs are split."""
    n = len(rtt_ms)
    rtt = np.maximum(np.asarray(rtt_ms, dtype=np.float64), np.asarray(rtt_ms).T)
    scale = float(np.median(rtt[rtt > 0])) if (rtt > 0).any() else 1.0
    affinity = np.exp(-rtt / scale)
    np.fill_diagonal(affinity, 0.0)
    laplacian = np.diag(affinity.sum(axis=1)) - affinity
    _, vectors = np.linalg.eigh(laplacian)
    order = np.argsort(vectors[:, 1] if n > 1 else np.zeros(n), kind="stable")
    total = float(sum(shares))
    counts = [round(n * s / total) for s in shares]
    counts[-1] = n - sum(counts[:-1])
    out, start = [], 0
    for count in counts:
        out.append(sorted(int(k) for k in order[start : start + count]))
        start += count
    return out


class SiteAgent:
    """One machine's share of the network (a Ray actor's body)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.wan: Any = None
        self.folder: Path | None = None
        self.files: Path | None = None  # {run} of this machine's hosts (testbed/net/_remote.py)
        self.state: dict[str, Any] = {}  # what the layers above keep here (call)
        self._engine_lock = threading.Lock()  # one request at a time on the engine's socket

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """fn(this agent, *args, **kwargs) on this machine: how the layers above (the
        peers' engine) run their part here without this layer knowing them."""
        return fn(self, *args, **kwargs)

    def up(
        self,
        topology: Topology,
        network: NetworkPlan,
        site: NetworkPlan,
        *,
        seed: int,
        clamp: bool,
        where: str,
    ) -> dict[str, Any]:
        import ray

        if os.path.isdir(where):  # programs named relative to the driver's folder
            os.chdir(where)
        self.folder = Path(tempfile.mkdtemp(prefix=f"testbed-site-{site.run_id}-"))
        (self.folder / "wan").mkdir()
        self.files = self.folder / "files"
        self.files.mkdir()
        wan = Wan(topology, site, self.folder / "wan", scale=1.0, network=network)
        # One data thread per machine: on a machine shared by several (this one in the
        # suite) more threads than cores make every engine late.
        wan._engine_queues, wan._engine_source = _engine_choice(1, None)
        self.wan = wan
        wan._start(
            mininet=False, calibrate=True, clamp=clamp, realtime=True, seed=seed, progress=None
        )
        return {
            "address": ray.util.get_node_ip_address(),
            "calibration": None if wan.calibration is None else dataclasses.asdict(wan.calibration),
            "engine_pid": wan.engine_pid,
            "files": str(self.files),
        }

    def tunnels(self, me: int, peers: list[dict[str, Any]], vni_base: int) -> None:
        """Join this core to every other machine's: peers = [{site, address, ips}]."""
        core = self.wan.plan.core_netns
        rules = []
        for peer in peers:
            k = peer["site"]
            dev = f"tbx{k}"
            low, high = sorted((me, k))
            vni = (vni_base + low * 64 + high) & 0xFFFFFF
            ip_batch(
                [
                    (
                        f"link add {dev} address {_mac(me, k)} type vxlan id {vni} "
                        f"local {peer['local']} remote {peer['address']} dstport {TUNNEL_PORT}"
                    ),
                    f"link set {dev} netns {core}",
                ]
            )
            rules += [
                f"link set {dev} up",
                f"addr add 169.254.0.{me + 1}/32 dev {dev}",
                f"route add 169.254.0.{k + 1}/32 dev {dev} scope link",
                f"neigh add 169.254.0.{k + 1} lladdr {_mac(k, me)} dev {dev} nud permanent",
                *(f"route add {ip}/32 via 169.254.0.{k + 1} dev {dev}" for ip in peer["ips"]),
            ]
        ip_batch(rules, core)
        # What comes out of a tunnel was held at its source: forward it as it is.
        subprocess.run(
            [*nsenter_argv(core), "iptables", "-w", "-I", "FORWARD", "1", "-i", "tbx+", "-j", "ACCEPT"],
            check=True,
            capture_output=True,
        )  # fmt: skip

    def link_latency(self, peer_site: int) -> float:
        """The one-way latency to another machine's core through the tunnel (ms): half
        the median of LINK_PROBES echoes, from this core (no engine on that path)."""
        core = self.wan.plan.core_netns
        out = subprocess.run(
            [*nsenter_argv(core), "ping", "-n", "-c", str(LINK_PROBES), "-i", "0.01", "-W", "1",
             f"169.254.0.{peer_site + 1}"],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        rtts = [
            float(line.split("time=")[1].split()[0]) for line in out.splitlines() if "time=" in line
        ]
        if len(rtts) < LINK_PROBES // 2:
            raise EmulationError(
                f"{self.name}: the tunnel to machine {peer_site + 1} answered {len(rtts)} of "
                f"{LINK_PROBES} echoes"
            )
        return float(np.median(rtts)) / 2.0

    def engine(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._engine_lock:
            return getattr(self.wan.engine, method)(*args, **kwargs)

    def load_one_way_s(self, one_way_s: np.ndarray, clamp: bool) -> Any:
        assert self.folder is not None
        path = self.folder / "wan" / "engine" / f"matrix-{time.monotonic_ns()}.f64"
        write_delay_file(path, one_way_s)
        with self._engine_lock:
            return self.wan.engine.load_matrix(path.resolve(), clamp=clamp)

    def probe(
        self, pairs: list[tuple[int, int]], samples: int, rate_per_s: float, seed: int
    ) -> list[list[float]]:
        """RTTs (s) of (src, dst) host-index pairs whose source is on this machine."""
        hosts = self.wan.hosts
        local = [h.index for h in self.wan.local]
        slot = {k: i for i, k in enumerate(local)}
        others = [h.index for h in hosts if h.index not in slot]
        where = {**slot, **{k: len(local) + i for i, k in enumerate(others)}}
        ips = [hosts[k].ip for k in local] + [hosts[k].ip for k in others]
        # Destinations on other machines have no socket here; the compiled loop (when
        # built) still sends to them, timed at its SCHED_FIFO priority: a Python loop
        # under the load of a shared machine measured its own lateness as the WAN's.
        with IcmpProber([hosts[k].netns for k in local], ips) as prober:
            result = prober.probe(
                [(slot[s], where[d]) for s, d in pairs],
                samples=samples,
                rate_per_s=rate_per_s,
                timeout_s=2.0,
                seed=seed,
            )
        return result.rtts_s

    def close(self) -> bytes:
        """Tear this machine's share down; returns its run folder, packed."""
        problems = ""
        for closing in self.state.pop("on_close", []):  # the layers above first
            with contextlib.suppress(Exception):
                closing()
        if self.wan is not None:
            try:
                self.wan.close()
            except CleanupError as exc:
                problems = str(exc)
        if self.folder is None:
            return b""
        if problems:
            (self.folder / "wan" / "teardown-problems.txt").write_text(problems)
        packed = pack_folder(self.folder / "wan")
        shutil.rmtree(self.folder, ignore_errors=True)
        return packed


class _ClusterFidelity(FidelityMonitor):
    """FidelityMonitor's rounds on a network across machines: the configured delays
    from the driver, the echoes from each pair's source machine."""

    def __init__(self, cwan: ClusterWan, log_path: Path, **options: Any) -> None:
        super().__init__(
            [h.netns for h in cwan.hosts], [h.ip for h in cwan.hosts], "", log_path, **options
        )
        self._cwan = cwan

    def _loop(self) -> None:
        try:
            while True:
                self._round(None)
                if self._stop.wait(self.interval_s):
                    break
        except Exception as exc:  # a machine gone (teardown)
            if not self._stop.is_set():
                self._error = f"sampling stopped: {type(exc).__name__}: {exc}"
                self._log.write("fidelity.error", error=self._error)

    def _measure(
        self, engine: Any, pairs: list[tuple[int, int]]
    ) -> tuple[list[float], list[list[float]], int, int, dict[str, Any] | None]:
        one_way = self._cwan.one_way_s
        expected = [(one_way[a, b] + one_way[b, a]) * 1e3 for a, b in pairs]
        rtts = self._cwan.rtts_ms(pairs, samples=self.samples, rate_per_s=self.rate_per_s)
        measured = [[r / 1e3 for r in rtts[pair]] for pair in pairs]
        sent = self.samples * len(pairs)
        return expected, measured, sent, sent - sum(len(m) for m in measured), None


def _mac(me: int, peer: int) -> str:
    return f"02:03:00:00:{me:02x}:{peer:02x}"


class _FanOut:
    """The delay engines of every machine as one (what Wan's control methods call)."""

    def __init__(self, cwan: ClusterWan) -> None:
        self.cwan = cwan

    def _all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:

        return self.cwan._get([a.engine.remote(method, *args, **kwargs) for a in self.cwan.agents])

    def __getattr__(self, method: str) -> Any:
        if method in ("partition", "heal", "host_down", "host_up", "set_loss", "set_jitter",
                      "set_reorder", "set_duplicate", "set_bandwidth", "set_calibration"):  # fmt: skip
            return lambda *args, **kwargs: self._all(method, *args, **kwargs)[0]
        raise AttributeError(method)

    def load_matrix(self, path: Path, *, clamp: bool = False) -> dict[str, Any]:
        one_way = read_delay_file(path, len(self.cwan.hosts))
        return self.cwan.load_compensated(one_way, clamp=clamp)

    def set_delay(self, one_way_s: float, src: Any, dst: Any, *, clamp: bool = False) -> dict:
        n = len(self.cwan.hosts)
        matrix = self.cwan.one_way_s.copy()
        rows = range(n) if src is None else src
        cols = range(n) if dst is None else dst
        matrix[np.ix_(list(rows), list(cols))] = one_way_s
        self.cwan.load_compensated(matrix, clamp=clamp)
        return {"pairs": len(rows) * len(cols)}

    def scale(self, factor: float, *, clamp: bool = False) -> dict:
        return {"clamped": self.cwan.load_compensated(self.cwan.one_way_s * factor, clamp=clamp)}

    def describe(self) -> dict[str, Any]:
        return {"one_way_s": self.cwan.one_way_s.tolist()}

    def stats(self) -> dict[str, Any]:
        return {"machines": self._all("stats")}

    def counters(self, *, reset: bool = False) -> dict[str, Any]:
        """Every machine's pairs: each engine counts only what its own hosts send."""
        parts = self._all("counters", reset=reset)
        return {"pairs": [row for part in parts for row in part["pairs"]]}


def open_cluster_wan(
    topology: Topology,
    *,
    address: str,
    name: str = "cluster-wan",
    run_dir: str | Path | None = None,
    seed: int = 1,
    clamp: bool = False,
) -> ClusterWan:
    """Bring up `topology`'s hosts across the machines of the Ray cluster at `address`.

    Raises:
        EmulationError, FloorError: a machine failed, or a pair asks for less than
            the latency between its machines (nothing is left on any machine).
    """
    folder = new_run_dir(name, run_dir)
    session = contextlib.ExitStack()
    cwan = None
    try:
        ray = session.enter_context(ray_session(address))
        cwan = ClusterWan(topology, folder, ray, session)
        cwan.start(seed=seed, clamp=clamp)
    except BaseException:
        with contextlib.suppress(CleanupError):
            if cwan is not None:
                cwan.close()
        session.close()
        raise
    return cwan


class ClusterWan(Wan):
    """A Wan whose hosts are spread over the machines of a Ray cluster."""

    def __init__(
        self, topology: Topology, run_dir: Path, ray: Any, session: contextlib.ExitStack
    ) -> None:
        run_id = new_run_id()[:6]
        network = plan_network(topology.n, run_id)
        self.ray = ray
        self._session = session  # the connection to Ray, closed with the network
        nodes = sorted(
            (n for n in ray.nodes() if n.get("Alive")), key=lambda n: n["NodeManagerAddress"]
        )
        if not nodes:
            raise EmulationError("the Ray cluster has no live machine")
        shares = [max(1.0, n["Resources"].get("CPU", 1.0)) for n in nodes]
        self.placement = place_hosts(np.asarray(topology.rtt_ms), shares)
        self.sites = [network.site(f"{run_id}{k:x}", idx) for k, idx in enumerate(self.placement)]
        site_of = {h: k for k, idx in enumerate(self.placement) for h in idx}
        hosts = tuple(sorted((h for site in self.sites for h in site.hosts), key=lambda h: h.index))
        whole = NetworkPlan(network.run_id, network.subnet, network.ip_base, network.core_ip,
                            network.core_netns, hosts)  # fmt: skip
        empty = NetworkPlan(run_id, network.subnet, network.ip_base, network.core_ip, "", ())
        super().__init__(topology, empty, run_dir, scale=1.0, network=whole)
        (run_dir / "engine").mkdir(exist_ok=True)  # matrices written by the control verbs
        self.whole = whole
        self.site_of = site_of
        self.nodes = nodes
        self.one_way_s = topology.one_way_ms() / 1e3
        self.link_ms = np.zeros((len(nodes), len(nodes)))
        self.agents: list[Any] = []
        self.machines: list[dict[str, Any]] = []

    def start(self, *, seed: int, clamp: bool) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        t0 = time.monotonic()
        # Threads: a control request to a peer still starting waits, and must not hold
        # up the machine's other calls (polls, probes, the engine's verbs).
        actor = self.ray.remote(num_cpus=0, max_restarts=0, max_concurrency=16)(SiteAgent)
        for k, node in enumerate(self.nodes):
            strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            self.agents.append(
                actor.options(scheduling_strategy=strategy).remote(f"machine {k + 1}")
            )
        ups = [
            agent.up.remote(
                self.topology, self.whole, site, seed=seed, clamp=True, where=os.getcwd()
            )
            for agent, site in zip(self.agents, self.sites, strict=True)
        ]
        self.machines = self._get(ups)
        for k, agent in enumerate(self.agents):
            peers = [
                {
                    "site": j,
                    "address": self.machines[j]["address"],
                    "local": self.machines[k]["address"],
                    "ips": [h.ip for h in self.sites[j].hosts],
                }
                for j in range(len(self.agents))
                if j != k
            ]
            self._get([agent.tunnels.remote(k, peers, int(self.plan.run_id, 16))])
        for k, agent in enumerate(self.agents):
            for j in range(len(self.agents)):
                if j != k:
                    self.link_ms[k, j] = self._get([agent.link_latency.remote(j)])[0]
        floors = [m["calibration"]["floor_rtt_ms"] for m in self.machines if m["calibration"]]
        self.calibration = None
        self.floor_rtt_ms = max(floors) if floors else 0.0
        self.load_compensated(self.one_way_s, clamp=clamp)
        self.engine = _FanOut(self)  # type: ignore[assignment]
        self.programs = RemotePrograms(self, self.run_dir, self._log)
        self.files = Files(self, self.run_dir, self._log)
        self.up_s = time.monotonic() - t0
        self._log.write(
            "bringup.cluster",
            machines=[m["address"] for m in self.machines],
            hosts=[len(p) for p in self.placement],
            link_ms=self.link_ms.round(4).tolist(),
            up_s=round(self.up_s, 3),
        )
        self._write_description()  # topology/ and emulation.json, as a local run has
        description = json.loads((self.run_dir / "emulation.json").read_text())
        description["machines"] = [
            {
                "machine": k + 1,
                "address": m["address"],
                "hosts": [self.hosts[h].name for h in self.placement[k]],
                "core": site.core_netns,
                "calibration": m["calibration"],
            }
            for k, (m, site) in enumerate(zip(self.machines, self.sites, strict=True))
        ]
        description["machine_latency_ms"] = self.link_ms.round(4).tolist()
        write_json(self.run_dir / "emulation.json", description)

    def _get(self, refs: list[Any]) -> list[Any]:
        return ray_get(self.ray, refs)

    def load_compensated(self, one_way_s: np.ndarray, *, clamp: bool) -> int:
        """Give each machine's engine `one_way_s` less the latency between machines;
        refuse (or with clamp, raise to it) pairs that ask for less. Returns the
        number of pairs clamped."""
        n = len(self.hosts)
        site = np.array([self.site_of[k] for k in range(n)])
        link = self.link_ms[site[:, None], site[None, :]] / 1e3  # per pair, 0 within a machine
        floor = self.floor_rtt_ms / 2e3
        need = link + floor
        below = [
            (i, j) for i, j in zip(*np.nonzero(one_way_s < need - 1e-12), strict=True) if i != j
        ]
        if below and not clamp:
            pairs = [(self.hosts[i].name, self.hosts[j].name, 2e3 * float(one_way_s[i, j]))
                     for i, j in below[:20]]  # fmt: skip
            raise FloorError(pairs, 2e3 * float(need.max()))
        matrix = np.maximum(one_way_s, need)
        np.fill_diagonal(matrix, 0.0)
        self._get([a.load_one_way_s.remote(matrix - link, True) for a in self.agents])
        self.one_way_s = matrix
        return len(below)

    def rtts_ms(
        self, pairs: Sequence[tuple[int, int]], *, samples: int = 10, rate_per_s: float = 500.0
    ) -> dict[tuple[int, int], list[float]]:
        """RTTs (ms) of host-index pairs, each measured from its source's machine."""
        by_site: dict[int, list[tuple[int, int]]] = {}
        for s, d in pairs:
            by_site.setdefault(self.site_of[s], []).append((s, d))
        out = {}
        # One machine at a time: two probers on machines that share cores (as the
        # suite's do) would measure each other's noise.
        for k, site_pairs in sorted(by_site.items()):
            (rtts,) = self._get([self.agents[k].probe.remote(site_pairs, samples, rate_per_s, 1)])
            for pair, values in zip(site_pairs, rtts, strict=True):
                out[pair] = [r * 1e3 for r in values]
        return out

    def configured_one_way_ms(self) -> np.ndarray:
        return self.one_way_s * 1e3

    def call(self, host: int, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """fn(agent, *args, **kwargs) on the machine of host `host` (SiteAgent.call)."""
        return self._get([self.agents[self.site_of[host]].call.remote(fn, *args, **kwargs)])[0]

    def call_all(self, fn: Any, *args: Any, **kwargs: Any) -> list[Any]:
        """fn(agent, *args, **kwargs) on every machine at once; the answers in machine order."""
        return self._get([a.call.remote(fn, *args, **kwargs) for a in self.agents])

    def on_machines(self, fn: Any, args: dict[int, tuple[Any, ...]]) -> dict[int, Any]:
        """fn(agent, *args[k]) on each machine k of `args` at once; the answers by machine."""
        machines = sorted(args)
        refs = [self.agents[k].call.remote(fn, *args[k]) for k in machines]
        return dict(zip(machines, self._get(refs), strict=True))

    @property
    def engine_pid(self) -> int | None:
        return None  # one engine per machine: their figures come from the machines

    def monitor_fidelity(self, **options: Any) -> FidelityMonitor:
        """The WAN's delivered RTT sampled in the background, each pair from its source's
        machine (FidelityMonitor's options)."""
        self._check_open()
        monitor = _ClusterFidelity(self, self.run_dir / "fidelity.jsonl", **options)
        monitor.start()
        return monitor

    # -- programs (testbed/net/_remote.py) ---------------------------------------------------------

    def machine_dir(self, machine: int) -> Path:
        """Where machine `machine` (0-based)'s folder is copied: <run>/machines/m<k>/."""
        return self.run_dir / "machines" / f"m{machine + 1}"

    def _host_folder(self, host: EmuHost) -> Path:
        return self.machine_dir(self.site_of[host.index]) / "hosts" / host.name

    def substitutions(self, host: EmuHost) -> dict[str, str]:
        """Wan's, with {run} the folder of the host's machine (gather_files)."""
        return {
            **super().substitutions(host),
            "run": self.machines[self.site_of[host.index]]["files"],
        }

    def run(
        self, host: str | EmuHost, argv: Sequence[str], *, timeout_s: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        self._check_open()
        index = self.host(host).index
        return self.call(index, on_run, index, list(argv), timeout_s)  # type: ignore[no-any-return]

    def _shape_access(self, hosts: list[int], link: AccessLink) -> None:
        """Each host's access link shaped by its machine."""
        by_machine: dict[int, list[str]] = {}
        for k in hosts:
            by_machine.setdefault(self.site_of[k], []).append(self.hosts[k].name)
        fields = dataclasses.asdict(link)
        self.on_machines(on_set_access, {m: (names, fields) for m, names in by_machine.items()})

    def spoofed(self) -> int:
        """Wan.spoofed, over every machine's core."""
        self._check_open()
        return sum(self.call_all(on_spoofed))

    def gather_files(self, *, spread: bool = False) -> int:
        """Copy what the programs wrote under {run} on the machines into the run folder
        (same relative paths); with spread, every machine's to the others too."""
        self._check_open()
        return self.files.gather(spread=spread)

    def close(self) -> None:
        if self._closed:
            return
        t0 = time.monotonic()
        problems = []
        if self.agents and isinstance(self.programs, RemotePrograms):  # up: the programs first
            try:
                problems += self.programs.stop_all(grace_s=1.0)
                self.gather_files()
            except Exception as exc:  # whatever one machine says, the others are closed
                problems.append(f"programs: {type(exc).__name__}: {exc}")
        self._closed = True
        for k, agent in enumerate(self.agents):
            try:
                packed = self.ray.get(agent.close.remote())
                if packed:
                    unpack_folder(packed, self.machine_dir(k))
                problem = self.machine_dir(k) / "teardown-problems.txt"
                if problem.exists():
                    problems.append(f"machine {k + 1}: {problem.read_text()}")
            except Exception as exc:  # whatever one machine says, the others are closed
                problems.append(f"machine {k + 1}: {type(exc).__name__}: {exc}")
            with contextlib.suppress(Exception):
                self.ray.kill(agent)
        self.down_s = time.monotonic() - t0
        self.teardown = {"down_s": round(self.down_s, 3), "machines": len(self.agents)}
        self._log.write("teardown.done", **self.teardown, problems=problems)
        self._log.close()
        self._record.remove()
        self._session.close()
        if problems:
            raise CleanupError(
                "teardown incomplete: " + "; ".join(problems) + "; run `testbed clean`"
            )
