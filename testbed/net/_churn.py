# Churn and faults for any program: a churn script or availability trace
# applied to a user's command on the hosts of a WAN.
#
# Theory of operation
#   The script is compiled against the WAN's hosts (names h1.., their labels)
#   with the run's seed, as for the project's own peers, and the same Executor
#   runs it on time (testbed/churn/_execute.py); only the engine differs.
#   ProgramEngine acts on processes: a join starts `command` on the host
#   (Wan.popen, with the placeholders), a leave sends the leave signal
#   (SIGTERM by default) or runs a leave command on the host and waits up to
#   leave_grace_s for the program to end (then kills it and counts the leave as
#   abrupt), a crash is SIGKILL to the host's programs, a freeze SIGSTOP and a
#   thaw SIGCONT, a restart a crash and a join; the network statements call the
#   WAN's control (partition, heal, loss, latency). A statement that finds
#   nothing running on its host (the program died by itself) is applied to
#   nothing and says so in applied.jsonl (`absent`), never silently.
#
#   After each quiet period the user's check runs: a command (in the testbed's
#   own namespace, or on every host that should be up, in its namespace) or a
#   Python callable; its verdict, exit status and output go to checks.jsonl.
#   Everything is written as it happens under <run>/churn[-K]/: schedule.jsonl,
#   applied.jsonl, checks.jsonl, then summary.json. With background=True the
#   schedule runs in a thread and the call returns a handle at once.

from __future__ import annotations

import json
import math
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from testbed.churn import (
    Executor,
    Quiet,
    Schedule,
    Universe,
    compile_churn,
    parse_churn,
    read_churn,
    read_trace,
    trace_schedule,
)
from testbed.errors import ControlError, EmulationError, InputError
from testbed.net._fidelity import FidelityMonitor
from testbed.net._host import EmuHost
from testbed.net._programs import ExecResult, HostProcess, check_program, status_words
from testbed.runs import JsonLog, write_json


class Wan(Protocol):
    """What the churn uses of testbed.net.Wan (which calls apply_churn with itself)."""

    hosts: tuple[EmuHost, ...]
    run_dir: Path

    def host(self, name: str | EmuHost) -> EmuHost: ...
    def command_argv(self, host: EmuHost, command: str | Sequence[str]) -> list[str]: ...
    def popen(
        self,
        host: str | EmuHost,
        command: str | Sequence[str],
        *,
        label: str = ...,
        env: Mapping[str, str] | None = ...,
    ) -> HostProcess: ...
    def exec(
        self,
        command: str | Sequence[str],
        *,
        hosts: Iterable[str | EmuHost] | None = ...,
        timeout_s: float | None = ...,
        label: str = ...,
    ) -> list[ExecResult]: ...
    def running(self, host: str | EmuHost) -> list[HostProcess]: ...
    def crash(self, host: str | EmuHost) -> list[HostProcess]: ...
    def freeze(self, host: str | EmuHost) -> list[HostProcess]: ...
    def thaw(self, host: str | EmuHost) -> list[HostProcess]: ...
    def load_one_way(self, one_way_ms: np.ndarray, *, clamp: bool = ..., why: str = ...) -> int: ...
    def partition(self, *groups: Iterable[str | EmuHost]) -> None: ...
    def heal(self) -> None: ...
    def set_loss(self, rate: float, *, src: Any = ..., dst: Any = ...) -> int: ...
    def set_access(self, hosts: Any = ..., **link: Any) -> int: ...
    def set_bandwidth(self, rate_mbit: float | None, **options: Any) -> int: ...
    def set_reorder(self, rate: float, **options: Any) -> int: ...
    def set_duplicate(self, rate: float, **options: Any) -> int: ...
    def configured_one_way_ms(self) -> np.ndarray: ...
    def gather_files(self, *, spread: bool = ...) -> int: ...
    def monitor_fidelity(self, **options: Any) -> FidelityMonitor: ...


__all__ = ["ChurnRun", "ProgramEngine", "WanVerbs", "apply_churn", "load_schedule"]

