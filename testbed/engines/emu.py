# The emulator behind the experiment runner's engine verbs: every peer is a
# real `python -m node` process on its emulated host, talking UDP across the
# WAN core; the runner drives it through the peer's control socket.
#
#   start(host, point)  remembers the point (the process starts on join)
#   join(host, boots)   starts the process with --join (no waiting on it)
#   leave(host)         asks the peer to leave; it exits once it has
#   crash(host)         SIGKILL, no goodbye
#   advance(t)          sleeps in real time (the engine clock is wall time
#                       since the engine started), reaping exited peers
#   dumps(), members()  ask every live peer over its control socket
#
# Peers' event logs go to <run>/peers/<host>.jsonl, their stdout/stderr to
# <run>/wan/hosts/<host>/. The summary has the peers' private memory, their
# message rate, the time from a crash to its takeover and the RTT the WAN
# delivered while they ran (wan.fidelity; every check has its own share).

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from node.config import config_to_dict
from node.control import ControlError, request, request_when_up
from node.peer import NodeConfig
from node.wire import JobInfo
from testbed.analysis.stats import quantiles
from testbed.engines.peers import datagram_totals, messages_by_kind, peer_seed
from testbed.engines.procstats import cpu_seconds, private_memory_kb, resident_kb, session_nice
from testbed.engines.remote import RemotePeer, RemotePeers
from testbed.engines.zygote import ForkedProcess, PeerZygote
from testbed.errors import EmulationError
from testbed.net import HostProcess, WanVerbs, open_cluster_wan, open_wan
from testbed.runs import write_json
from testbed.spec import ExperimentSpec
from testbed.topology import Topology

if TYPE_CHECKING:
    pass

__all__ = ["NODE_COMMAND", "EmuEngine", "peer_args", "private_memory_kb"]

START_TIMEOUT_S = 20.0  # a peer process must answer on its control socket within this


# The command that runs one peer as its own process (see peer_args; peers = "exec").
NODE_COMMAND = (sys.executable, "-m", "node")
# The runner's own session runs above the peers (0) and a flooding host (-10): it is the
# experiment's clock, and a check that waits for the CPU behind 64 busy peers delays
# every event after it (a flood run's crashes came 68 s late at the same priority).
RUNNER_NICE = -15


def peer_args(
    name: str,
    bind: str,
    config: Path,
    point: tuple[float, ...],
    seed: int,
    log: Path,
    control: str,
    *,
    join: list[str] | None = None,
) -> list[str]:
    """The arguments of `python -m node` for one peer; join=None: it does not join (a
    prober only), [] founds an overlay."""
    argv = [
        "--name", name,
        "--bind", bind,
        "--config", str(config.resolve()),
        "--point", ",".join(repr(x) for x in point),
        "--seed", str(seed),
        "--log", str(log.resolve()),
        "--control", control,
    ]  # fmt: skip
    if join is not None:
        argv += ["--join", ",".join(join)]
    return argv


