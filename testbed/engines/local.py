# Real peer processes on the loopback interface, without namespaces or root:
# for the fuzzer, the runtime's tests and quick experiments on one machine.

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Self

from node.config import config_to_dict
from node.control import request_when_up
from node.peer import NodeConfig
from testbed.net import nsenter_argv
from testbed.runs import write_json

__all__ = ["LocalPeer", "free_udp_port"]


# Ports handed out by this process (a peer binds its port a moment after it is chosen).
_handed_out: set[int] = set()
# Below Linux's ephemeral range (32768-60999 by default): a port the kernel lends to some
# process's outgoing socket between our check and the peer's bind was a test flake
# ("Address already in use"); ports here are only taken by explicit binds.
PORT_RANGE = (20_000, 32_767)


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 that nobody uses right now, outside the ephemeral range,
    not handed out before by this process."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randint(*PORT_RANGE)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise OSError(f"no free UDP port in {PORT_RANGE[0]}..{PORT_RANGE[1]} on 127.0.0.1")


class LocalPeer:
    """`python -m node` on 127.0.0.1 with its log and control socket in `folder`.

    Use as a context manager: the process is stopped (SIGTERM, then SIGKILL) on exit.
    """

    def __init__(
        self,
        folder: Path,
        name: str,
        config: NodeConfig,
        point: tuple[float, ...],
        *,
        join: list[tuple[str, int]] | None = None,
        seed: int = 0,
        netns: str | None = None,
        address: tuple[str, int] | None = None,
    ) -> None:
        """netns and address: run it in that network namespace, bound there (an
        emulated host: testbed/tools/ipfuzz.py)."""
        folder.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.address = address if address is not None else ("127.0.0.1", free_udp_port())
        self.control = str(folder / f"{name}.ctl")
        self.log = folder / f"{name}.jsonl"
        config_path = folder / f"{name}.json"
        write_json(config_path, config_to_dict(config))
        argv = [
            *([] if netns is None else nsenter_argv(netns)),
            sys.executable, "-m", "node",
            "--name", name,
            "--bind", f"{self.address[0]}:{self.address[1]}",
            "--config", str(config_path),
            "--point", ",".join(repr(float(x)) for x in point),
            "--seed", str(seed),
            "--log", str(self.log),
            "--control", self.control,
        ]  # fmt: skip
        if join is not None:
            argv += ["--join", ",".join(f"{h}:{p}" for h, p in join)]
        self.stderr_path = folder / f"{name}.err"
        with self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=err)

    def ask(self, op: str, *, wait_s: float = 15.0, **fields: Any) -> dict[str, Any]:
        """A control request, waiting up to wait_s for a peer that is still starting."""
        running = lambda: self.process.poll() is None  # noqa: E731
        return request_when_up(self.control, op, running=running, wait_s=wait_s, **fields)

    def wait_status(self, status: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while (current := self.ask("status")["status"]) != status:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name} is {current!r}, not {status!r}, after {timeout_s} s"
                )
            time.sleep(0.1)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self.stop()
