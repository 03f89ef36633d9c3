# Your programs on a network across machines (testbed/net/_sites.py): what
# Wan.popen, exec, crash, freeze, thaw, restart and apply_churn do, with each
# process started and signalled by the agent of its host's machine.
#
# Theory of operation
#   ClusterWan.programs is a RemotePrograms: Programs' own bookkeeping (what
#   runs where, the churn verbs, the reaper, process.start and process.exit in
#   the driver's testbed.log) over RemoteProcess proxies. The driver
#   substitutes the placeholders and names the output files; the agent of the
#   host's machine starts the argv with its own Wan's Programs, which checks
#   that the program exists there, logs in the machine's testbed.log and
#   records the pid for `testbed clean` on that machine.
#
#   Exit statuses come from one poll of every machine at most every POLL_S,
#   shared by all the proxies (a reaper polling 1,000 programs asks each
#   machine once). The programs' output is mirrored as it grows (at every
#   poll that sees a program end, and every OUTPUT_EVERY_S) to
#   <run>/machines/m<k>/hosts/<host>/, the path it has in the machine's
#   folder, where teardown unpacks that folder whole.
#
#   {run} on a host names a folder of its machine, empty at start (files/ in
#   the agent's folder). gather_files copies what the programs wrote there into
#   the driver's run folder, at the same relative paths: before every check and
#   at teardown; before a check on the members it also spreads every machine's
#   files to the others, so a check sees the files of every machine, as on one.
#   A path two machines both wrote keeps the last copy gathered (logged as
#   `files.conflict`); a path of the run folder's own (testbed.log, hosts/,
#   ...) is never overwritten (`files.skipped`).
#
# Rule: the agents' functions (`on_*`) run inside SiteAgent.call and keep their
# processes in the agent's state, by a key of their own (pids are reused).

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.net._host import EmuHost
from testbed.net._programs import HostProcess, Programs
from testbed.runs import JsonLog, Stats, changed_files, read_appended, write_files

__all__ = ["RemoteProcess", "RemotePrograms", "Files"]

POLL_S = 0.2
OUTPUT_EVERY_S = 2.0


# -- on the machine (inside the agent) ------------------------------------------------------------


def _processes(agent: Any) -> dict[int, HostProcess]:
    return agent.state.setdefault("programs", {})


def on_start(
    agent: Any,
    host: int,
    argv: list[str],
    out: str,
    err: str,
    label: str,
    env: dict[str, str] | None,
) -> tuple[int, int]:
    """Start argv on `host` (out, err: paths in the machine's run folder). Returns
    its key and pid."""
    wan = agent.wan
    out_path, err_path = wan.run_dir / out, wan.run_dir / err
    out_path.parent.mkdir(parents=True, exist_ok=True)
    process = wan.programs.start(wan.hosts[host], argv, out_path, err_path, label=label, env=env)
    counter = agent.state.setdefault("program_keys", itertools.count(1))
    key = next(counter)
    _processes(agent)[key] = process
    return key, process.pid


def on_status(agent: Any, keys: list[int]) -> dict[int, int]:
    """The exit status of those of `keys` that have ended."""
    out = {}
    for key in keys:
        code = _processes(agent)[key].poll()
        if code is not None:
            out[key] = code
    return out


def on_signal(agent: Any, key: int, sig: int, why: str | None) -> None:
    _processes(agent)[key].signal(sig, why)


def on_kill(agent: Any, key: int, why: str) -> tuple[int, str | None]:
    process = _processes(agent)[key]
    return process.kill(why), process._signalled


def on_terminate(
    agent: Any, key: int, grace_s: float, why: str, frozen: bool
) -> tuple[int | None, str | None]:
    process = _processes(agent)[key]
    process.frozen = frozen  # a stopped process is continued first
    return process.terminate(grace_s=grace_s, why=why), process._signalled


def on_wait(agent: Any, key: int, timeout_s: float | None) -> int | None:
    """Its exit status, or None if it still runs after timeout_s."""
    try:
        return _processes(agent)[key].wait(timeout_s)
    except subprocess.TimeoutExpired:
        return None


