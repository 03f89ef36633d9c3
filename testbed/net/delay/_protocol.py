# The delay engine's control protocol: JSON lines over a Unix stream socket.
#
# A request is one JSON object per line, {"op": <name>, <arguments>...}; the
# answer is one line, {"ok": true, "result": ...} or {"ok": false, "error":
# <message>, "op": <name>, "field": <argument or null>}. Requests on one
# connection are answered in order. A rejected request changes nothing.
#
# Units on the wire: host indices 0..n-1, one-way delays in seconds, rates as
# probabilities. Friendlier units (host names, RTT in ms) live in the Python
# API above this (testbed.net.Wan).
#
# This module is shared by the engine (server) and its clients. Matrices are
# numpy arrays (the engine's link model needs numpy anyway): at 5,000 hosts a
# list of lists of floats would be 800 MB and seconds of looping.

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike

from testbed.errors import ControlError

__all__ = ["EngineClient", "read_delay_file", "write_delay_file"]

# Largest control request or answer line we accept (counters travel sparse,
# only the pairs that carried traffic; matrices travel as files, not inline).
MAX_LINE_BYTES = 64 << 20


def write_delay_file(path: str | Path, one_way_s: ArrayLike) -> None:
    """Write an n x n one-way delay matrix (seconds) as raw little-endian float64."""
    matrix = np.asarray(one_way_s, dtype="<f8")
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"matrix is not square: shape {matrix.shape}")
    Path(path).write_bytes(matrix.tobytes())


def read_delay_file(path: str | Path, n: int) -> np.ndarray:
    """Read what write_delay_file wrote (n x n float64); the file must hold exactly n x n values."""
    data = Path(path).read_bytes()
    if len(data) != n * n * 8:
        raise ControlError(
            "load_matrix", f"{path} holds {len(data) // 8} values; expected {n} x {n}", field="path"
        )
    return np.frombuffer(data, dtype="<f8").astype(np.float64).reshape(n, n)


class EngineClient:
    """A connection to a running delay engine's control socket.

    Every method sends one request and waits for its answer. A rejected
    request raises ControlError (with .op and .field) and changed nothing.
    Threads may share a client (a churn schedule applied in the background
    beside the user's own calls): one request at a time goes over the socket.
    """

    def __init__(self, path: str | Path, *, timeout_s: float = 10.0) -> None:
        self.path = str(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        try:
            self._sock.connect(self.path)
        except OSError:
            self._sock.close()
            raise
        self._buf = b""
        self._lock = threading.Lock()

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, op: str, **args: Any) -> Any:
        """Send {"op": op, **args}; return the result or raise ControlError."""
        with self._lock:
            return self._call(op, args)

    def _call(self, op: str, args: dict[str, Any]) -> Any:
        self._sock.sendall(json.dumps({"op": op, **args}, separators=(",", ":")).encode() + b"\n")
        while b"\n" not in self._buf:
            chunk = self._sock.recv(1 << 20)
            if not chunk:
                raise ControlError(
                    op, "the delay engine closed the control connection (did it exit?)"
                )
            self._buf += chunk
            if len(self._buf) > MAX_LINE_BYTES:
                raise ControlError(op, "answer too large")
        line, _, self._buf = self._buf.partition(b"\n")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise ControlError(
                answer.get("op") or op, answer.get("error", "rejected"), field=answer.get("field")
            )
        return answer.get("result")

    # Thin wrappers, one per operation, so that callers get argument names checked by Python.

    def ping(self) -> dict[str, Any]:
        return self.call("ping")

    def stats(self) -> dict[str, Any]:
        return self.call("stats")

    def counters(self, *, reset: bool = False) -> dict[str, list[list[int]]]:
        return self.call("counters", reset=reset)

    def set_delay(
        self,
        one_way_s: float,
        src: list[int] | None = None,
        dst: list[int] | None = None,
        *,
        clamp: bool = False,
    ) -> dict[str, Any]:
        return self.call("set_delay", one_way_s=one_way_s, src=src, dst=dst, clamp=clamp)

    def scale(self, factor: float, *, clamp: bool = False) -> dict[str, Any]:
        return self.call("scale", factor=factor, clamp=clamp)

    def load_matrix(self, path: str | Path, *, clamp: bool = False) -> dict[str, Any]:
        return self.call("load_matrix", path=str(path), clamp=clamp)

    def set_loss(
        self, rate: float, src: list[int] | None = None, dst: list[int] | None = None
    ) -> dict[str, Any]:
        return self.call("set_loss", rate=rate, src=src, dst=dst)

    def set_jitter(
        self,
        jitter: dict[str, Any] | None,
        src: list[int] | None = None,
        dst: list[int] | None = None,
    ) -> dict[str, Any]:
        return self.call("set_jitter", jitter=jitter, src=src, dst=dst)

    def set_reorder(
        self,
        rate: float,
        gap_ms: float | None,
        src: list[int] | None = None,
        dst: list[int] | None = None,
    ) -> dict[str, Any]:
        return self.call("set_reorder", rate=rate, gap_ms=gap_ms, src=src, dst=dst)

    def set_duplicate(
        self, rate: float, src: list[int] | None = None, dst: list[int] | None = None
    ) -> dict[str, Any]:
        return self.call("set_duplicate", rate=rate, src=src, dst=dst)

    def set_bandwidth(
        self,
        rate_mbit: float | None,
        src: list[int] | None = None,
        dst: list[int] | None = None,
        **queue: int,
    ) -> dict[str, Any]:
        return self.call("set_bandwidth", rate_mbit=rate_mbit, src=src, dst=dst, **queue)

    def partition(self, groups: list[list[int]]) -> dict[str, Any]:
        return self.call("partition", groups=groups)

    def heal(self) -> dict[str, Any]:
        return self.call("heal")

    def host_down(self, host: int) -> dict[str, Any]:
        return self.call("host_down", host=host)

    def host_up(self, host: int) -> dict[str, Any]:
        return self.call("host_up", host=host)

    def describe(self) -> dict[str, Any]:
        return self.call("describe")

    def one_way(self, pairs: list[tuple[int, int]]) -> list[float]:
        """The configured one-way delays (s) of these (src, dst) host indices."""
        return list(self.call("one_way", pairs=[[a, b] for a, b in pairs])["one_way_s"])

    def set_calibration(self, *, path_offset_s: float, floor_one_way_s: float) -> dict[str, Any]:
        return self.call(
            "set_calibration", path_offset_s=path_offset_s, floor_one_way_s=floor_one_way_s
        )

    def shutdown(self) -> dict[str, Any]:
        return self.call("shutdown")
