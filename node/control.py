# The client side of a peer's control API (node/runtime.py): one JSON request
# per line on a Unix socket, one JSON answer per line. Blocking, for the
# testbed's orchestrator and for humans (`python -m node.control PATH dump`).

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ControlError", "request", "request_when_up"]


class ControlError(RuntimeError):
    """The peer could not be reached or refused the request."""


def request(path: str, op: str, *, timeout_s: float = 10.0, **fields: Any) -> dict[str, Any]:
    """Send {"op": op, **fields} to the peer at `path`; return its answer (ok is true)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(path)
            sock.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
            buffer = b""
            while not buffer.endswith(b"\n"):
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                buffer += chunk
    except OSError as exc:
        raise ControlError(f"{path}: {op}: {exc.strerror or exc}") from None
    try:
        answer = json.loads(buffer)
    except ValueError:
        raise ControlError(f"{path}: {op}: the peer closed without a valid answer") from None
    if not isinstance(answer, dict):
        raise ControlError(
            f"{path}: {op}: the peer answered {type(answer).__name__}, not an object"
        )
    if not answer.get("ok"):
        raise ControlError(f"{path}: {op}: {answer.get('error', 'refused')}")
    return answer


def request_when_up(
    path: str, op: str, *, running: Callable[[], bool], wait_s: float, **fields: Any
) -> dict[str, Any]:
    """request(), retried while the peer is `running()` but not listening yet (at most wait_s)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return request(path, op, **fields)
        except ControlError:
            if not running() or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python -m node.control SOCKET OP [JSON-FIELDS]")
    extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    try:
        print(json.dumps(request(sys.argv[1], sys.argv[2], **extra), indent=2))
    except ControlError as exc:
        sys.exit(str(exc))
