# The programs a WAN runs on its hosts: starting them, signalling them (crash,
# freeze, thaw, restart, leave), noticing when they end, and a report of those
# that failed.
#
# Theory of operation
#   Every process the testbed starts on a host (Wan.popen, hence exec and the
#   churn of any program) is a HostProcess: its own session, so a signal to
#   its process group reaches whatever it forked, and its output in
#   <run>/hosts/<host>/<label>.out/.err. A reaper thread polls them (every
#   REAP_INTERVAL_S) and writes `process.exit` to testbed.log as each ends,
#   with its status and its cause: `exited` when it ended by itself, else what
#   the testbed did to it (crash, restart, leave, timeout, teardown). The
#   report (process_report) reads only the run folder, so it works on a
#   folder whose run was killed as well as from a test's failure hook: every
#   process that exited by itself with a non-zero status, or was still
#   running, with the tail of its output.
#
#   A command whose program does not exist fails at once (the namespaces share
#   the file system, so the PATH lookup here is the one nsenter would make)
#   instead of starting a process that dies with "No such file".

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.errors import ControlError, EmulationError, InputError
from testbed.net._host import EmuHost
from testbed.runs import JsonLog

__all__ = [
    "ExecResult",
    "HostProcess",
    "Programs",
    "check_program",
    "process_report",
    "status_words",
]

REAP_INTERVAL_S = 0.2
REPORT_TAIL_LINES = 12


class HostProcess:
    """A process the testbed started on a host; its output goes to the run folder.

    Attributes:
        host: where it runs.
        argv: what it runs (placeholders substituted).
        label: its name in the run folder (<label>.out, <label>.err).
        frozen: stopped by freeze() until thaw().
        cause: why it ended, once it has: "exited" (by itself), or what the
            testbed did: "crash", "restart", "leave", "timeout", "teardown".
    """

    def __init__(
        self,
        host: EmuHost,
        popen: subprocess.Popen[bytes],
        stdout_path: Path,
        stderr_path: Path,
        *,
        argv: Sequence[str] = (),
        label: str = "cmd",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.popen = popen
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self.argv = list(argv)
        self.label = label
        self.env = env
        self.started = time.monotonic()
        self.frozen = False
        self.cause: str | None = None
        self._signalled: str | None = None  # what the testbed did, if anything
        self._logged = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout_s: float | None = None) -> int:
        return self.popen.wait(timeout_s)

    def signal(self, sig: int, why: str | None = None) -> None:
        """Send `sig` to its process group; `why` becomes its cause if it ends."""
        if why is not None:
            self._signalled = why
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)

    def terminate(self, grace_s: float = 2.0, why: str = "teardown") -> int | None:
        """SIGTERM its process group, then SIGKILL after grace_s. Returns the exit code."""
        if self.popen.poll() is None:
            if self.frozen:
                self.signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            self.signal(signal.SIGTERM, why)
            try:
                self.popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL, why)
                self.popen.wait()
        return self.popen.returncode

    def kill(self, why: str) -> int:
        """SIGKILL its process group and wait for it."""
        if self.popen.poll() is None:
            self.signal(signal.SIGKILL, why)
        return self.popen.wait()


@dataclass(frozen=True, slots=True)
class ExecResult:
    host: EmuHost
    returncode: int | None  # None if it was killed at the timeout
    duration_s: float
    stdout_path: Path
    stderr_path: Path
    timed_out: bool

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def status_words(returncode: int | None) -> str:
    """ "exit 2", "killed by SIGKILL", "running"."""
    if returncode is None:
        return "running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit {returncode}"