class EmuEngine(WanVerbs):
    """Runs an experiment's peers as processes on an emulated WAN (see the module comment)."""

    def __init__(
        self, spec: ExperimentSpec, topology: Topology, config: NodeConfig, run_dir: Path
    ) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.flood_port = spec.node.port  # a `flood` goes to the peers unless it names a port
        self.wan: Any
        if spec.cluster is None:
            self.wan = open_wan(
                topology, clamp=spec.topology.clamp, run_dir=run_dir / "wan", seed=spec.seed
            )
        else:  # the hosts spread over the machines of a Ray cluster
            self.wan = open_cluster_wan(
                topology,
                address=spec.cluster,
                clamp=spec.topology.clamp,
                run_dir=run_dir / "wan",
                seed=spec.seed,
            )
        try:
            self._config_path = run_dir / "node.json"
            write_json(self._config_path, config_to_dict(config))
            (run_dir / "peers").mkdir(exist_ok=True)
            # Peers of other machines, started and asked by those machines' agents.
            self._remote = (
                None
                if spec.cluster is None
                else RemotePeers(
                    self.wan, self._config_path, spec.peers == "fork", list(NODE_COMMAND)
                )
            )
            self._sockets = self.wan.sockets_dir
            self._points: dict[int, tuple[float, ...]] = {}
            self._procs: dict[int, HostProcess | ForkedProcess | RemotePeer] = {}
            # The zygote starts before the run's clock: its imports take seconds on a loaded
            # machine (18 s under two test suites), which the first join paid late before.
            self._zygote: PeerZygote | None = (
                PeerZygote(self.wan, run_dir / "zygote")
                if spec.peers == "fork" and self._remote is None
                else None
            )
            # (CPU s, when) by pid, or on other machines by (host, incarnation) and ("engine", k)
            self._cpu_seen: dict[Any, tuple[float, float]] = {}
            self._engine_cpu = (0.0, time.monotonic())  # the delay engine's, likewise
            self._incarnation: dict[int, int] = {}
            self._crashes: list[tuple[int, float]] = []  # (host, wall time): ids from the logs
            self._frozen: set[int] = set()  # SIGSTOPped: asked nothing until thawed
            self._leaving: set[int] = set()  # asked to leave, process still running
            self._offers: dict[
                int, dict[str, Any]
            ] = {}  # control requests not yet sent: op -> fields
            self._offering: set[int] = set()  # hosts with a sender at work
            self._offer_lock = threading.Lock()
            self._pool = ThreadPoolExecutor(8)
            self._tails: dict[int, int] = {}  # host -> bytes of its log read for job records
            self._t0 = time.monotonic()
            self._wall0 = time.time()  # the same instant on the clock peers' records carry
            # The RTT the WAN delivers while the peers run: per check and for the run.
            self._fidelity = self.wan.monitor_fidelity(seed=spec.seed)
            self._nice_before = session_nice(RUNNER_NICE)  # restored by close()
        except BaseException:
            self.wan.close()
            raise

    @property
    def now(self) -> float:
        return time.monotonic() - self._t0

    def _control(self, host: int) -> str:
        return str(self._sockets / f"{self._name(host)}.ctl")

    def _address(self, host: int) -> list[Any]:
        return [self.wan.hosts[host].ip, self.spec.node.port]

    # -- verbs ---------------------------------------------------------------------------------------

    def start(self, host: int, point: tuple[float, ...]) -> None:
        self._stop(host)
        self._points[host] = point

    def join(self, host: int, bootstraps: list[int]) -> None:
        name = self._name(host)
        self._incarnation[host] = self._incarnation.get(host, 0) + 1
        args = peer_args(
            name,
            f"{self.wan.hosts[host].ip}:{self.spec.node.port}",
            self._config_path,
            self._points[host],
            peer_seed(self.spec.seed, host, self._incarnation[host]),
            self.run_dir / "peers" / f"{name}.jsonl",
            self._control(host),
            join=[f"{ip}:{port}" for ip, port in (self._address(b) for b in bootstraps)],
        )
        emu_host = self.wan.hosts[host]
        if self._remote is not None:
            self._procs[host] = self._remote.spawn(host, args)
        elif self._zygote is not None:  # peers = "fork"
            self._procs[host] = self._zygote.spawn(emu_host, args, label="node")
        else:
            argv = [*NODE_COMMAND, *args]
            self._procs[host] = self.wan.popen(emu_host, argv, label="node")

    def leave(self, host: int) -> None:
        if host in self._procs:
            self._ask(host, "leave")
            self._leaving.add(host)

    def address_of(self, host: int) -> tuple[str, int]:
        return (self.wan.hosts[host].ip, self.spec.node.port)

    def set_cluster_candidates(self, host: int, candidates: list[int]) -> None:
        """Offer candidates in the background (a joiner's process may still be
        starting, and the schedule must not wait); the latest offer to a host wins."""
        self._background(host, "cluster", candidates=[self._address(c) for c in candidates])

    def set_sched_cluster(self, host: int, members: list[int]) -> None:
        """The peer's cluster for jobs, in the background like an offer."""
        self._background(host, "sched", members=[self._address(m) for m in members])

    def _background(self, host: int, op: str, **fields: Any) -> None:
        if host not in self._procs or host in self._frozen:
            return
        with self._offer_lock:
            self._offers.setdefault(host, {})[op] = fields
            if host in self._offering:
                return  # its sender will take this one next
            self._offering.add(host)
        self._pool.submit(self._send_offers, host)

    def _send_offers(self, host: int) -> None:
        while True:
            with self._offer_lock:
                pending = self._offers.get(host)
                if not pending:
                    self._offers.pop(host, None)
                    self._offering.discard(host)
                    return
                op = next(iter(pending))
                fields = pending.pop(op)
            with contextlib.suppress(ControlError):  # it exited meanwhile
                self._ask(host, op, **fields)

    # -- jobs (testbed/experiments/overlay_jobs.py) ------------------------------------------------------------------------

    def submit(self, host: int, job: JobInfo) -> bool:
        """Submit a job at the peer on `host`; False if it is not there to take it."""
        if host not in self._procs or host in self._frozen or host in self._leaving:
            return False
        fields = {
            "id": job.id,
            "size": job.size,
            "runtime_s": job.runtime_s,
            "order": job.order,
            "point": list(job.point),
        }
        try:  # no waiting for a peer still starting: the client tries another one
            self._request(host, "submit", timeout_s=5.0, job=fields)
        except ControlError:
            return False
        return True

    def job_records(self) -> list[dict[str, Any]]:
        """The job records the peers wrote since the last call, with the run's
        clock in "t" (a peer's own "t" counts from its start) and "host" as an index."""
        out: list[dict[str, Any]] = []
        self._sync_logs()
        for host in range(len(self.wan.hosts)):
            path = self.run_dir / "peers" / f"{self._name(host)}.jsonl"
            start = self._tails.get(host, 0)
            try:
                with path.open("rb") as log:
                    log.seek(start)
                    data = log.read()
            except FileNotFoundError:
                continue
            complete = data.rfind(b"\n") + 1  # a line being written is read next time
            self._tails[host] = start + complete
            for line in data[:complete].splitlines():
                if b'"kind":"job_' not in line:
                    continue
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    record["t"] = round(record["wall"] - self._wall0, 6)
                    record["host"] = host
                    out.append(record)
        return out

    def live(self) -> dict[int, int]:
        """Running peers: host -> incarnation."""
        return {host: self._incarnation[host] for host in self._procs}

    def departing(self) -> list[int]:
        """Peers asked to leave whose process has not exited yet."""
        self._reap()
        return sorted(self._leaving)

    def crash(self, host: int) -> None:
        proc = self._procs.pop(host, None)
        self._leaving.discard(host)
        if proc is None:
            return
        # No control round trip first (a burst of crashes must be quick, and a
        # frozen peer cannot answer): the peer's id comes from its log afterwards.
        _signal_group(proc, signal.SIGKILL)
        self._crashes.append((host, time.time()))
        self._frozen.discard(host)
        proc.wait()

    def freeze(self, host: int) -> None:
        """SIGSTOP the peer's process group (its socket buffers what arrives)."""
        proc = self._procs.get(host)
        if proc is not None:
            _signal_group(proc, signal.SIGSTOP)
            self._frozen.add(host)

    def thaw(self, host: int) -> None:
        proc = self._procs.get(host)
        self._frozen.discard(host)
        if proc is not None:
            _signal_group(proc, signal.SIGCONT)

    # The network (the churn language's faults): WanVerbs' set_matrix, partition, heal, set_loss.

    def advance(self, until: float) -> None:
        while (left := until - self.now) > 0:
            time.sleep(min(left, 0.5))
            self._reap()

    def resources(self) -> dict[str, Any]:
        """What the peers and the delay engine use, for each check: the peers' CPU (% of
        one core since the last check, or since they started) and private memory, p50,
        p99 and max; the delay engine's CPU and resident memory."""
        if self._remote is not None:
            return self._remote_resources()
        now = time.monotonic()
        cpu: list[float] = []
        memory: list[int] = []
        seen: dict[int, tuple[float, float]] = {}
        for proc in list(self._procs.values()):
            used = cpu_seconds(proc.pid)
            private = private_memory_kb(proc.pid)
            if used is None or private is None:
                continue  # it has just ended
            before, since = self._cpu_seen.get(proc.pid, (0.0, proc.started))
            if now > since:
                cpu.append(100.0 * (used - before) / (now - since))
            memory.append(private)
            seen[proc.pid] = (used, now)
        self._cpu_seen = seen
        out: dict[str, Any] = {
            "peers": len(memory),
            "peer_cpu_pct": quantiles(cpu, digits=2),
            "peer_private_memory_kb": quantiles(memory, digits=0),
            "wan_fidelity": self._fidelity.take(),
        }
        pid = self.wan.engine_pid
        used = None if pid is None else cpu_seconds(pid)
        if pid is not None and used is not None:
            before, since = self._engine_cpu
            out["delay_engine"] = {
                "cpu_pct": round(100.0 * (used - before) / max(now - since, 1e-9), 1),
                "resident_kb": resident_kb(pid),
            }
            self._engine_cpu = (used, now)
        return out

    def _remote_resources(self) -> dict[str, Any]:
        """resources() for peers on other machines: each machine's figures, its peers'
        CPU since the last check (keyed by host and incarnation) and its engine's."""
        assert self._remote is not None
        cpu: list[float] = []
        memory: list[int] = []
        seen: dict[Any, tuple[float, float]] = {}  # by (host, incarnation) and ("engine", k)
        engines = []
        for k, machine in enumerate(self._remote.figures()):
            now = machine["now"]  # that machine's monotonic clock
            for host, (used, private, started) in machine["peers"].items():
                if used is None or private is None:
                    continue
                key = (host, self._incarnation.get(host))
                before, since = self._cpu_seen.get(key, (0.0, started))
                if now > since:
                    cpu.append(100.0 * (used - before) / (now - since))
                memory.append(private)
                seen[key] = (used, now)
            if machine["engine"] is not None:
                used, resident = machine["engine"]
                before, since = self._cpu_seen.get(("engine", k), (used, now))
                engines.append(
                    {
                        "machine": k + 1,
                        "cpu_pct": round(100.0 * (used - before) / max(now - since, 1e-9), 1),
                        "resident_kb": resident,
                    }
                )
                seen[("engine", k)] = (used, now)
        self._cpu_seen = seen
        return {
            "peers": len(memory),
            "peer_cpu_pct": quantiles(cpu, digits=2),
            "peer_private_memory_kb": quantiles(memory, digits=0),
            "wan_fidelity": self._fidelity.take(),
            "delay_engines": engines,
        }

    def members(self) -> list[int]:
        statuses = self._ask_all("status")
        return sorted(
            h for h, answer in statuses.items() if answer and answer["status"] == "member"
        )

    def peer_counters(self) -> dict[int, dict[str, int]]:
        """Every running peer's datagram counters (Peer.stats()), by host: asked now."""
        answers = self._ask_all("stats")
        return {host: a["stats"] for host, a in answers.items() if a}

    def sched_counts(self) -> Counter[str]:
        """The running peers' scheduler counters, summed (their dumps: asked now)."""
        total: Counter[str] = Counter()
        for dump in self.dumps():
            total.update(dump.get("sched", {}).get("counts", {}))
        return total

    def dumps(self) -> list[dict[str, Any]]:
        answers = self._ask_all("dump")
        return [answers[h]["dump"] for h in sorted(answers) if answers[h]]

    def unfinished(self) -> dict[str, Any]:
        """An interrupted run's figures: the WAN's fidelity until now (asks no peer)."""
        return {"wan": {"fidelity": self._fidelity.close()}}

    def finish(self) -> dict[str, Any]:
        if self._remote is not None:
            memory = [
                m[1]
                for machine in self._remote.figures()
                for m in machine["peers"].values()
                if m[1]
            ]
        else:
            memory = [m for m in (private_memory_kb(p.pid) for p in self._procs.values()) if m]
        asked_at = time.time()
        stats = [a["stats"] for a in self._ask_all("stats").values() if a]
        stats += self._exited_stats(before=asked_at)
        fidelity = self._fidelity.close()
        floods = self.flood_reports()
        self.close()
        return {
            "wan": {"fidelity": fidelity},
            "floods": floods,
            "emu": {
                "peers_at_end": len(stats),
                "peer_private_memory_kb": quantiles(memory),
                "messages_per_peer_minute": self._message_rate(stats),
                "peer_datagrams": datagram_totals(stats),  # the peers running or exited at the end
                "by_kind": messages_by_kind(stats, sum(s["uptime_s"] for s in stats) / 60),
                "wan": self.wan.teardown,
            },
            "repair_s": self._repair_times(),
            "leaves": self._leaves(),
            "merges": self._merges(),
        }

    def close(self) -> None:
        """Stop every peer (asked to exit, then signalled) and tear the WAN down. Idempotent."""
        self._fidelity.close()
        for host in list(self._frozen):
            self.thaw(host)  # so that it can exit
        try:
            list(self._pool.map(lambda h: self._exit(h), list(self._procs)))
            for host in list(self._procs):
                self._stop(host)
        finally:
            self._pool.shutdown()
            if self._zygote is not None:
                self._zygote.close()
            if self._remote is not None:  # the last of their logs, before the machines go
                with contextlib.suppress(Exception):
                    self._sync_logs()
                self._remote.closed = True
            self.wan.close()
            if self._nice_before is not None:
                session_nice(self._nice_before)
                self._nice_before = None

    def _exit(self, host: int) -> None:
        with contextlib.suppress(ControlError):
            self._request(host, "exit", timeout_s=2.0)

    # -- helpers ---------------------------------------------------------------------------------------

    def _ask(self, host: int, op: str, **fields: Any) -> dict[str, Any]:
        """A control request; waits for a peer that is still starting."""
        if self._remote is not None:
            return self._remote.ask(host, op, wait_s=START_TIMEOUT_S, **fields)
        proc = self._procs.get(host)
        running = lambda: proc is not None and proc.poll() is None  # noqa: E731
        return request_when_up(
            self._control(host), op, running=running, wait_s=START_TIMEOUT_S, **fields
        )

    def _request(self, host: int, op: str, *, timeout_s: float, **fields: Any) -> dict[str, Any]:
        """A control request that does not wait for a peer still starting."""
        if self._remote is not None:
            return self._remote.ask(host, op, timeout_s=timeout_s, **fields)
        return request(self._control(host), op, timeout_s=timeout_s, **fields)

    def _sync_logs(self) -> None:
        """Peers of other machines: bring their logs' news into <run>/peers/."""
        if self._remote is not None:
            self._remote.sync_logs(self.run_dir / "peers")

    def _ask_all(self, op: str) -> dict[int, dict[str, Any] | None]:
        hosts = sorted(h for h in self._procs if h not in self._frozen)

        def one(host: int) -> dict[str, Any] | None:
            try:
                return self._ask(host, op)
            except ControlError:
                return None  # it exited meanwhile (left), or died: not a live peer

        return dict(zip(hosts, self._pool.map(one, hosts), strict=True))

    def _reap(self) -> None:
        for host, proc in list(self._procs.items()):
            code = proc.poll()
            if code is not None:
                del self._procs[host]
                self._leaving.discard(host)
                if code != 0:
                    raise EmulationError(
                        f"peer {self._name(host)} exited with status {code}; see {proc.stderr_path}"
                    )

    def _stop(self, host: int) -> None:
        proc = self._procs.pop(host, None)
        self._leaving.discard(host)
        if proc is not None:
            proc.terminate(grace_s=5.0)

    def _exited_stats(self, *, before: float) -> list[dict[str, Any]]:
        """The final counters of the peers that exited (left) before `before` (wall
        clock): the ones still running then were asked, and write theirs again as
        they exit at the end."""
        self._sync_logs()
        out = []
        for path in sorted((self.run_dir / "peers").glob("*.jsonl")):
            for line in path.read_text().splitlines():
                if '"kind":"exit"' in line:
                    record = json.loads(line)
                    if record["wall"] < before:
                        out.append(record["stats"])
        return out

    def _message_rate(self, stats: list[dict[str, Any]]) -> float | None:
        minutes = sum(s["uptime_s"] for s in stats) / 60
        return round(sum(s["tx"] for s in stats) / minutes, 2) if minutes > 0 else None

    def hosts_of(self, ids: set[int]) -> dict[int, int]:
        """The hosts that had these overlay ids (from the peers' logs)."""
        found: dict[int, int] = {}
        self._sync_logs()
        for host in range(len(self.wan.hosts)):
            path = self.run_dir / "peers" / f"{self._name(host)}.jsonl"
            if not ids - found.keys() or not path.exists():
                continue
            for line in path.read_text().splitlines():
                if '"kind":"joined"' in line and (ident := json.loads(line)["id"]) in ids:
                    found[ident] = host
        return found

    def _crashed_id(self, host: int, wall: float) -> tuple[int | None, float]:
        """The id a crashed peer had: its log's last `joined` before the crash (None: not a member)."""
        path = self.run_dir / "peers" / f"{self._name(host)}.jsonl"
        found = None
        if path.exists():
            for line in path.read_text().splitlines():
                if '"kind":"joined"' in line:
                    record = json.loads(line)
                    if record["wall"] <= wall:
                        found = record["id"]
        return found, wall

    def _leaves(self) -> dict[str, int]:
        """Leaves that ended in a MERGE (graceful) or after `leave_attempts` (abrupt)."""
        out = {"graceful": 0, "abrupt": 0}
        for path in sorted((self.run_dir / "peers").glob("*.jsonl")):
            for line in path.read_text().splitlines():
                if '"kind":"left"' in line:
                    out["graceful" if json.loads(line)["graceful"] else "abrupt"] += 1
        return out

    def _merges(self) -> list[list[float | None]]:
        """[when a peer's overlay dissolved into another, when it had rejoined] (run time)."""
        out: list[list[float | None]] = []
        for path in sorted((self.run_dir / "peers").glob("*.jsonl")):
            open_merge: list[float | None] | None = None
            for line in path.read_text().splitlines():
                if '"kind":"merging"' in line:
                    open_merge = [round(json.loads(line)["wall"] - self._wall0, 3), None]
                    out.append(open_merge)
                elif open_merge is not None and '"kind":"joined"' in line:
                    open_merge[1] = round(json.loads(line)["wall"] - self._wall0, 3)
                    open_merge = None
        return sorted(out, key=lambda m: m[0] or 0.0)

    def _repair_times(self) -> dict[str, Any]:
        self._sync_logs()
        taken: dict[int, list[float]] = {}
        for path in sorted((self.run_dir / "peers").glob("*.jsonl")):
            for line in path.read_text().splitlines():
                if '"kind":"takeover"' in line:
                    record = json.loads(line)
                    for dead in record["dead"]:
                        taken.setdefault(dead, []).append(record["wall"])
        crashed = [(i, t) for i, t in (self._crashed_id(h, t) for h, t in self._crashes) if i]
        # The first takeover after the crash (one before it, of a frozen peer say, is no repair).
        after = {i: min((w for w in taken.get(i, []) if w >= t), default=None) for i, t in crashed}
        repair = [after[i] - t for i, t in crashed if after[i] is not None]
        return quantiles(repair) | {
            "crashes": len(crashed),
            "unrepaired": sum(1 for i, _ in crashed if after[i] is None),
            "values": [round(r, 3) for r in repair],
        }


def _signal_group(proc: Any, sig: int) -> None:
    """Signal a peer's process group, here or on its machine."""
    if isinstance(proc, RemotePeer):
        proc.signal_group(sig)
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:  # not (or no longer) leading a group: the process itself
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