def on_run(
    agent: Any, host: int, argv: list[str], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    return agent.wan.run(agent.wan.hosts[host], argv, timeout_s=timeout_s)  # type: ignore[no-any-return]


def on_set_access(agent: Any, names: list[str], link: dict[str, Any]) -> int:
    """Shape the access links of these hosts of this machine (Wan.set_access)."""
    return agent.wan.set_access(names, **link)  # type: ignore[no-any-return]


def on_spoofed(agent: Any) -> int:
    return agent.wan.spoofed()  # type: ignore[no-any-return]


def on_read_outputs(agent: Any, offsets: dict[str, int]) -> dict[str, bytes]:
    """What the programs' output files hold past `offsets` (paths under hosts/)."""
    return read_appended(agent.wan.run_dir / "hosts", "*/*", offsets, whole_lines=False)


def on_changed_files(agent: Any, known: Stats) -> tuple[dict[str, bytes], Stats]:
    """The files under {run} of this machine that are not as `known`."""
    return changed_files(agent.files, known)


def on_put_files(agent: Any, files: dict[str, bytes]) -> Stats:
    return write_files(agent.files, files)


# -- on the driver ----------------------------------------------------------------------------------


class RemoteProcess(HostProcess):
    """A program on another machine's host, with what the testbed does to a local one."""

    def __init__(
        self,
        owner: RemotePrograms,
        machine: int,
        key: int,
        pid: int,
        host: EmuHost,
        out_path: Path,
        err_path: Path,
        *,
        argv: Sequence[str],
        label: str,
        env: Mapping[str, str] | None,
    ) -> None:
        super().__init__(host, None, out_path, err_path, argv=argv, label=label, env=env)  # type: ignore[arg-type]
        self._owner = owner
        self.machine = machine
        self.key = key
        self._pid = pid  # on its machine
        self.returncode: int | None = None
        self.mirrored = False  # its output copied here after it ended

    @property
    def pid(self) -> int:
        return self._pid

    def _call(self, fn: Any, *args: Any) -> Any:
        return self._owner.call(self.machine, fn, self.key, *args)

    def poll(self) -> int | None:
        return self._owner.status(self)

    def wait(self, timeout_s: float | None = None) -> int:
        if self.returncode is None:
            code = self._call(on_wait, timeout_s)
            if code is None:
                raise subprocess.TimeoutExpired(self.argv, timeout_s or 0.0)
            self.returncode = code
        return self.returncode

    def signal(self, sig: int, why: str | None = None) -> None:
        if why is not None:
            self._signalled = why
        if self.returncode is None:
            self._call(on_signal, int(sig), why)

    def terminate(self, grace_s: float = 2.0, why: str = "teardown") -> int | None:
        if self.returncode is None:
            self.returncode, signalled = self._call(on_terminate, grace_s, why, self.frozen)
            self._signalled = signalled or self._signalled
        return self.returncode

    def kill(self, why: str) -> int:
        if self.returncode is None:
            self.returncode, signalled = self._call(on_kill, why)
            self._signalled = signalled or self._signalled
        return self.returncode


class RemotePrograms(Programs):
    """Programs whose processes run on the machines of a ClusterWan (see the header)."""

    def __init__(self, cwan: Any, run_dir: Path, log: JsonLog) -> None:
        # A machine's own record holds its pids (`testbed clean --cluster`).
        super().__init__(run_dir, log, on_start=lambda pid: None)
        self.cwan = cwan
        self._poll_lock = threading.Lock()
        self._polled = 0.0
        self._output_lock = threading.Lock()
        self._offsets: list[dict[str, int]] = [{} for _ in cwan.agents]
        self._mirrored = 0.0

    def call(self, machine: int, fn: Any, *args: Any) -> Any:
        return self.cwan.on_machines(fn, {machine: args})[machine]

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
        machine = self.cwan.site_of[host.index]
        root = self.cwan.machine_dir(machine)
        for path in (out_path, err_path):  # so that the next name chosen here is another
            path.touch()
        key, pid = self.call(
            machine, on_start, host.index, list(argv),
            out_path.relative_to(root).as_posix(), err_path.relative_to(root).as_posix(),
            label, None if env is None else dict(env),
        )  # fmt: skip
        return RemoteProcess(
            self, machine, key, pid, host, out_path, err_path, argv=argv, label=label, env=env
        )

    def status(self, process: RemoteProcess) -> int | None:
        """The process's exit status, from a poll of every machine at most every POLL_S."""
        if process.returncode is None:
            with self._poll_lock:
                if time.monotonic() - self._polled >= POLL_S:
                    self._poll()
                    self._polled = time.monotonic()
        return process.returncode

    def _poll(self) -> None:
        # A copy without the lock: Programs.running polls while it holds it.
        running = [p for p in list(self.processes) if isinstance(p, RemoteProcess)]
        pending: dict[int, dict[int, RemoteProcess]] = {}
        for process in running:
            if process.returncode is None:
                pending.setdefault(process.machine, {})[process.key] = process
        answers = self.cwan.on_machines(
            on_status, {k: (list(keys),) for k, keys in pending.items()}
        )
        ended = False
        for k, answer in answers.items():
            for key, code in answer.items():
                pending[k][key].returncode = code
                ended = True
        if ended or time.monotonic() - self._mirrored >= OUTPUT_EVERY_S:
            self.mirror_outputs()

    def mirror_outputs(self) -> None:
        """Append what every machine's program output gained to its copy here."""
        with self._output_lock:
            ended = [
                p
                for p in list(self.processes)
                if isinstance(p, RemoteProcess) and p.returncode is not None
            ]
            offsets = {k: (dict(mine),) for k, mine in enumerate(self._offsets)}
            for k, answer in self.cwan.on_machines(on_read_outputs, offsets).items():
                folder = self.cwan.machine_dir(k) / "hosts"
                for name, data in answer.items():
                    target = folder / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with target.open("ab") as copy:
                        copy.write(data)
                    self._offsets[k][name] = self._offsets[k].get(name, 0) + len(data)
            for process in ended:
                process.mirrored = True
            self._mirrored = time.monotonic()

    def reap(self, process: HostProcess, *, cause: str | None = None, **extra: Any) -> bool:
        """Programs.reap, once the ended program's output is all here."""
        ended = isinstance(process, RemoteProcess) and process.poll() is not None
        if ended and not process.mirrored:  # type: ignore[attr-defined]
            self.mirror_outputs()
        return super().reap(process, cause=cause, **extra)


class Files:
    """{run} of every machine, gathered into the driver's run folder (see the header)."""

    def __init__(self, cwan: Any, run_dir: Path, log: JsonLog) -> None:
        self.cwan = cwan
        self.run_dir = run_dir
        self._log = log
        self._known: list[Stats] = [{} for _ in cwan.agents]  # what each machine holds
        self._origin: dict[str, tuple[int, tuple[int, int]]] = {}  # path -> whose copy is here
        self._given: list[Stats] = [{} for _ in cwan.agents]  # the versions spread to each
        self._lock = threading.Lock()

    def gather(self, *, spread: bool = False) -> int:
        """Copy what changed on the machines here; with spread, every machine's files
        to the others too. Returns how many files were copied here."""
        with self._lock:
            known = {k: (dict(mine),) for k, mine in enumerate(self._known)}
            answers = self.cwan.on_machines(on_changed_files, known)
            copied = 0
            for k, (changed, stats) in answers.items():
                self._known[k] = stats
                for name, data in changed.items():
                    origin = self._origin.get(name)
                    if origin is None and (self.run_dir / name).exists():
                        self._log.write("files.skipped", path=name, machine=k + 1,
                                        why="the run folder's own file")  # fmt: skip
                        continue
                    if origin is not None and origin[0] != k:
                        self._log.write(
                            "files.conflict", path=name, machines=[origin[0] + 1, k + 1]
                        )
                    write_files(self.run_dir, {name: data})
                    self._origin[name] = (k, stats[name])
                    copied += 1
            if spread and len(self._known) > 1:
                self._spread()
            if copied:
                self._log.write("files.gathered", files=copied, spread=spread)
            return copied

    def _spread(self) -> None:
        given: dict[int, tuple[dict[str, bytes]]] = {}
        for k in range(len(self._given)):
            theirs = [
                name
                for name, (origin, version) in self._origin.items()
                if origin != k and self._given[k].get(name) != version
            ]
            if theirs:
                given[k] = ({name: (self.run_dir / name).read_bytes() for name in theirs},)
        for k, stats in self.cwan.on_machines(on_put_files, given).items():
            for name in given[k][0]:
                self._given[k][name] = self._origin[name][1]
                self._known[k][name] = stats[name]