class Programs:
    """The processes a WAN started: start, signal, reap (see the header)."""

    def __init__(self, run_dir: Path, log: JsonLog, on_start: Callable[[int], None]) -> None:
        self.run_dir = run_dir
        self._log = log
        self._on_start = on_start  # records the pid for `testbed clean`
        self.processes: list[HostProcess] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None

    # -- starting ------------------------------------------------------------------------------

    def start(
        self,
        host: EmuHost,
        argv: Sequence[str],
        out_path: Path,
        err_path: Path,
        *,
        label: str,
        env: Mapping[str, str] | None = None,
    ) -> HostProcess:
        """Start argv on `host`. Raises InputError when its program does not exist."""
        process = self._launch(host, argv, out_path, err_path, label=label, env=env)
        with self._lock:
            self.processes.append(process)
        self._log.write(
            "process.start",
            host=host.name,
            pid=process.pid,
            argv=list(argv),
            label=label,
            out=_relative(out_path, self.run_dir),
            err=_relative(err_path, self.run_dir),
        )
        self._start_reaper()
        return process

    def _launch(
        self,
        host: EmuHost,
        argv: Sequence[str],
        out_path: Path,
        err_path: Path,
        *,
        label: str,
        env: Mapping[str, str] | None,
    ) -> HostProcess:
        """The process itself, in the host's namespace on this machine."""
        full_env = None if env is None else {**os.environ, **env}
        check_program(argv[0], host.name, (full_env or os.environ).get("PATH"), root=host.root)
        with out_path.open("wb") as out, err_path.open("wb") as err:
            try:
                popen = subprocess.Popen(
                    host.argv(list(argv)),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=full_env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise EmulationError(f"cannot start {argv[0]!r} on {host.name}: {exc}") from None
        self._on_start(popen.pid)
        return HostProcess(host, popen, out_path, err_path, argv=argv, label=label, env=env)

    # -- what runs where -------------------------------------------------------------------------

    def running(self, host: EmuHost) -> list[HostProcess]:
        with self._lock:
            return [p for p in self.processes if p.host is host and p.poll() is None]

    def _chosen(self, op: str, host: EmuHost) -> list[HostProcess]:
        running = self.running(host)
        if not running:
            raise ControlError(
                op, f"nothing the testbed started is running on {host.name}", field="host"
            )
        return running

    # -- what the churn verbs do to a host's programs ------------------------------------------------

    def crash(self, host: EmuHost) -> list[HostProcess]:
        """SIGKILL every program running on `host` (their process groups) and wait for them."""
        victims = self._chosen("crash", host)
        for process in victims:
            process.kill("crash")
            self.reap(process)
        self._log.write("host.crash", host=host.name, pids=[p.pid for p in victims])
        return victims

    def freeze(self, host: EmuHost) -> list[HostProcess]:
        """SIGSTOP every program running on `host`."""
        victims = self._chosen("freeze", host)
        if all(p.frozen for p in victims):
            raise ControlError("freeze", f"{host.name} is frozen already", field="host")
        for process in victims:
            process.signal(signal.SIGSTOP)
            process.frozen = True
        self._log.write("host.freeze", host=host.name, pids=[p.pid for p in victims])
        return victims

    def thaw(self, host: EmuHost) -> list[HostProcess]:
        """SIGCONT the programs freeze() stopped on `host`."""
        victims = [p for p in self.running(host) if p.frozen]
        if not victims:
            raise ControlError("thaw", f"{host.name} is not frozen", field="host")
        for process in victims:
            process.signal(signal.SIGCONT)
            process.frozen = False
        self._log.write("host.thaw", host=host.name, pids=[p.pid for p in victims])
        return victims

    def restart(
        self, host: EmuHost, fresh: Callable[[str], tuple[Path, Path]]
    ) -> list[HostProcess]:
        """Kill every program running on `host` and start each again, as it was
        started (same argv, label and environment; new output files from `fresh`)."""
        victims = self._chosen("restart", host)
        for process in victims:
            process.kill("restart")
            self.reap(process)
        started = []
        for process in victims:
            out, err = fresh(process.label)
            started.append(
                self.start(host, process.argv, out, err, label=process.label, env=process.env)
            )
        self._log.write(
            "host.restart",
            host=host.name,
            pids=[p.pid for p in victims],
            new_pids=[p.pid for p in started],
        )
        return started

    # -- ends ----------------------------------------------------------------------------------------

    def reap(self, process: HostProcess, *, cause: str | None = None, **extra: Any) -> bool:
        """Log `process.exit` once, if it has ended; whether it has."""
        code = process.poll()
        if code is None:
            return False
        with self._lock:
            if process._logged:
                return True
            process._logged = True
        process.cause = cause or process._signalled or "exited"
        self._log.write(
            "process.exit",
            host=process.host.name,
            pid=process.pid,
            label=process.label,
            returncode=code,
            status=status_words(code),
            cause=process.cause,
            ran_s=round(time.monotonic() - process.started, 3),
            **extra,
        )
        return True

    def _start_reaper(self) -> None:
        if self._reaper is None and not self._stop.is_set():
            self._reaper = threading.Thread(target=self._reap_loop, name="wan-reaper", daemon=True)
            self._reaper.start()

    def _reap_loop(self) -> None:
        while not self._stop.wait(REAP_INTERVAL_S):
            with self._lock:
                pending = [p for p in self.processes if not p._logged]
            for process in pending:
                self.reap(process)

    def stop_all(self, grace_s: float) -> list[str]:
        """Teardown: stop the reaper, then every program still running. Returns problems."""
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join()
        problems = []
        for process in self.processes:
            try:
                process.terminate(grace_s=grace_s, why="teardown")
            except OSError as exc:
                problems.append(f"stopping pid {process.pid}: {exc}")
            self.reap(process)
        return problems


# Where a container's programs are looked for besides the caller's PATH.
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def check_program(program: str, host: str, path: str | None, *, root: Path = Path("/")) -> None:
    """InputError unless `program` exists as `host` sees it (its file system at `root`)."""
    inside = root != Path("/")
    if path is None:
        path = os.environ.get("PATH", os.defpath)
    if "/" in program:
        seen = root / program.lstrip("/") if program.startswith("/") else Path(program)
        if not seen.is_file():
            where = " in its container" if inside else ""
            raise InputError(
                f"cannot start {program!r} on {host}: no such file{where}", source="<command>"
            )
        if not os.access(seen, os.X_OK):
            raise InputError(
                f"cannot start {program!r} on {host}: not executable", source="<command>"
            )
        return
    dirs = (path or "").split(os.pathsep) + (CONTAINER_PATH.split(":") if inside else [])
    for folder in filter(None, dirs):
        candidate = (root / folder.lstrip("/")) / program if inside else Path(folder) / program
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return
    where = "in its container's PATH" if inside else f"on the PATH ({path or ''})"
    raise InputError(
        f"cannot start {program!r} on {host}: no such program {where}", source="<command>"
    )


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


# -- the report of a run's failed programs ----------------------------------------------------------


@dataclass(frozen=True)
class _Seen:
    host: str
    pid: int
    label: str
    argv: list[str]
    out: Path | None
    err: Path | None
    status: str
    cause: str


def _processes_of(run_dir: Path) -> list[_Seen]:
    """Every process the run's testbed.log files (the run's and its WAN's) record."""
    seen: dict[tuple[Path, int], dict[str, Any]] = {}
    for log in sorted({run_dir / "testbed.log", *run_dir.glob("*/testbed.log")}):
        if not log.is_file():
            continue
        base = log.parent
        for line in log.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill
            kind, pid = record.get("kind"), record.get("pid")
            if kind == "process.start" and "err" in record:
                seen[(base, pid)] = {**record, "base": base, "status": "running", "cause": ""}
            elif kind == "process.exit" and (base, pid) in seen:
                entry = seen[(base, pid)]
                entry["status"] = record.get("status") or status_words(record.get("returncode"))
                entry["cause"] = record.get("cause", "exited")
                entry["returncode"] = record.get("returncode")
    out = []
    for entry in seen.values():
        base = entry["base"]
        out.append(
            _Seen(
                entry.get("host", "?"),
                int(entry["pid"]),
                entry.get("label", ""),
                list(entry.get("argv", [])),
                base / entry["out"] if entry.get("out") else None,
                base / entry["err"] if entry.get("err") else None,
                entry["status"],
                entry["cause"],
            )
        )
    return out


def _tail(path: Path | None, lines: int) -> list[str]:
    if path is None:
        return []
    try:
        with path.open("rb") as stream:
            stream.seek(0, os.SEEK_END)
            size = stream.tell()
            stream.seek(max(0, size - 64 * 1024))
            text = stream.read().decode(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def process_report(run_dir: str | Path, *, lines: int = REPORT_TAIL_LINES, limit: int = 10) -> str:
    """The run folder, then every program that exited by itself with a non-zero
    status or is still running, with the tail of its stderr (or stdout): what a
    failing test or run shows. Empty when the folder records no process."""
    run_dir = Path(run_dir)
    processes = _processes_of(run_dir)
    if not processes:
        return ""
    failed = [p for p in processes if p.cause == "exited" and p.status != "exit 0"]
    running = [p for p in processes if p.status == "running"]
    head = [
        f"run folder: {run_dir}",
        (
            f"{len(processes)} process(es) started; {len(failed)} exited with an error; "
            f"{len(running)} still running"
        ),
    ]
    body: list[str] = []
    for process in (failed + running)[:limit]:
        body.append(
            f"--- {process.host} {process.label} (pid {process.pid}, {process.status}): "
            + " ".join(process.argv)
        )
        for stream, path in (("stderr", process.err), ("stdout", process.out)):
            tail = _tail(path, lines)
            if tail:
                body.append(f"    {stream} ({path}), last {len(tail)} line(s):")
                body.extend("    | " + line for line in tail)
                break
        else:
            body.append("    (no output)")
    shown = len(failed) + len(running)
    if shown > limit:
        body.append(f"... and {shown - limit} more (testbed.log has every process)")
    return "\n".join(head + body)
