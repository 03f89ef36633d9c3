# The emulated WAN: bring-up, use and teardown of hosts on a delaying core.
#
# Theory of operation
#   open_wan() plans the network (names, addresses), records the run in the
#   registry, builds namespaces and links, installs the NFQUEUE rule, starts
#   the delay engine in the core, starts Mininet shells, calibrates the engine
#   (the RTT of the emulated path with no delay added: its floor and the
#   offset to subtract), checks the matrix against the floor, loads it, and
#   returns a Wan. Every step is logged to <run>/testbed.log as it happens.
#   Wan.close() undoes all of it in reverse; it runs on exceptions and Ctrl-C
#   (the Wan is a context manager) and ignores further Ctrl-C while it works.
#   The steps that need none of the Wan's state (the engine's configuration
#   and its wait for readiness, the calibration, reaping an exec'd process)
#   are functions after the class.
#
# Names: host k is "h<k>" everywhere (Mininet CLI, control calls, logs); the
# topology node it emulates (e.g. "n17" of PlanetLab) is EmuHost.node.

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Self

import numpy as np

from testbed.errors import CleanupError, ControlError, EmulationError, FloorError, InputError
from testbed.linkmodel import MAX_ONE_WAY_S
from testbed.net._build import (
    build_network,
    install_mark_rules,
    install_queue_rule,
    spoofed_packets,
)
from testbed.net._clean import RootSnapshot, leftovers, remove_run
from testbed.net._containers import (
    ContainerSpec,
    container_groups,
    remove_containers,
    start_containers,
)
from testbed.net._fidelity import FidelityMonitor
from testbed.net._host import EmuHost
from testbed.net._netns import nsenter_argv
from testbed.net._plan import NetworkPlan, new_run_id, plan_network
from testbed.net._probe import IcmpProber
from testbed.net._programs import ExecResult, HostProcess, Programs, process_report
from testbed.net._registry import RunRecord
from testbed.net._shaping import AccessLink, apply_access
from testbed.net.delay import EngineClient, compiled_datapath, write_delay_file
from testbed.runs import JsonLog, new_run_dir, write_json
from testbed.topology import Topology, load_topology, write_matrix

__all__ = ["Calibration", "EmuHost", "ExecResult", "HostProcess", "Wan", "open_wan"]

ENGINE_READY_TIMEOUT_S = 15.0
CALIBRATION_PROBES = 400
CALIBRATION_ROUNDS = 5
# Slow enough that the engine never queues (on a slow machine 2,000 probes/s
# did, and the queueing was taken for path latency).
CALIBRATION_RATE_PER_S = 1000.0
# The floor is rounded up to this grain, so a run reports a stable figure.
FLOOR_GRAIN_MS = 0.01
FLOOR_PERCENTILE = 90
# The calibration is quiet when its floor (the least p90 of a round) is within
# this factor of the best median of a round, or this close to it (here a quiet
# round has p50 0.1-0.2 ms and p90 at most 1.7 times that; a burst gives 3-40
# times). If the first rounds are not, up to this many more follow, each after
# a pause.
QUIET_RATIO = 3.0
QUIET_SLACK_MS = 0.1
CALIBRATION_EXTRA_ROUNDS = 10
CALIBRATION_PAUSE_S = 0.2


class StartedProcess(Protocol):
    """A process on a host that the WAN stops at teardown (HostProcess, or one a
    peer zygote forked: testbed/engines/zygote.py)."""

    @property
    def pid(self) -> int: ...

    def terminate(self, grace_s: float = 2.0) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Calibration:
    """What the emulated path costs with no delay added (measured at bring-up)."""

    floor_rtt_ms: float  # the smallest RTT the engine delivers reliably (p90 at zero delay)
    rtt0_p50_ms: float
    rtt0_p99_ms: float
    engine_proc_us: float  # median time from kernel arrival to the engine's verdict
    path_offset_us: float  # subtracted from each hold: one-way path latency outside the engine
    samples: int
    rounds: int  # more than CALIBRATION_ROUNDS when bursts made it wait for a quiet round


def _quiet(rounds: Sequence[Sequence[float]]) -> bool:
    """Whether the floor the calibration rounds give (the least p90) is near the
    best median of them (see QUIET_RATIO): a round slowed as a whole (p50 0.5 ms,
    p90 1.4 ms) is no quieter than one with a burst in it."""
    p50 = min(_percentile(r, 50) for r in rounds)
    p90 = min(_percentile(r, FLOOR_PERCENTILE) for r in rounds)
    return p90 <= max(QUIET_RATIO * p50, p50 + QUIET_SLACK_MS * 1e-3)


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM/SIGHUP in the body (main thread only): teardown must finish."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {
        sig: signal.signal(sig, signal.SIG_IGN)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