# How often a leave looks whether the program has ended, and a sleep's slice
# (so that stop() ends a background run promptly).
POLL_S = 0.05
CHECK_TAIL_CHARS = 2000
# A flooder's priority (testbed/net/flooder.py): above the peers it floods, below the
# delay engine (SCHED_FIFO), so the flood is what was asked, up to what one process sends.
FLOODER_NICE = -10

Check = str | Sequence[str] | Callable[[dict[str, Any]], object] | None


class _Stopped(Exception):
    """ChurnRun.stop() was called: the schedule ends where it is."""


class Floods:
    """The flooders a churn script runs on a WAN's hosts (`flood`; testbed/net/flooder.py),
    one process per flooding host, and their reports once they stopped."""

    def __init__(self, wan: Any) -> None:
        self.wan = wan
        self.folder = Path(wan.run_dir) / "floods"
        self.running: dict[str, tuple[HostProcess, Path, dict[str, Any]]] = {}
        self.reports: list[dict[str, Any]] = []

    def start(self, host: EmuHost, targets: list[tuple[str, int]], per_s: float) -> None:
        if host.name in self.running:
            self.stop(host)
        self.folder.mkdir(parents=True, exist_ok=True)
        report = self.folder / f"{host.name}-{len(self.reports) + len(self.running) + 1}.json"
        argv = [
            sys.executable, "-m", "testbed.net.flooder",
            "--to", *(f"{ip}:{port}" for ip, port in targets),
            "--per-s", repr(per_s),
            "--seed", str(len(self.reports) + 1),
            "--report", str(report.resolve()),
            "--nice", str(FLOODER_NICE),
        ]  # fmt: skip
        process = self.wan.popen(host, argv, label="flood")
        started = {"host": host.name, "per_s_asked": per_s, "targets": len(targets)}
        self.running[host.name] = (process, report, started)

    def stop(self, host: EmuHost) -> dict[str, Any] | None:
        """Stop the flood from `host` (None: there was none); its report."""
        entry = self.running.pop(host.name, None)
        if entry is None:
            return None
        process, path, started = entry
        code = process.terminate(grace_s=5.0, why="flood end")
        try:
            report = started | json.loads(path.read_text())
        except (OSError, ValueError):  # killed before it wrote (a crashed host, say)
            report = started | {"sent": None, "why": f"no report (exit status {code})"}
        self.reports.append(report)
        return report

    def close(self) -> list[dict[str, Any]]:
        for name in list(self.running):
            self.stop(self.wan.host(name))
        return self.reports


class WanVerbs:
    """The churn language's network statements on a WAN (for an engine with
    `self.wan` whose host k is wan.hosts[k]): the program engine's and the peers'."""

    wan: Any
    flood_port: int | None = None  # where a `flood` without `port` goes (the peers' port)
    _floods: Floods | None = None

    def flood(self, sources: list[int], targets: list[int], per_s: float, port: int | None) -> None:
        """Each source sends per_s datagrams a second to the targets (0: stops)."""
        if self._floods is None:
            self._floods = Floods(self.wan)
        for source in sources:
            host = self.wan.hosts[source]
            if per_s <= 0:
                self._floods.stop(host)
                continue
            to = port if port is not None else self.flood_port
            if to is None:
                raise InputError(
                    "`flood` needs `port N` here: there are no peers whose port to use"
                )
            addresses = [(self.wan.hosts[t].ip, to) for t in targets]
            self._floods.start(host, addresses, per_s)

    def flood_reports(self) -> list[dict[str, Any]]:
        """Stop every flood still running; what each flood sent."""
        return [] if self._floods is None else self._floods.close()

    def _name(self, host: int) -> str:
        return str(self.wan.hosts[host].name)

    def set_matrix(self, one_way_s: np.ndarray, why: str = "") -> int:
        """Load new delays; pairs below the engine's floor are clamped to it (a
        script asking for less gets the least there is) and counted."""
        return int(self.wan.load_one_way(one_way_s * 1e3, clamp=True, why=why))

    def partition(self, groups: list[list[int]]) -> None:
        self.wan.partition(*([self._name(h) for h in group] for group in groups))

    def heal(self) -> None:
        self.wan.heal()

    def set_loss(self, rate: float, src: list[int] | None, dst: list[int] | None) -> None:
        source = None if src is None else [self._name(h) for h in src]
        target = None if dst is None else [self._name(h) for h in dst]
        self.wan.set_loss(rate, src=source, dst=target)

    def shape(
        self, verb: str, groups: list[list[int]], value: float | None, params: dict[str, float]
    ) -> None:
        """set bandwidth / access / reorder / duplicate (both directions of a pair)."""
        names = [[self._name(h) for h in g] for g in groups]
        if verb == "access":
            queue = {k: int(params[k]) for k in ("queue_bytes", "queue_packets") if k in params}
            self.wan.set_access(
                names[0], up_mbit=params.get("up_mbit"), down_mbit=params.get("down_mbit"), **queue
            )
            return
        directions = [(None, None)] if not names else [(names[0], names[1]), (names[1], names[0])]
        for src, dst in directions:
            if verb == "bandwidth":
                queue = {k: int(params[k]) for k in ("queue_bytes", "queue_packets") if k in params}
                self.wan.set_bandwidth(params.get("rate_mbit"), src=src, dst=dst, **queue)
            elif verb == "reorder":
                gap = params.get("gap_s")
                self.wan.set_reorder(
                    value or 0.0, gap_ms=None if gap is None else gap * 1e3, src=src, dst=dst
                )
            else:
                self.wan.set_duplicate(value or 0.0, src=src, dst=dst)


