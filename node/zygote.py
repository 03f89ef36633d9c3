# `python -m node.zygote`: a parent that imports the peer once and forks each peer process.
#
#   python -m node.zygote --socket /run/testbed/<run>/zygote.sock
#
# Theory of operation
#   A peer started with `python -m node` imports Python, trio, msgspec and the peer anew: about
#   28 MB of private memory each, most of it the same code and data in every process. The
#   zygote imports all of that once, freezes it out of the garbage collector's reach
#   (gc.freeze: a collection would write to every object's header and unshare its page) and
#   forks a child per peer, so the pages stay shared copy-on-write: a forked peer has about
#   7 MB of its own (docs/performance.md). The child leaves them frozen (unfreezing would let
#   the next full collection touch them all); what the peer allocates is collected as usual.
#
#   The testbed talks to the zygote over a Unix stream socket, one JSON object per line each
#   way, one request at a time:
#
#     {"op": "spawn", "argv": [...], "netns": PATH | null, "stdout": PATH, "stderr": PATH}
#         -> {"pid": N}  (or {"error": "..."})
#         The child enters the network namespace at PATH (setns, as `nsenter --net=PATH`),
#         starts a session of its own (so that its process group can be signalled), sends
#         its output to the two files and runs `python -m node` with `argv` in-process.
#     {"op": "status", "pid": N}  -> {"code": C | null}
#         The child's exit status (a negative signal number if a signal ended it), null
#         while it runs; the zygote reaps it on the first ask.
#
#   The zygote ends when its client hangs up; its children are not its to stop (the testbed
#   signals their process groups, and `testbed clean` finds them by namespace).
#
# Rules
#   1. The zygote is single-threaded and never starts trio: a fork copies only the calling
#      thread, and a child must find the runtime as if freshly imported.
#   2. Nothing a child does returns into the zygote's code: it ends with os._exit.
#   3. A spawn is answered once the child leads its own session: a crash signals the
#      process group named by the pid at once, and a loaded machine once let a SIGKILL
#      sent between the fork and the child's setsid reach no group (the child lived on,
#      and the engine waited for it to end for ever).

from __future__ import annotations

import gc

# No collection while the modules load: what it would free leaves holes in pages the
# children share, which their own objects then fill (one copied page each).
gc.disable()

import argparse  # noqa: E402
import ctypes  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402

import node.__main__ as peer_main  # noqa: E402
from node.wire import Codec, PeerInfo, Update  # noqa: E402

__all__ = ["main"]

CLONE_NEWNET = 0x40000000
MAX_REQUEST_BYTES = 1 << 20


def _enter_netns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({path}): {os.strerror(errno)}")
    finally:
        os.close(fd)


def _child(request: dict[str, Any], keep_out: list[socket.socket], ready: int) -> None:
    """In the forked child: become the peer. Never returns."""
    code = 1
    try:
        for sock in keep_out:
            sock.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        os.write(ready, b".")  # rule 3: the zygote answers only now
        os.close(ready)
        stdin = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for fd, target in ((stdin, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        if request.get("netns"):
            _enter_netns(request["netns"])
        gc.enable()  # for the peer's own objects (the zygote's stay frozen, see the header)
        sys.argv = ["python -m node", *request["argv"]]
        code = peer_main.main(list(request["argv"]))
    except SystemExit as exc:  # argparse's errors
        code = exc.code if isinstance(exc.code, int) else 2
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _spawn(request: dict[str, Any], keep_out: list[socket.socket]) -> dict[str, Any]:
    argv = request.get("argv")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return {"error": "spawn: argv must be a list of strings"}
    for field in ("stdout", "stderr"):
        if not isinstance(request.get(field), str):
            return {"error": f"spawn: {field} must be a path"}
    netns = request.get("netns")
    if netns is not None and not (isinstance(netns, str) and os.path.exists(netns)):
        return {"error": f"spawn: no network namespace at {netns!r}"}
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        _child(request, keep_out, ready_w)
    os.close(ready_w)
    try:
        os.read(ready_r, 1)  # b"" if it died before: its status says why
    finally:
        os.close(ready_r)
    return {"pid": pid}


def _status(request: dict[str, Any], exits: dict[int, int]) -> dict[str, Any]:
    pid = request.get("pid")
    if not isinstance(pid, int):
        return {"error": "status: pid must be an integer"}
    _reap(exits)
    return {"code": exits.pop(pid, None)}


def _reap(exits: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        exits[pid] = os.waitstatus_to_exitcode(status)


def serve(listener: socket.socket) -> None:
    """Serve one client until it hangs up."""
    conn, _ = listener.accept()
    exits: dict[int, int] = {}
    with conn, conn.makefile("rb") as requests, conn.makefile("wb") as replies:
        for line in requests:
            if len(line) > MAX_REQUEST_BYTES:
                reply: dict[str, Any] = {"error": "request too long"}
            else:
                try:
                    request = json.loads(line)
                except ValueError as exc:
                    reply = {"error": f"not JSON: {exc}"}
                else:
                    op = request.get("op") if isinstance(request, dict) else None
                    if op == "spawn":
                        reply = _spawn(request, [listener, conn])
                    elif op == "status":
                        reply = _status(request, exits)
                    else:
                        reply = {"error": f"unknown op {op!r}; expected spawn or status"}
            replies.write(json.dumps(reply).encode() + b"\n")
            replies.flush()


def _warm_up() -> None:
    """Build, once for all children, what the peer makes lazily on first use (msgspec's
    type information for the wire's messages)."""
    codec = Codec()
    info = PeerInfo(1, "127.0.0.1", 1, 1, (0.0,), (0.0,), (1.0,), ())
    codec.decode_untrusted(codec.encode(Update(info, (info,), ()), sender=1, seq=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m node.zygote", description="Fork grid peers from one pre-loaded parent."
    )
    parser.add_argument("--socket", required=True, help="Unix socket path to listen on")
    args = parser.parse_args(argv)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with listener:
        listener.bind(args.socket)
        os.chmod(args.socket, 0o600)  # whoever reaches it starts processes: its owner only
        listener.listen(1)
        _warm_up()
        gc.freeze()
        print("ready", flush=True)
        serve(listener)
    return 0


if __name__ == "__main__":
    sys.exit(main())