class Wan:
    """An emulated WAN. Create it with open_wan(); close it (or use `with`).

    Attributes:
        hosts: the emulated hosts, hosts[k] is "h<k+1>".
        topology: the selected and scaled topology it emulates (before clamping).
        run_dir: the run folder.
        calibration: the engine's measured floor and offset (None with one host).
        clamped: how many ordered pairs were raised to the floor.
        net: the Mininet object (for mininet.cli.CLI), or None if shells were not started.
    """

    def __init__(
        self,
        topology: Topology,
        plan: NetworkPlan,
        run_dir: Path,
        *,
        scale: float,
        network: NetworkPlan | None = None,
    ) -> None:
        """`plan` is what this process builds; `network` the whole network when that
        is more (one machine's share of a network across machines: testbed/net/_sites.py)."""
        self.topology = topology
        self.plan = plan
        self.run_dir = run_dir
        self.scale_factor = scale
        self.hosts = tuple(
            EmuHost(
                p.index, p.name, p.ip, p.netns, topology.names[p.index], topology.labels[p.index]
            )
            for p in (network or plan).hosts
        )
        self.local = tuple(self.hosts[p.index] for p in plan.hosts)  # the hosts built here
        self._by_name = {h.name: h for h in self.hosts}
        self._by_name.update({h.node: h for h in self.hosts if h.node not in self._by_name})
        self.calibration: Calibration | None = None
        self.clamped = 0
        self.net: Any = None
        self.engine: EngineClient | None = None
        self._engine_proc: subprocess.Popen[bytes] | None = None
        self._shells: list[Any] = []
        self._processes: list[StartedProcess] = []  # adopted (popen's are in self.programs)
        self._record = RunRecord.for_this_process(plan.run_id, run_dir, plan.netns_names)
        self._log = JsonLog(run_dir / "testbed.log")
        self.programs = Programs(run_dir, self._log, self._record.add_pid)
        self._closed = False
        self.teardown: dict[str, Any] = {}
        self._root_before = RootSnapshot.take()
        # The container hosts, by group (each its image and limits); open_wan sets it.
        self._containers: list[tuple[ContainerSpec, list[str]]] | None = None
        # The delay engine's queues (one data thread each) and, for a benchmark
        # against another commit, the checkout whose engine runs; open_wan sets them.
        self._engine_queues = 1
        self._engine_source: Path | None = None
        # Access links shaped so far ((namespace, device) pairs) and their settings by host.
        self._shaped: set[tuple[str, str]] = set()
        self.access: dict[str, AccessLink] = {}

    # -- bring-up ---------------------------------------------------------------------------------

    def _start(
        self,
        *,
        mininet: bool,
        calibrate: bool,
        clamp: bool,
        realtime: bool,
        seed: int,
        progress: Any,
    ) -> None:
        t0 = time.monotonic()
        self._record.save()
        self._log.write(
            "bringup.start",
            run_id=self.plan.run_id,
            hosts=len(self.hosts),
            topology=self.topology.source,
        )
        attached = self._start_containers(progress) if self._containers is not None else set()
        build_network(self.plan, progress.advance if progress else lambda _k: None, attached)
        self._log.write("bringup.network", elapsed_s=round(time.monotonic() - t0, 3))
        iptables = install_queue_rule(self.plan, queue=0, queues=self._engine_queues)
        install_mark_rules(self.plan)
        self._start_engine(realtime=realtime, seed=seed)
        self._log.write(
            "bringup.engine",
            elapsed_s=round(time.monotonic() - t0, 3),
            iptables=iptables,
            pid=self._engine_proc.pid,
        )
        if mininet:
            from testbed.net._mininet import build_mininet

            if progress:
                progress.phase("mininet")
            self.net, self._shells = build_mininet(self.plan, on_start=self._shell_started)
            self._log.write("bringup.shells", elapsed_s=round(time.monotonic() - t0, 3))
        if calibrate and len(self.local) >= 2:
            if progress:
                progress.phase("calibrating")
            assert self.engine is not None
            self.calibration = _calibrate(self.engine, self.local, self.run_dir)
            self._log.write("bringup.calibration", **_asdict(self.calibration))
        self._load_checked(self.topology, clamp=clamp, initial=True)
        self._apply_links()
        assert self.engine is not None
        self.engine.counters(reset=True)
        self.up_s = time.monotonic() - t0
        self._log.write("bringup.done", up_s=round(self.up_s, 3), clamped=self.clamped)
        self._write_description()

    def _apply_links(self) -> None:
        """The topology spec's [[access]] and [[bandwidth]] settings, on the hosts whose
        node (name or label) they select; one that selects none of this run's hosts
        (a subset of the topology) is logged as such."""
        for link in self.topology.links:

            def chosen(
                selector: str | tuple[str, ...], link: Any = link, among: Any = self.hosts
            ) -> list[str]:
                return [h.name for h in among if link.matches(selector, h.node, h.labels)]

            if link.kind == "access":  # the links of the hosts built here
                hosts = chosen(link.hosts, among=self.local)
                if hosts:
                    self.set_access(
                        hosts,
                        up_mbit=link.up_mbit,
                        down_mbit=link.down_mbit,
                        queue_bytes=link.queue_bytes,
                        queue_packets=link.queue_packets,
                    )
                self._log.write("wan.links", where=link.where, setting="access", hosts=hosts)
            else:
                src, dst = chosen(link.src), chosen(link.dst)
                if src and dst:
                    self.set_bandwidth(
                        link.rate_mbit,
                        src=src,
                        dst=dst,
                        queue_bytes=link.queue_bytes,
                        queue_packets=link.queue_packets,
                    )
                self._log.write(
                    "wan.links", where=link.where, setting="bandwidth", src=src, dst=dst
                )

    def _start_containers(self, progress: Any) -> set[str]:
        """Start the container hosts (each group with its image and limits) and name
        their namespaces as the plan does; returns those names (build_network makes
        the others)."""
        assert self._containers is not None
        if progress:
            progress.phase("containers")
        by_name = {h.name: h for h in self.hosts}
        hosts = list(self.hosts)
        attached = set()
        for spec, names in self._containers:
            started = start_containers(
                self.plan.run_id,
                {name: by_name[name].netns for name in names},
                spec,
                mounts=[str(self.run_dir.resolve())],
            )
            for name, box in started.items():
                host = by_name[name]
                hosts[host.index] = dataclasses.replace(
                    host, container=box.container, container_pid=box.pid, enter=tuple(box.enter)
                )
                attached.add(host.netns)
            self._log.write(
                "bringup.containers",
                image=spec.image,
                hosts=sorted(started, key=lambda n: by_name[n].index),
                cpus=spec.cpus,
                memory_mb=spec.memory_mb,
            )
        self.hosts = tuple(hosts)
        self._by_name.update({h.name: h for h in self.hosts})
        self._by_name.update({h.node: h for h in self.hosts if h.container})
        return attached

    def _shell_started(self, pid: int) -> None:
        """A Mininet shell started (on first use): `testbed clean` must know it."""
        self._record.pids.append(pid)
        self._record.save()

    def _start_engine(self, *, realtime: bool, seed: int) -> None:
        # Absolute: the engine of another checkout runs from there (engine_source).
        engine_dir = self.run_dir.resolve() / "engine"
        engine_dir.mkdir(exist_ok=True)
        # Not in the run folder: a Unix socket path is limited to 107 bytes.
        # Not an abstract socket either: those are per network namespace.
        control = self._record.control_path
        config_path = _write_engine_config(
            engine_dir,
            self.plan,
            len(self.hosts),
            control,
            realtime=realtime,
            seed=seed,
            queues=self._engine_queues,
        )
        ready_r, ready_w = os.pipe()
        argv = [
            *nsenter_argv(self.plan.core_netns),
            sys.executable,
            "-m",
            _engine_module(self._engine_source) or ENGINE_MODULES[0],
            str(config_path),
            "--ready-fd",
            str(ready_w),
        ]
        env = None
        if self._engine_source is not None:
            env = {**os.environ, "PYTHONPATH": str(self._engine_source)}
        with (engine_dir / "engine.stderr").open("ab") as stderr:
            self._engine_proc = subprocess.Popen(
                argv,
                env=env,
                cwd=self._engine_source,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                pass_fds=(ready_w,),
                start_new_session=True,
            )
        os.close(ready_w)
        self._record.add_pid(self._engine_proc.pid)
        _await_engine_ready(ready_r, self._engine_proc, engine_dir)
        (engine_dir / "zero.f64").unlink()  # read at start; 200 MB of zeros at 5,000 hosts
        self.engine = EngineClient(control)

    def _load_checked(self, topology: Topology, *, clamp: bool, initial: bool = False) -> int:
        """Check `topology` against the floor, clamp or refuse, and load it into the engine."""
        assert self.engine is not None
        floor = self.calibration.floor_rtt_ms if self.calibration else 0.0
        below = topology.pairs_below(floor)
        clamped = 0
        if below:
            if not clamp:
                names = topology.names
                pairs = [
                    (
                        f"{self.hosts[i].name}({names[i]})",
                        f"{self.hosts[j].name}({names[j]})",
                        float(topology.rtt_ms[i, j]),
                    )
                    for i, j in below
                ]
                raise FloorError(pairs, floor)
            topology, clamped = topology.clamped(floor)
        path = (
            self.run_dir
            / "engine"
            / ("matrix.f64" if initial else f"matrix-{int(time.time() * 1000)}.f64")
        )
        write_delay_file(path, topology.one_way_ms() / 1e3)
        self.engine.load_matrix(path.resolve(), clamp=clamp)
        if initial:
            self.clamped = clamped
        return clamped

    def _write_description(self) -> None:
        topo_dir = self.run_dir / "topology"
        topo_dir.mkdir(exist_ok=True)
        write_matrix(self.topology, topo_dir / "matrix.txt.gz")
        with (topo_dir / "hosts.csv").open("w") as out:
            out.write("host,ip,netns,node,labels\n")
            for h in self.hosts:
                labels = ";".join(f"{k}={v}" for k, v in h.labels.items())
                out.write(f"{h.name},{h.ip},{h.netns},{h.node},{labels}\n")
        write_json(
            self.run_dir / "emulation.json",
            {
                "run_id": self.plan.run_id,
                "hosts": len(self.hosts),
                "topology": self.topology.source,
                "topology_stats": self.topology.stats(),
                "scale": self.scale_factor,
                "subnet": self.plan.subnet,
                "core": {"netns": self.plan.core_netns, "ip": self.plan.core_ip},
                "calibration": None if self.calibration is None else _asdict(self.calibration),
                "clamped_pairs": self.clamped,
                "clamped_to_rtt_ms": self.calibration.floor_rtt_ms
                if self.calibration and self.clamped
                else None,
                "up_s": round(self.up_s, 3),
            },
        )

    # -- hosts and processes -------------------------------------------------------------------------

    @property
    def engine_pid(self) -> int | None:
        """The delay engine's process (None before bring-up started it)."""
        return None if self._engine_proc is None else self._engine_proc.pid

    @property
    def sockets_dir(self) -> Path:
        """A folder for this run's Unix sockets (peers' control APIs); removed at teardown."""
        folder = self._record.sockets_dir
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # its owner's only
        return folder

    def host(self, name: str | EmuHost) -> EmuHost:
        """The host called `name` ("h3", or the topology node name such as "n17").

        Raises:
            ControlError: no such host.
        """
        if isinstance(name, EmuHost):
            return name
        try:
            return self._by_name[name]
        except (KeyError, TypeError):
            raise ControlError(
                "host", f"unknown host {name!r}; hosts are h1..h{len(self.hosts)}", field="host"
            ) from None

    def _indices(
        self, op: str, names: Iterable[str | EmuHost] | str | EmuHost | None, field_name: str
    ) -> list[int] | None:
        if names is None:
            return None
        if isinstance(names, str | EmuHost):
            names = [names]
        out = []
        for name in names:
            if isinstance(name, str) and "=" in name:  # a label: every host that has it
                key, _, value = name.partition("=")
                labelled = [h.index for h in self.hosts if h.labels.get(key) == value]
                if not labelled:
                    raise ControlError(op, f"no host has the label {name}", field=field_name)
                out.extend(labelled)
                continue
            try:
                out.append(self.host(name).index)
            except ControlError:
                raise ControlError(
                    op, f"unknown host {name!r}; hosts are h1..h{len(self.hosts)}", field=field_name
                ) from None
        return out

    def substitutions(self, host: EmuHost) -> dict[str, str]:
        """The placeholders a command may use, and their values on `host`."""
        return {
            "id": str(host.number),
            "index": str(host.index),
            "name": host.name,
            "ip": host.ip,
            "node": host.node,
            "n": str(len(self.hosts)),
            "peers": ",".join(h.ip for h in self.hosts if h is not host),
            "run": str(self.run_dir.resolve()),
        }

    def command_argv(self, host: EmuHost, command: str | Sequence[str]) -> list[str]:
        """Split (if a string) and substitute {id}, {ip}, {peers}, ... in every argument.

        Raises:
            InputError: an unknown placeholder or unbalanced braces.
        """
        tokens = shlex.split(command) if isinstance(command, str) else list(command)
        if not tokens:
            raise InputError("the command is empty", source="<command>")
        values = self.substitutions(host)
        out = []
        for token in tokens:
            try:
                out.append(token.format_map(values))
            except KeyError as exc:
                raise InputError(
                    f"unknown placeholder {{{exc.args[0]}}} in {token!r}; known: "
                    + ", ".join("{" + k + "}" for k in values)
                    + " (write {{ and }} for literal braces)",
                    source="<command>",
                ) from None
            except (ValueError, IndexError) as exc:
                raise InputError(f"bad braces in {token!r}: {exc}", source="<command>") from None
        return out

    def _host_folder(self, host: EmuHost) -> Path:
        """Where the output of `host`'s programs goes."""
        return self.run_dir / "hosts" / host.name

    def _log_paths(self, host: EmuHost, label: str) -> tuple[Path, Path]:
        folder = self._host_folder(host)
        folder.mkdir(parents=True, exist_ok=True)
        stem, k = label, 1
        while (folder / f"{stem}.out").exists():
            k += 1
            stem = f"{label}.{k}"
        return folder / f"{stem}.out", folder / f"{stem}.err"

    def popen(
        self,
        host: str | EmuHost,
        command: str | Sequence[str],
        *,
        label: str = "cmd",
        env: Mapping[str, str] | None = None,
    ) -> HostProcess:
        """Start `command` on `host`; stdout/stderr go to <run>/hosts/<host>/<label>.out/.err.

        The process is stopped at teardown if it is still running; its exit is
        logged to testbed.log as it happens (`process.exit`, with its status).

        Raises:
            InputError: an unknown placeholder, or a program that does not exist
                (checked before anything starts).
        """
        self._check_open()
        host = self.host(host)
        argv = self.command_argv(host, command)
        out_path, err_path = self._log_paths(host, label)
        return self.programs.start(host, argv, out_path, err_path, label=label, env=env)

    def output_paths(self, host: str | EmuHost, label: str) -> tuple[Path, Path]:
        """Fresh stdout and stderr files for a process labelled `label` on `host`
        (<run>/hosts/<host>/<label>[.K].out, .err)."""
        self._check_open()
        return self._log_paths(self.host(host), label)

    def adopt(self, process: StartedProcess, host: str | EmuHost | None, *, label: str) -> None:
        """Take charge of a process started on `host` (None: in the root namespace) by
        other means than popen: it is stopped at teardown and recorded for `testbed clean`."""
        self._check_open()
        name = "root" if host is None else self.host(host).name
        self._processes.append(process)
        self._record.add_pid(process.pid)
        self._log.write("process.start", host=name, pid=process.pid, label=label, adopted=True)

    def exec(
        self,
        command: str | Sequence[str],
        *,
        hosts: Iterable[str | EmuHost] | None = None,
        timeout_s: float | None = None,
        label: str = "exec",
        on_done: Callable[[ExecResult], None] | None = None,
    ) -> list[ExecResult]:
        """Run `command` on every host (or `hosts`) at once and wait for all.

        Processes still running at `timeout_s` are stopped (timed_out=True).
        Results come in host order.
        """
        chosen = [self.host(h) for h in hosts] if hosts is not None else list(self.hosts)
        for h in chosen:  # validate on every host before starting anything
            self.command_argv(h, command)
        procs = [self.popen(h, command, label=label) for h in chosen]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        results: dict[int, ExecResult] = {}
        pending = list(procs)
        while pending:
            still = []
            for proc in pending:
                result = _finished(proc, deadline)
                if result is None:
                    still.append(proc)
                    continue
                results[proc.host.index] = result
                self.programs.reap(proc, timed_out=result.timed_out)
                if on_done is not None:
                    on_done(result)
            pending = still
            if pending:
                time.sleep(0.01)
        return [results[h.index] for h in chosen]

    def run(
        self, host: str | EmuHost, argv: Sequence[str], *, timeout_s: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a short command on `host` and capture its output (not logged to the run folder)."""
        self._check_open()
        return subprocess.run(
            self.host(host).argv(list(argv)),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def cli(self, script: str | None = None) -> None:
        """Open Mininet's CLI on the network (`h1 ping -c1 h2`, `pingall`, ...)."""
        if self.net is None:
            raise EmulationError("this network was opened with mininet=False; there is no CLI")
        from mininet.cli import CLI

        CLI(self.net, script=script)

    # -- the programs on a host (what churn does to them) -------------------------------------------

    def running(self, host: str | EmuHost) -> list[HostProcess]:
        """The processes popen (or exec, or apply_churn) started on `host` that still run."""
        return self.programs.running(self.host(host))

    def crash(self, host: str | EmuHost) -> list[HostProcess]:
        """Kill (SIGKILL) every program the testbed started on `host` that still runs.

        Raises:
            ControlError: nothing runs there.
        """
        self._check_open()
        return self.programs.crash(self.host(host))

    def freeze(self, host: str | EmuHost) -> list[HostProcess]:
        """Stop (SIGSTOP) the programs running on `host` until thaw(); their sockets
        keep what arrives. Raises ControlError if nothing runs there or it is frozen."""
        self._check_open()
        return self.programs.freeze(self.host(host))

    def thaw(self, host: str | EmuHost) -> list[HostProcess]:
        """Continue (SIGCONT) what freeze() stopped. Raises ControlError if not frozen."""
        self._check_open()
        return self.programs.thaw(self.host(host))

    def restart(self, host: str | EmuHost) -> list[HostProcess]:
        """Kill the programs running on `host` and start each again as it was started
        (its output continues in <label>.2.out, ...). Returns the new processes."""
        self._check_open()
        chosen = self.host(host)
        return self.programs.restart(chosen, lambda label: self._log_paths(chosen, label))

    def gather_files(self, *, spread: bool = False) -> int:
        """Bring what the programs wrote under {run} into the run folder: here they
        wrote it there already (a network across machines copies theirs: ClusterWan).
        Returns how many files were copied."""
        return 0

    def failure_report(self) -> str:
        """The run folder and every program that failed or still runs, with the tail
        of its output (what the pytest plugin shows when a test fails)."""
        return process_report(self.run_dir)

    def apply_churn(self, churn: Any, **options: Any) -> Any:
        """Apply a churn script or availability trace to a program of yours on the
        hosts: a join starts `command` on the host, a leave sends SIGTERM, a crash
        SIGKILL, a freeze SIGSTOP (thaw SIGCONT), a restart kills and starts it
        again, and the network statements act on this WAN. See
        testbed.net.ProgramChurn for the options (command, seed, settle_s, check,
        on_event, background, ...). Returns a ChurnRun (a handle to wait on when
        background=True)."""
        from testbed.net._churn import apply_churn

        return apply_churn(self, churn, **options)

    # -- runtime control -------------------------------------------------------------------------------

    def _engine(self) -> EngineClient:
        self._check_open()
        assert self.engine is not None
        return self.engine

    def set_rtt(
        self, a: str | EmuHost, b: str | EmuHost, rtt_ms: float, *, clamp: bool = False
    ) -> None:
        """Set the RTT between a and b: a one-way delay of rtt_ms / 2 in each direction."""
        src = self._indices("set_rtt", a, "a")
        dst = self._indices("set_rtt", b, "b")
        if src == dst:
            raise ControlError(
                "set_rtt", f"a and b are the same host ({self.hosts[src[0]].name})", field="b"
            )
        largest_ms = 2 * MAX_ONE_WAY_S * 1e3
        if (
            isinstance(rtt_ms, bool)
            or not isinstance(rtt_ms, int | float)
            or not 0 <= rtt_ms <= largest_ms
        ):
            raise ControlError(
                "set_rtt",
                f"expected an RTT in 0..{largest_ms:g} ms, not {rtt_ms!r}",
                field="rtt_ms",
            )
        engine = self._engine()
        # Check both directions before changing either.
        if self.calibration and rtt_ms < self.calibration.floor_rtt_ms and not clamp:
            raise ControlError(
                "set_rtt",
                f"{rtt_ms} ms is below the engine's measured floor of {self.calibration.floor_rtt_ms} ms; pass clamp=True to use the floor",
                field="rtt_ms",
            )
        engine.set_delay(rtt_ms / 2e3, src, dst, clamp=clamp)
        engine.set_delay(rtt_ms / 2e3, dst, src, clamp=clamp)

    def set_delay(self, src: Any, dst: Any, one_way_ms: float, *, clamp: bool = False) -> int:
        """Set the one-way delay of every (s, d) in src x dst (names or lists of names; None = all)."""
        if not isinstance(one_way_ms, int | float):
            raise ControlError(
                "set_delay", f"expected a delay in ms, not {one_way_ms!r}", field="one_way_ms"
            )
        return self._engine().set_delay(
            one_way_ms / 1e3,
            self._indices("set_delay", src, "src"),
            self._indices("set_delay", dst, "dst"),
            clamp=clamp,
        )["pairs"]

    def scale(self, factor: float, *, clamp: bool = False) -> int:
        """Multiply every delay by `factor`; returns how many pairs were clamped."""
        return self._engine().scale(factor, clamp=clamp)["clamped"]

    def load_topology(self, topology: Topology | str, *, clamp: bool = False) -> int:
        """Switch to another matrix for the same hosts (e.g. "planetlab:2", another time frame).

        The same topology nodes are selected from it and the run's scale is
        applied. Returns how many pairs were clamped to the floor.
        """
        self._check_open()
        new = load_topology(topology) if isinstance(topology, str) else topology
        if new.n != len(self.hosts) or new.names != self.topology.names:
            new = new.select(hosts=[h.node for h in self.hosts])
        new = new.scaled(self.scale_factor)
        clamped = self._load_checked(new, clamp=clamp)
        self._log.write("control.load_topology", source=new.source, clamped=clamped)
        return clamped

    def load_one_way(self, one_way_ms: np.ndarray, *, clamp: bool = False, why: str = "") -> int:
        """Replace the delays the engine applies (n x n one-way ms, as the engine
        takes them: no scale applied). Returns how many pairs were clamped."""
        self._check_open()
        current = Topology(
            np.asarray(one_way_ms, dtype=np.float64) * 2.0,
            self.topology.names,
            self.topology.labels,
            f"{self.topology.source} ({why or 'changed at run time'})",
        )
        clamped = self._load_checked(current, clamp=clamp)
        self._log.write("control.load_one_way", why=why, clamped=clamped)
        return clamped

    def set_loss(self, rate: float, *, src: Any = None, dst: Any = None) -> int:
        """Drop packets of the pairs src x dst (None = all) with probability `rate`."""
        return self._engine().set_loss(
            rate, self._indices("set_loss", src, "src"), self._indices("set_loss", dst, "dst")
        )["pairs"]

    def set_jitter(
        self, dist: str | None, *, src: Any = None, dst: Any = None, **params: float
    ) -> int:
        """Add jitter to src x dst (None = all): dist "normal" (sigma_ms), "uniform" (width_ms),
        "pareto" (mean_ms, alpha); dist=None removes it. Seeded by the run's seed."""
        spec = None if dist is None else {"dist": dist, **params}
        return self._engine().set_jitter(
            spec, self._indices("set_jitter", src, "src"), self._indices("set_jitter", dst, "dst")
        )["pairs"]

    def set_reorder(
        self, rate: float, *, gap_ms: float | None = None, src: Any = None, dst: Any = None
    ) -> int:
        """Reorder packets of src x dst (None = all): with probability `rate` a packet
        is held gap_ms longer than its pair's delay, so later ones overtake it.
        rate=0 removes it. Seeded by the run's seed. Returns the pair count."""
        return self._engine().set_reorder(
            rate,
            gap_ms,
            self._indices("set_reorder", src, "src"),
            self._indices("set_reorder", dst, "dst"),
        )["pairs"]

    def set_duplicate(self, rate: float, *, src: Any = None, dst: Any = None) -> int:
        """Deliver each packet of src x dst (None = all) twice with probability `rate`
        (0 removes it). Returns the pair count."""
        return self._engine().set_duplicate(
            rate,
            self._indices("set_duplicate", src, "src"),
            self._indices("set_duplicate", dst, "dst"),
        )["pairs"]

    def set_bandwidth(
        self,
        rate_mbit: float | None,
        *,
        src: Any = None,
        dst: Any = None,
        queue_bytes: int = 0,
        queue_packets: int = 0,
        ecn_bytes: int = 0,
    ) -> int:
        """Give each pair of src x dst (None = all) a path of `rate_mbit` Mbit/s of its
        own, with a drop-tail queue (queue_bytes or queue_packets) and, with ecn_bytes,
        CE marks on ECN-capable packets above that backlog; None removes it. Applied by
        the delay engine (state per pair): a packet is serialised behind the pair's
        queued packets, then travels the pair's delay. Returns the pair count."""
        queue = {"queue_bytes": queue_bytes, "queue_packets": queue_packets}
        return self._engine().set_bandwidth(
            rate_mbit,
            self._indices("set_bandwidth", src, "src"),
            self._indices("set_bandwidth", dst, "dst"),
            **queue,
            ecn_bytes=ecn_bytes,
        )["pairs"]

    def set_access(
        self,
        hosts: Any = None,
        *,
        up_mbit: float | None = None,
        down_mbit: float | None = None,
        queue_bytes: int = 0,
        queue_packets: int = 0,
    ) -> int:
        """Shape the access links of `hosts` (None = all) in the kernel (HTB and a
        drop-tail FIFO on each host's veth: up on its side, down on the core's);
        no rates removes the shaping. Returns the host count."""
        self._check_open()
        link = AccessLink(up_mbit, down_mbit, queue_bytes, queue_packets)
        indices = self._indices("set_access", hosts, "hosts")
        chosen = list(range(len(self.hosts))) if indices is None else indices
        self._shape_access(chosen, link)
        for k in chosen:
            if link.up_mbit is None and link.down_mbit is None:
                self.access.pop(self.hosts[k].name, None)
            else:
                self.access[self.hosts[k].name] = link
        self._log.write("wan.access", hosts=[self.hosts[k].name for k in chosen], **link.to_dict())
        return len(chosen)

    def _shape_access(self, hosts: list[int], link: AccessLink) -> None:
        apply_access(self.plan, hosts, link, self._shaped)

    def partition(self, *groups: Iterable[str | EmuHost]) -> None:
        """Cut the network into groups that cannot reach each other (unlisted hosts form one more group)."""
        indices = [self._indices("partition", list(g), "groups") or [] for g in groups]
        self._engine().partition(indices)

    def heal(self) -> None:
        """Remove every partition."""
        self._engine().heal()

    def host_down(self, host: str | EmuHost) -> None:
        """Drop every packet to or from `host` until host_up()."""
        (index,) = self._indices("host_down", host, "host")
        self._engine().host_down(index)

    def host_up(self, host: str | EmuHost) -> None:
        (index,) = self._indices("host_up", host, "host")
        self._engine().host_up(index)

    def stats(self) -> dict[str, Any]:
        """The engine's counters and timing figures."""
        return self._engine().stats()

    def counters(self, *, reset: bool = False) -> dict[str, np.ndarray]:
        """Per ordered pair (n x n arrays): forwarded packets and bytes, dropped packets."""
        raw = self._engine().counters(reset=reset)
        n = len(self.hosts)
        out = {key: np.zeros((n, n), dtype=np.int64) for key in ("packets", "bytes", "dropped")}
        for src, dst, packets, size, dropped in _sparse(raw):
            out["packets"][src, dst] = packets
            out["bytes"][src, dst] = size
            out["dropped"][src, dst] = dropped
        return out

    def spoofed(self) -> int:
        """Packets the WAN core dropped because their source address was not their
        host's (anti-spoofing: a host sends only as itself)."""
        self._check_open()
        return spoofed_packets(self.plan)

    def monitor_fidelity(self, **options: Any) -> FidelityMonitor:
        """Start sampling the RTT this WAN delivers, in the background (FidelityMonitor's
        options: interval_s, pairs, samples, rate_per_s, seed); rounds go to
        fidelity.jsonl in the run folder. Close the monitor before the WAN."""
        self._check_open()
        monitor = FidelityMonitor(
            [h.netns for h in self.hosts],
            [h.ip for h in self.hosts],
            self._record.control_path,
            self.run_dir / "fidelity.jsonl",
            **options,
        )
        monitor.start()
        return monitor

    def configured_one_way_ms(self) -> np.ndarray:
        """The one-way delays the engine applies now (n x n, ms), after any change or clamp."""
        return np.asarray(self._engine().describe()["one_way_s"], dtype=np.float64) * 1e3

    # -- teardown --------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise EmulationError("this network has been torn down")

    def close(self) -> None:
        """Tear everything down: processes, engine, shells, namespaces. Idempotent.

        Raises:
            CleanupError: something could not be removed (the message says what;
                `testbed clean` will retry).
        """
        if self._closed:
            return
        self._closed = True
        t0 = time.monotonic()
        problems: list[str] = []
        with _signals_deferred():
            problems += self.programs.stop_all(grace_s=1.0)
            for process in self._processes:
                try:
                    process.terminate(grace_s=1.0)
                except OSError as exc:
                    problems.append(f"stopping pid {process.pid}: {exc}")
            if self.engine is not None:
                try:
                    write_json(self.run_dir / "engine" / "final-stats.json", self.engine.stats())
                    counters = _sparse(self.engine.counters())  # the pairs that talked
                    write_json(
                        self.run_dir / "engine" / "counters.json",
                        {
                            "pairs": counters,
                            "columns": ["src", "dst", "packets", "bytes", "dropped"],
                            "hosts": [h.name for h in self.hosts],
                        },
                    )
                    self.engine.shutdown()
                except Exception as exc:  # whatever the engine said, teardown goes on
                    problems.append(f"engine: {type(exc).__name__}: {exc}")
                self.engine.close()
            if self._engine_proc is not None:
                try:
                    self._engine_proc.wait(5.0)
                except subprocess.TimeoutExpired:
                    self._engine_proc.kill()
                    self._engine_proc.wait()
            spoofed = None
            if self.plan.hosts:
                try:
                    spoofed = spoofed_packets(self.plan)
                except (EmulationError, OSError, ValueError) as exc:
                    problems.append(f"anti-spoofing counter: {exc}")
            if self._shells:
                from testbed.net._mininet import stop_shells

                stop_shells(self._shells)
            if self._containers is not None:
                problems += remove_containers(self.plan.run_id)
            pids, alive, _removed = remove_run(self.plan.netns_names, self._record.pids)
            if alive:
                problems.append(f"processes still alive: {alive}")
            self.down_s = time.monotonic() - t0
            self.teardown = {
                "down_s": round(self.down_s, 3),
                "swept_pids": len(pids),
                "spoofed_dropped": spoofed,
            }
            try:
                self.teardown["leftovers"] = leftovers(
                    self.plan.run_id,
                    self._record.pids,
                    self._root_before,
                    containers=self._containers is not None,
                )
            except OSError as exc:
                problems.append(f"counting leftovers: {exc}")
            left = self.teardown.get("leftovers", {})
            if any(left.values()):
                problems.append(f"left behind: {left}")
            else:
                self._record.remove()
            self._log.write("teardown.done", **self.teardown, problems=problems)
            self._log.close()
            with contextlib.suppress(OSError):
                description = json.loads((self.run_dir / "emulation.json").read_text())
                description["teardown"] = self.teardown
                write_json(self.run_dir / "emulation.json", description)
        if problems:
            raise CleanupError(
                "teardown incomplete: " + "; ".join(problems) + "; run `testbed clean`"
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.close()
        except CleanupError:
            if exc is None:
                raise
            # An exception is already on its way; do not hide it. The run log has the details.


def _finished(proc: HostProcess, deadline: float | None) -> ExecResult | None:
    """proc's result if it has exited, or once stopped now that `deadline` (on
    time.monotonic()) has passed; None while it may run on."""
    code = proc.poll()
    if code is None and deadline is not None and time.monotonic() >= deadline:
        proc.terminate(grace_s=1.0, why="timeout")
        timed_out = True
    elif code is None:
        return None
    else:
        timed_out = False
    return ExecResult(
        proc.host,
        None if timed_out else code,
        time.monotonic() - proc.started,
        proc.stdout_path,
        proc.stderr_path,
        timed_out,
    )


def _sparse(counters: dict[str, Any]) -> list[list[int]]:
    """The engine's counters as [src, dst, packets, bytes, dropped] rows of the pairs
    that talked (engines before 2026-11-26, run by bench --against, answer dense n x n)."""
    if "pairs" in counters:
        return list(counters["pairs"])
    packets, size, dropped = (np.asarray(counters[k]) for k in ("packets", "bytes", "dropped"))
    return [
        [int(i), int(j), int(packets[i, j]), int(size[i, j]), int(dropped[i, j])]
        for i, j in zip(*np.nonzero(packets + dropped), strict=True)
    ]


# Where the delay engine lives, newest first (before "One house" it was testbed.emu.engine).
ENGINE_MODULES = ("testbed.net.delay", "testbed.emu.engine")


def _engine_module(checkout: Path | None) -> str | None:
    """The delay engine's module in `checkout` (None: this one's)."""
    if checkout is None:
        return ENGINE_MODULES[0]
    for module in ENGINE_MODULES:
        if (checkout / module.replace(".", "/") / "__main__.py").is_file():
            return module
    return None


def _engine_choice(queues: int | None, source: str | Path | None) -> tuple[int, Path | None]:
    """(queues, source checkout) for the delay engine, checked."""
    checkout = None
    if source is not None:
        checkout = Path(source).resolve()
        if _engine_module(checkout) is None:
            raise EmulationError(
                f"engine_source: {checkout} holds no delay engine "
                f"({' or '.join(m.replace('.', '/') for m in ENGINE_MODULES)})"
            )
        if queues not in (None, 1):
            raise EmulationError("engine_source: another checkout's engine runs with one queue")
        return 1, checkout
    if queues is None:
        fast, _why = compiled_datapath()
        return (min(4, os.cpu_count() or 1) if fast is not None else 1), None
    if isinstance(queues, bool) or not isinstance(queues, int) or not 1 <= queues <= 16:
        raise EmulationError(f"engine_queues: expected a whole number 1..16, not {queues!r}")
    return queues, None


def _write_engine_config(
    engine_dir: Path,
    plan: NetworkPlan,
    n: int,
    control: Path,
    *,
    realtime: bool,
    seed: int,
    queues: int = 1,
) -> Path:
    """Write the delay engine's start-up configuration (all delays zero until
    the matrix is loaded) to engine_dir; returns the config file's path."""
    zero = engine_dir / "zero.f64"
    write_delay_file(zero, np.zeros((n, n)))
    config = {
        "hosts": n,
        "ip_base": plan.ip_base,
        "matrix_path": str(zero),
        "control_path": str(control),
        "log_path": str(engine_dir / "engine.log"),
        "queue": 0,
        "seed": seed,
        "realtime_priority": 20 if realtime else 0,
    }
    if (
        queues != 1
    ):  # written only when needed: an older engine (bench --against) knows no such field
        config["queues"] = queues
    config_path = engine_dir / "config.json"
    write_json(config_path, config)
    return config_path


def _await_engine_ready(ready_r: int, proc: subprocess.Popen[bytes], engine_dir: Path) -> None:
    """Wait (at most ENGINE_READY_TIMEOUT_S) for the engine's ready line on the
    pipe `ready_r`, and close it.

    Raises:
        EmulationError: the engine exited first (its last stderr line says
            why) or did not answer in time.
    """
    line = b""
    deadline = time.monotonic() + ENGINE_READY_TIMEOUT_S
    try:
        while b"\n" not in line:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EmulationError(
                    f"the delay engine did not start within {ENGINE_READY_TIMEOUT_S:.0f} s; see {engine_dir / 'engine.stderr'}"
                )
            readable, _, _ = select.select([ready_r], [], [], remaining)
            if readable:
                chunk = os.read(ready_r, 64)
                if not chunk:
                    err = (
                        (engine_dir / "engine.stderr")
                        .read_text(errors="replace")
                        .strip()
                        .splitlines()
                    )
                    raise EmulationError(
                        "the delay engine exited during start-up: "
                        + (err[-1] if err else f"exit code {proc.wait()}")
                    )
                line += chunk
    finally:
        os.close(ready_r)


def _calibrate(engine: EngineClient, hosts: Sequence[EmuHost], run_dir: Path) -> Calibration:
    """Measure the RTT of the path with nothing held, and tell the engine.

    The probes go in short rounds and the quietest round counts: this
    machine's scheduling noise only ever adds latency, comes in bursts, and
    a burst during calibration would otherwise inflate the offset, so that
    every later delay came out short by the burst's size.
    """
    n = len(hosts)
    pairs = [(k, (k + 1) % n) for k in range(min(n, 4))]
    if n == 2:
        pairs = [(0, 1), (1, 0)]
    samples = max(1, CALIBRATION_PROBES // CALIBRATION_ROUNDS // len(pairs))
    rounds: list[list[float]] = []
    procs: list[float] = []
    lost = sent = 0
    with IcmpProber([h.netns for h in hosts], [h.ip for h in hosts]) as prober:
        # A short warm-up first: caches, the engine's first wake-ups.
        prober.probe(pairs, samples=5, rate_per_s=CALIBRATION_RATE_PER_S, timeout_s=0.5, seed=1)
        for k in range(CALIBRATION_ROUNDS + CALIBRATION_EXTRA_ROUNDS):
            if k >= CALIBRATION_ROUNDS:
                # Every round so far was noisy (a burst on a shared machine
                # that outlasted them all): pause and measure again, since
                # a burst passes and the floor must not keep it. (Nothing
                # answered at all is no burst: the error below says so.)
                if not rounds or _quiet(rounds):
                    break
                time.sleep(CALIBRATION_PAUSE_S)
            engine.counters(reset=True)
            result = prober.probe(
                pairs,
                samples=samples,
                rate_per_s=CALIBRATION_RATE_PER_S,
                timeout_s=1.0,
                seed=2 + k,
            )
            lost, sent = lost + result.lost, sent + result.sent
            rtts = [r for per_pair in result.rtts_s for r in per_pair]
            if rtts:
                rounds.append(rtts)
                procs.append(float(engine.stats()["immediate_us"].get("p50", 0.0)))
    rtts = [r for per_round in rounds for r in per_round]
    if len(rtts) < sent // 2:
        raise EmulationError(
            f"calibration lost {lost} of {sent} probes between hosts with no delay configured; "
            f"the WAN core does not forward (see {run_dir / 'engine'})"
        )
    quiet = min(range(len(rounds)), key=lambda k: _percentile(rounds[k], 50))
    proc_us = procs[quiet]
    rtt_p50_ms = _percentile(rounds[quiet], 50) * 1e3
    rtt_p99_ms = _percentile(rtts, 99) * 1e3
    offset_us = max(0.0, rtt_p50_ms * 1e3 / 2 - proc_us)
    # The floor is the 90th percentile of the zero-delay RTT, in the
    # quietest round. Higher percentiles measure this machine's wake-up
    # noise (a vCPU woken from idle can take 0.2-2 ms on a shared host)
    # and swing from run to run.
    floor_rtt_ms = float(
        np.ceil(min(_percentile(r, FLOOR_PERCENTILE) for r in rounds) * 1e3 / FLOOR_GRAIN_MS)
        * FLOOR_GRAIN_MS
    )
    engine.set_calibration(path_offset_s=offset_us * 1e-6, floor_one_way_s=floor_rtt_ms / 2 * 1e-3)
    return Calibration(
        floor_rtt_ms=round(floor_rtt_ms, 4),
        rtt0_p50_ms=round(rtt_p50_ms, 4),
        rtt0_p99_ms=round(rtt_p99_ms, 4),
        engine_proc_us=round(proc_us, 1),
        path_offset_us=round(offset_us, 1),
        samples=len(rtts),
        rounds=len(rounds),
    )


def _asdict(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}


def open_wan(
    topology: Topology | str | Path,
    *,
    hosts: int | Sequence[str] | None = None,
    pick: str = "first",
    seed: int = 0,
    scale: float = 1.0,
    clamp: bool = False,
    run_dir: str | Path | None = None,
    name: str = "wan",
    mininet: bool = True,
    calibrate: bool = True,
    realtime: bool = True,
    progress: Any = None,
    containers: Any = None,
    engine_queues: int | None = None,
    engine_source: str | Path | None = None,
) -> Wan:
    """Bring up an emulated WAN and return it (close it, or use `with`).

    Args:
        topology: a Topology or a reference ("planetlab", "planetlab:3",
            "sharcnet", a matrix file, a topology .toml).
        hosts: how many hosts (the first N, or a seeded sample with
            pick="random"), or an explicit list of topology node names.
        pick: "first" or "random".
        seed: for pick="random", and for the engine's loss and jitter draws.
        scale: multiply every latency by this.
        clamp: raise latencies below the engine's measured floor to the floor
            (else they are an error naming the pairs).
        run_dir: the run folder (default: runs/<name>-<timestamp>/).
        name: the run's name, for the default run folder.
        mininet: start a Mininet shell per host (needed for cli()).
        calibrate: measure the engine's floor and offset (needs 2+ hosts).
        realtime: run the delay engine with SCHED_FIFO priority.
        progress: an object with advance(kind) and phase(name) (the CLI passes a
            rich progress display), or None.
        containers: make hosts Docker containers (docs/emulator.md): an image
            name (every host), or a ContainerSpec / mapping of image, hosts (a
            count: the last N; or names), cpus (cores), memory_mb; or a list of
            such, each for its own hosts (different limits: heterogeneous nodes).
        engine_queues: netfilter queues the delay engine reads, each in a thread
            of its own (None: one per core, at most 4; 1 with the Python data path).
        engine_source: run the delay engine of this checkout (another commit's
            worktree, for `testbed bench delay --against`) with one queue.

    Raises:
        TopologyError, FloorError: bad topology, selection or latencies; nothing was created.
        EmulationError: not root, or the kernel refused something; everything
            created so far has been removed again.
    """
    if os.geteuid() != 0:
        raise EmulationError(
            "emulating a network needs root (network namespaces, netfilter queues); run with sudo"
        )
    topo = load_topology(topology) if isinstance(topology, str | Path) else topology
    if isinstance(hosts, int) or hosts is None:
        topo = topo.select(hosts, pick=pick, seed=seed if pick == "random" else None)
    else:
        if isinstance(hosts, str):
            hosts = [h for h in hosts.split(",") if h]
        topo = topo.select(hosts=hosts)
    topo = topo.scaled(scale)
    groups = container_groups(containers, [f"h{k + 1}" for k in range(topo.n)])
    folder = new_run_dir(name, run_dir)
    plan = plan_network(topo.n, new_run_id())
    wan = Wan(topo, plan, folder, scale=scale)
    wan._containers = groups or None
    wan._engine_queues, wan._engine_source = _engine_choice(engine_queues, engine_source)
    if progress:
        progress.start(len(plan.hosts))
    try:
        wan._start(
            mininet=mininet,
            calibrate=calibrate,
            clamp=clamp,
            realtime=realtime,
            seed=seed,
            progress=progress,
        )
    except BaseException:
        with contextlib.suppress(CleanupError):
            wan.close()
        raise
    finally:
        if progress:
            progress.stop()
    return wan