class ProgramEngine(WanVerbs):
    """The churn executor's engine for a user's program on a Wan (see the header)."""

    def __init__(
        self,
        wan: Wan,
        *,
        command: str | Sequence[str],
        label: str,
        env: dict[str, str] | None,
        leave: str | Sequence[str],
        leave_grace_s: float,
        stop: threading.Event,
        log: JsonLog,
    ) -> None:
        self.wan = wan
        self.command = command
        self.label = label
        self.env = env
        self.leave_signal = _signal_of(leave) if isinstance(leave, str) else None
        self.leave_command = None if self.leave_signal is not None else leave
        self.leave_grace_s = leave_grace_s
        self._stop = stop
        self._log = log
        self._t0 = time.monotonic()
        self._leaving: dict[int, tuple[float, list[HostProcess]]] = {}
        self.abrupt: list[str] = []  # hosts whose program outlived leave_grace_s
        self.absent: list[dict[str, Any]] = []  # verbs that found nothing running
        self.started = 0

    @property
    def now(self) -> float:
        return time.monotonic() - self._t0

    def _absent(self, verb: str, host: int) -> None:
        record = {"verb": verb, "host": self._name(host), "t": round(self.now, 6)}
        self.absent.append(record)
        self._log.write("absent", **record, why="nothing the testbed started runs there")

    # -- hosts -----------------------------------------------------------------------------------

    def join(self, host: int) -> None:
        self.wan.popen(self.wan.hosts[host], self.command, label=self.label, env=self.env)
        self.started += 1

    def leave(self, host: int) -> None:
        running = self.wan.running(self.wan.hosts[host])
        if not running:
            self._absent("leave", host)
            return
        if self.leave_signal is not None:
            for process in running:
                if process.frozen:
                    process.signal(signal.SIGCONT)
                    process.frozen = False
                process.signal(self.leave_signal, "leave")
        else:
            assert self.leave_command is not None
            self.wan.popen(self.wan.hosts[host], self.leave_command, label=f"{self.label}-leave")
            for process in running:
                process._signalled = "leave"
        self._leaving[host] = (time.monotonic() + self.leave_grace_s, running)

    def crash(self, host: int) -> None:
        self._leaving.pop(host, None)
        try:
            self.wan.crash(self.wan.hosts[host])
        except ControlError:
            self._absent("crash", host)

    def freeze(self, host: int) -> None:
        try:
            self.wan.freeze(self.wan.hosts[host])
        except ControlError:
            self._absent("freeze", host)

    def thaw(self, host: int) -> None:
        try:
            self.wan.thaw(self.wan.hosts[host])
        except ControlError:
            self._absent("thaw", host)

    def departing(self) -> list[int]:
        """Hosts asked to leave whose program still runs; past leave_grace_s it is killed."""
        now = time.monotonic()
        for host, (deadline, processes) in list(self._leaving.items()):
            alive = [p for p in processes if p.poll() is None]
            if alive and now >= deadline:
                for process in alive:
                    process.kill("leave")
                self.abrupt.append(self._name(host))
                self._log.write(
                    "leave.abrupt",
                    host=self._name(host),
                    after_s=self.leave_grace_s,
                    pids=[p.pid for p in alive],
                )
                alive = []
            if not alive:
                del self._leaving[host]
        return sorted(self._leaving)

    # -- time ------------------------------------------------------------------------------------

    def advance(self, until: float) -> None:
        while True:
            if self._stop.is_set():
                raise _Stopped
            left = until - self.now
            if left <= 0:
                return
            self._stop.wait(min(left, POLL_S if self._leaving else 0.5))
            if self._leaving:
                self.departing()


