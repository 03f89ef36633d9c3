# The testbed's end of the peer zygote (node/zygote.py): peers forked from one pre-loaded parent.
#
# Theory of operation
#   An emulated run with `peers = "fork"` (the default) starts one `python -m node.zygote` in
#   the root namespace at its first peer; every peer is then a fork of it, entered into its
#   host's network namespace, instead of a fresh `python -m node` (about 7 MB of private
#   memory each instead of 28: the code and the imported modules stay shared). A forked peer
#   is not our child, so `ForkedProcess` watches it through a pidfd (readable once it has
#   exited) and asks the zygote, its parent, for its exit status.
#
# Rules
#   1. The zygote and every peer it forks are adopted by the WAN: stopped at teardown,
#      recorded for `testbed clean`, whatever ends the run.
#   2. One request at a time on the zygote's socket (a lock: the engine stops peers from a
#      thread pool).

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from testbed.errors import EmulationError
from testbed.net import EmuHost, Wan

__all__ = ["ForkedProcess", "PeerZygote"]

READY_TIMEOUT_S = 60.0
EXIT_UNKNOWN = 255  # the exit status of a peer whose zygote is gone


class PeerZygote:
    """A running node/zygote.py and the connection to it."""

    def __init__(self, wan: Wan, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._wan = wan
        self._lock = threading.Lock()
        path = folder / "zygote.sock"
        path.unlink(missing_ok=True)
        self._err_path = folder / "zygote.err"
        with self._err_path.open("wb") as err:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "node.zygote", "--socket", str(path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
        wan.adopt(_Zygote(self._proc), None, label="zygote")
        assert self._proc.stdout is not None
        line = (
            self._proc.stdout.readline()
            if _readable(self._proc.stdout.fileno(), READY_TIMEOUT_S)
            else b""
        )
        self._proc.stdout.close()  # it says nothing more
        if line.strip() != b"ready":
            self._proc.kill()
            raise EmulationError(
                f"the peer zygote did not start within {READY_TIMEOUT_S:.0f} s: "
                f"{self._err_path.read_text(errors='replace').strip()[-800:] or 'no message'}"
            )
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(str(path))
        self._replies = self._sock.makefile("rb")

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._sock.sendall(json.dumps(request).encode() + b"\n")
            line = self._replies.readline()
        if not line:
            raise EmulationError(f"the peer zygote (pid {self.pid}) has gone: see {self._err_path}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def spawn(self, host: EmuHost, args: list[str], *, label: str) -> ForkedProcess:
        """Fork a peer (`python -m node` with `args`) into `host`'s namespace."""
        out, err = self._wan.output_paths(host, label)
        reply = self._ask(
            {
                "op": "spawn",
                "argv": args,
                "netns": str(host.netns_path),
                "stdout": str(out),
                "stderr": str(err),
            }
        )
        if "pid" not in reply:
            raise EmulationError(f"cannot fork a peer on {host.name}: {reply.get('error')}")
        process = ForkedProcess(self, host, reply["pid"], out, err)
        self._wan.adopt(process, host, label=label)
        return process

    def status(self, pid: int) -> int:
        """The exit status of a peer that has exited (EXIT_UNKNOWN if the zygote is gone)."""
        try:
            code = self._ask({"op": "status", "pid": pid}).get("code")
        except (OSError, EmulationError):
            return EXIT_UNKNOWN
        return EXIT_UNKNOWN if code is None else int(code)

    def close(self) -> None:
        """Hang up: the zygote exits (its peers are stopped by the WAN)."""
        with contextlib.suppress(OSError):
            self._replies.close()
            self._sock.close()
        try:
            self._proc.wait(5.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


class ForkedProcess:
    """A peer the zygote forked: what HostProcess offers, for a process that is not our child."""

    def __init__(
        self, zygote: PeerZygote, host: EmuHost, pid: int, stdout_path: Path, stderr_path: Path
    ) -> None:
        self.host = host
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self.started = time.monotonic()
        self._zygote = zygote
        self._pid = pid
        self._code: int | None = None
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # it has already ended
            self._pidfd = None

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._code

    def _ended(self, timeout_s: float | None) -> bool:
        if self._pidfd is None:
            return True
        return _readable(self._pidfd, timeout_s)

    def _collect(self) -> int:
        if self._code is None:
            self._code = self._zygote.status(self._pid)
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        return self._code

    def poll(self) -> int | None:
        if self._code is not None:
            return self._code
        return self._collect() if self._ended(0) else None

    def wait(self, timeout_s: float | None = None) -> int:
        if self._code is None and not self._ended(timeout_s):
            raise subprocess.TimeoutExpired(f"pid {self._pid}", timeout_s or 0.0)
        return self._collect()

    def terminate(self, grace_s: float = 2.0) -> int | None:
        """SIGTERM its process group, then SIGKILL after grace_s. Returns the exit code."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._pid, signal.SIGTERM)
            try:
                self.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._pid, signal.SIGKILL)
                self.wait()
        return self._code


def _readable(fd: int, timeout_s: float | None) -> bool:
    """Whether `fd` becomes readable within timeout_s (None: wait for it). poll, not select:
    a run of a thousand hosts holds descriptors above select's limit of 1,024."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout_s is None else max(timeout_s, 0.0) * 1e3))


class _Zygote:
    """The zygote itself, as the WAN stops it at teardown."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    @property
    def pid(self) -> int:
        return self._proc.pid

    def terminate(self, grace_s: float = 2.0) -> int | None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        return self._proc.returncode