def _signal_of(name: str) -> signal.Signals | None:
    """SIGTERM, TERM, sigint ... -> the signal; None when `name` is not one (a command)."""
    text = name.strip().upper()
    if not text or " " in text:
        return None
    try:
        return signal.Signals[text if text.startswith("SIG") else "SIG" + text]
    except KeyError:
        return None


def load_schedule(
    wan: Wan, churn: Schedule | str | Path, *, seed: int, trace_down: str = "leave"
) -> Schedule:
    """A schedule on the WAN's hosts from a compiled Schedule, a .churn file, an
    availability trace (a file of any other suffix) or a script's text (a string
    with a newline in it)."""
    if isinstance(churn, Schedule):
        known = {h.name for h in wan.hosts}
        for event in churn.events:
            for name in (*event.hosts, *(h for g in event.groups for h in g)):
                if name not in known:
                    raise InputError(
                        f"the schedule names host {name!r}; this network's hosts are "
                        f"h1..h{len(wan.hosts)}",
                        source=churn.source,
                        line=event.line or None,
                    )
        return churn
    names = [h.name for h in wan.hosts]
    universe = Universe(names, [dict(h.labels) for h in wan.hosts])
    if isinstance(churn, str) and "\n" in churn:
        return compile_churn(parse_churn(churn), universe, seed)
    path = Path(churn)
    if path.suffix == ".churn":
        return compile_churn(read_churn(path), universe, seed, str(path))
    if not path.exists():
        raise InputError(
            "no such churn script or trace (a script's text needs a newline in it)",
            source=str(path),
        )
    return trace_schedule(read_trace(path), names, down=trace_down, source=str(path))


class ChurnRun:
    """A churn schedule applied to a program: the handle apply_churn returns.

    Attributes:
        folder: where it logs (schedule.jsonl, applied.jsonl, checks.jsonl, summary.json).
        schedule: what it applies.
        checks: one record per quiet period (t, members, ok, ...), as they happen.
        summary: the figures, once it has finished (see wait()).
    """

    def __init__(
        self, folder: Path, schedule: Schedule, run: Callable[[ChurnRun], dict[str, Any]]
    ) -> None:
        self.folder = folder
        self.schedule = schedule
        self.checks: list[dict[str, Any]] = []
        self.summary: dict[str, Any] | None = None
        self._run = run
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def _execute(self) -> None:
        try:
            self.summary = self._run(self)
        except BaseException as exc:
            self._error = exc
            if self._thread is None:
                raise

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._execute, name="churn", daemon=True)
        self._thread.start()

    @property
    def done(self) -> bool:
        return self.summary is not None or self._error is not None

    def stop(self) -> None:
        """End a background run where it is (the summary says `stopped`)."""
        self._stop.set()

    def wait(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Wait for the schedule to end; its summary. Raises what the run raised,
        or TimeoutError."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise TimeoutError(f"the churn schedule is still running after {timeout_s} s")
        if self._error is not None:
            raise self._error
        assert self.summary is not None
        return self.summary

    @property
    def failed_checks(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if not c["ok"]]


def apply_churn(
    wan: Wan,
    churn: Schedule | str | Path,
    *,
    command: str | Sequence[str],
    seed: int = 1,
    settle_s: float = 10.0,
    settle_wait_max_s: float = 120.0,
    check: Check = None,
    check_on: Literal["root", "members"] = "root",
    check_timeout_s: float = 60.0,
    leave: str | Sequence[str] = "SIGTERM",
    leave_grace_s: float = 10.0,
    label: str = "program",
    env: dict[str, str] | None = None,
    trace_down: Literal["leave", "crash"] = "leave",
    on_event: Callable[[dict[str, Any]], None] | None = None,
    background: bool = False,
    fidelity: bool = False,
    folder: Path | None = None,
) -> ChurnRun:
    """Apply a churn script or trace to `command` on the WAN's hosts (module header).

    command: what a join starts on a host, with the placeholders of Wan.popen
        ({ip}, {peers}, {name}, ...).
    settle_s: this long without events is a quiet period: then `check` runs.
    settle_wait_max_s: how long past its planned time a check may wait for
        leaves in progress and settle_s of quiet after them (the rest of the
        script moves by the wait; docs/churn.md, strict checks).
    check: a command (its exit status is the verdict; it may use {members},
        {member_ips}, {t} and {run}, and on hosts the host placeholders too) or
        a callable taking {t, members, member_ips, quiet_s, settled} and
        returning a truth value (None counts as a pass).
    check_on: "root" runs a check command once, in the testbed's namespace;
        "members" on every host that should be up, in its own (all must pass).
    leave: a signal name, or a command run on the host to make it leave.
    leave_grace_s: how long a leaving program may take before it is killed
        (counted in the summary's `leaves_abrupt`).
    on_event: called with each applied action and each check, as they happen.
    background: return at once; the handle's wait() gives the summary.
    fidelity: sample the WAN's delivered RTT while the schedule runs
        (summary `wan_fidelity`).
    folder: where its files go (default <run>/churn, or churn-2, ...).

    The programs it started keep running after the schedule's end, until the
    network is closed. Raises InputError for a bad script, command or option,
    before anything is applied.
    """
    _check_options(settle_s, check_timeout_s, leave_grace_s, check_on, label)
    if not (isinstance(settle_wait_max_s, int | float) and 0 <= settle_wait_max_s < math.inf):
        raise InputError(
            f"settle_wait_max_s: expected a number of seconds >= 0, not {settle_wait_max_s!r}"
        )
    if not (isinstance(command, str) and command.strip()) and not (
        not isinstance(command, str) and list(command)
    ):
        raise InputError("command: give the command a join starts on a host", source="<churn>")
    for host in wan.hosts:  # placeholders and the program, on every host, before anything
        wan.command_argv(host, command)
    if isinstance(leave, str) and _signal_of(leave) is None and not leave.strip():
        raise InputError("leave: a signal name or a command", source="<churn>")
    if check is not None and not callable(check):
        _check_command(wan, check, check_on)
    schedule = load_schedule(wan, churn, seed=seed, trace_down=trace_down)
    for event in schedule.events:
        if event.verb == "flood" and "port" not in event.params:
            raise InputError(
                "`flood` on a program needs its port: `... at N/s port P` (the testbed's own "
                "peers have theirs)",
                source=schedule.source,
                line=event.line,
            )
    if folder is None:
        folder = _folder(wan.run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(
        folder / "options.json",
        {
            "command": command if isinstance(command, str) else list(command),
            "seed": seed,
            "settle_s": settle_s,
            "settle_wait_max_s": settle_wait_max_s,
            "check": check if isinstance(check, str) else (None if check is None else repr(check)),
            "check_on": check_on,
            "leave": leave if isinstance(leave, str) else list(leave),
            "leave_grace_s": leave_grace_s,
            "source": schedule.source,
        },
    )
    (folder / "schedule.jsonl").write_text(schedule.to_jsonl())

    def run(handle: ChurnRun) -> dict[str, Any]:
        return _run(
            wan, handle, command=command, settle_s=settle_s,
            settle_wait_max_s=settle_wait_max_s, check=check,
            check_on=check_on, check_timeout_s=check_timeout_s, leave=leave,
            leave_grace_s=leave_grace_s, label=label, env=env, on_event=on_event,
            fidelity=fidelity,
        )  # fmt: skip

    handle = ChurnRun(folder, schedule, run)
    if background:
        handle._start()
    else:
        handle._execute()
    return handle


def _check_options(
    settle_s: float,
    check_timeout_s: float,
    leave_grace_s: float,
    check_on: str,
    label: str,
) -> None:
    for name, value in (
        ("settle_s", settle_s),
        ("check_timeout_s", check_timeout_s),
        ("leave_grace_s", leave_grace_s),
    ):
        if not isinstance(value, int | float) or not (math.isfinite(value) and value > 0):
            raise InputError(f"{name}: expected a positive number of seconds, not {value!r}")
    if check_on not in ("root", "members"):
        raise InputError(f"check_on: expected 'root' or 'members', not {check_on!r}")
    if not label or "/" in label or label.startswith("."):
        raise InputError(f"label: expected a file name for the program's output, not {label!r}")


def _check_values(wan: Wan, members: Sequence[str], t: float) -> dict[str, str]:
    return {
        "members": ",".join(members),
        "member_ips": ",".join(wan.host(m).ip for m in members),
        "t": f"{t:g}",
        "run": str(wan.run_dir.resolve()),
    }


def _substitute(
    command: str | Sequence[str], values: dict[str, str], *, on_hosts: bool
) -> list[str]:
    """{members}, {member_ips}, {t} and {run} substituted. On hosts {run} and the
    other placeholders are left for the host's own ({ip}, {name}, ...: {run} is
    its machine's folder on a network across machines); on the root any other
    is an error."""
    tokens = shlex.split(command) if isinstance(command, str) else list(command)
    if not tokens:
        raise InputError("check: the command is empty", source="<check>")
    out = []
    for token in tokens:
        if on_hosts:
            for key, value in values.items():
                if key == "run":
                    continue
                escaped = value.replace("{", "{{").replace("}", "}}")
                token = token.replace("{" + key + "}", escaped)
            out.append(token)
            continue
        try:
            out.append(token.format_map(values))
        except KeyError as exc:
            raise InputError(
                f"check: unknown placeholder {{{exc.args[0]}}} in {token!r}; a check on the "
                "root may use {members}, {member_ips}, {t} and {run} (check_on='members' "
                "adds the host's own: {ip}, {name}, ...)",
                source="<check>",
            ) from None
        except (ValueError, IndexError) as exc:
            raise InputError(f"check: bad braces in {token!r}: {exc}", source="<check>") from None
    return out


def _check_command(wan: Wan, check: str | Sequence[str], check_on: str) -> None:
    values = _check_values(wan, [h.name for h in wan.hosts], 0.0)
    argv = _substitute(check, values, on_hosts=check_on == "members")
    if check_on == "members":
        for host in wan.hosts:
            wan.command_argv(host, argv)
        return
    check_program(argv[0], "the testbed's namespace (check_on='root')", None)


def _folder(run_dir: Path) -> Path:
    folder, k = run_dir / "churn", 1
    while folder.exists():
        k += 1
        folder = run_dir / f"churn-{k}"
    folder.mkdir(parents=True)
    return folder


def _run(
    wan: Wan,
    handle: ChurnRun,
    *,
    command: str | Sequence[str],
    settle_s: float,
    settle_wait_max_s: float,
    check: Check,
    check_on: str,
    check_timeout_s: float,
    leave: str | Sequence[str],
    leave_grace_s: float,
    label: str,
    env: dict[str, str] | None,
    on_event: Callable[[dict[str, Any]], None] | None,
    fidelity: bool,
) -> dict[str, Any]:
    folder = handle.folder
    applied = JsonLog(folder / "applied.jsonl")
    checks_log = JsonLog(folder / "checks.jsonl")
    engine = ProgramEngine(
        wan,
        command=command,
        label=label,
        env=env,
        leave=leave,
        leave_grace_s=leave_grace_s,
        stop=handle._stop,
        log=applied,
    )
    executor = Executor(
        handle.schedule,
        engine,
        [h.name for h in wan.hosts],
        wan.configured_one_way_ms() / 1e3,
        join=engine.join,
        log=applied,
        on_record=on_event,
        departure_poll_s=POLL_S,
    )
    monitor = wan.monitor_fidelity() if fidelity and len(wan.hosts) > 1 else None
    wall0 = time.monotonic()
    status = "complete"

    def on_quiet(at: Quiet) -> None:
        members = [wan.hosts[h].name for h in sorted(executor.expected)]
        record = _run_check(wan, check, check_on, check_timeout_s, members, at, folder)
        handle.checks.append(record)
        checks_log.write("check", **record)
        if on_event is not None:
            on_event({"verb": "check", **record})

    try:
        executor.run(settle_s, on_quiet, wait_max_s=settle_wait_max_s)
    except _Stopped:
        status = "stopped"
    except BaseException:
        status = "failed"
        raise
    finally:
        summary: dict[str, Any] = {
            "status": status,
            "wall_s": round(time.monotonic() - wall0, 3),
            "source": handle.schedule.source,
            **executor.summary(),
            "programs_started": engine.started,
            "leaves_abrupt": len(engine.abrupt),
            "absent": engine.absent,
            "checks": len(handle.checks),
            "checks_failed": sum(1 for c in handle.checks if not c["ok"]),
            "members_final": sorted(wan.hosts[h].name for h in executor.expected),
            "floods": engine.flood_reports(),
            "folder": str(folder),
        }
        if monitor is not None:
            summary["wan_fidelity"] = monitor.close()
        write_json(folder / "summary.json", summary)
        applied.close()
        checks_log.close()
    return summary


def _run_check(
    wan: Wan,
    check: Check,
    check_on: str,
    timeout_s: float,
    members: list[str],
    at: Quiet,
    folder: Path,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "t": at.t,
        "quiet_s": at.quiet_s,
        "settled": at.settled,
        "settle_wait_s": at.settle_wait_s,
        "members": members,
    }
    if check is None:
        return {**record, "ok": True, "ran": False}
    t0 = time.monotonic()
    # What the programs wrote under {run} on other machines, here (and, for a check
    # on the members, on every machine) before the check looks.
    gathered = wan.gather_files(spread=check_on == "members")
    if gathered:
        record["files_gathered"] = gathered
    values = _check_values(wan, members, at.t)
    if callable(check) and not isinstance(check, str):
        try:
            verdict = check({**record, "member_ips": values["member_ips"].split(",")})
            ok, error = verdict is None or bool(verdict), None
        except Exception as exc:  # the user's check failed: a failed check, with why
            ok, error = False, f"{type(exc).__name__}: {exc}"
        out = {**record, "ok": ok, "ran": True}
        if error is not None:
            out["error"] = error
        out["check_s"] = round(time.monotonic() - t0, 3)
        return out
    argv = _substitute(check, values, on_hosts=check_on == "members")
    if check_on == "members":
        if not members:
            return {**record, "ok": True, "ran": False, "why": "no host is up"}
        results = wan.exec(argv, hosts=members, timeout_s=timeout_s, label="check")
        failed = [r for r in results if r.returncode != 0]
        return {
            **record,
            "ok": not failed,
            "ran": True,
            "check_s": round(time.monotonic() - t0, 3),
            "failed": [
                {
                    "host": r.host.name,
                    "status": "timed out" if r.timed_out else status_words(r.returncode),
                    "stdout": r.stdout()[-CHECK_TAIL_CHARS:],
                    "stderr": r.stderr()[-CHECK_TAIL_CHARS:],
                }
                for r in failed
            ],
        }
    try:
        done = subprocess.run(
            [str(a) for a in argv],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        code: int | None = done.returncode
        stdout, stderr = done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code = None
        raw = exc.stdout or ""
        stdout = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        stderr = f"timed out after {timeout_s} s"
    except OSError as exc:
        raise EmulationError(f"cannot run the check {argv[0]!r}: {exc}") from None
    return {
        **record,
        "ok": code == 0,
        "ran": True,
        "status": status_words(code) if code is not None else "timed out",
        "check_s": round(time.monotonic() - t0, 3),
        "stdout": stdout[-CHECK_TAIL_CHARS:],
        "stderr": stderr[-CHECK_TAIL_CHARS:],
    }
