# Named network namespaces, made and unmade in-process.
#
# A named namespace is what `ip netns add` makes: a bind mount of a namespace
# file on /run/netns/<name>, which keeps the namespace alive with no process in
# it. We make them from this process (unshare in the calling thread, bind
# mount, setns back) because pyroute2's netns.create forks a helper per call,
# which is slow with hundreds of hosts. Sockets and sysctls are reached by
# entering a namespace in the calling thread for a moment (`entered_netns`):
# a socket stays in the namespace it was created in.
#
# Rule: every function here either does all of its work or raises OSError
# with the namespace named, leaving nothing half-made behind it.

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

__all__ = [
    "NETNS_DIR",
    "attach_netns",
    "create_netns",
    "entered_netns",
    "kill_processes",
    "list_netns",
    "netns_id",
    "nsenter_argv",
    "pids_in_netns",
    "process_alive",
    "remove_netns",
    "write_sysctl",
]

NETNS_DIR = Path("/run/netns")

CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_SHARED = 1 << 20
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _check(result: int, what: str, name: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what} for network namespace {name!r}: {os.strerror(code)}")


def _ensure_netns_dir() -> None:
    """Make /run/netns a shared mount point, as iproute2 does, so that namespaces
    created later are visible in mount namespaces made earlier (ip netns exec)."""
    NETNS_DIR.mkdir(parents=True, exist_ok=True)
    path = bytes(NETNS_DIR)
    if _libc.mount(b"", path, b"none", MS_SHARED | MS_REC, None) == 0:
        return
    if ctypes.get_errno() != errno.EINVAL:  # EINVAL: not a mount point yet
        _check(-1, "making /run/netns shared", "*")
    _check(
        _libc.mount(path, path, b"none", MS_BIND | MS_REC, None), "bind-mounting /run/netns", "*"
    )
    _check(
        _libc.mount(b"", path, b"none", MS_SHARED | MS_REC, None), "making /run/netns shared", "*"
    )


_netns_dir_ready = False


def _mount_point(name: str) -> Path:
    """The empty file /run/netns/<name> a namespace is bind-mounted on (made here).

    Raises:
        FileExistsError: the name is taken.
    """
    global _netns_dir_ready
    if not _netns_dir_ready:
        _ensure_netns_dir()
        _netns_dir_ready = True
    path = NETNS_DIR / name
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
    return path


def create_netns(name: str, sysctls: Mapping[str, str | int] | None = None) -> None:
    """Create the named network namespace /run/netns/<name>, and write its `sysctls`
    (net.* keys) while inside it (no second setns).

    Raises:
        FileExistsError: it already exists.
        OSError: the kernel refused (the mount point is removed again).
    """
    path = _mount_point(name)
    saved = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _check(_libc.unshare(CLONE_NEWNET), "unshare", name)
        try:
            for key, value in (sysctls or {}).items():
                write_sysctl(key, value)
            _check(
                _libc.mount(b"/proc/thread-self/ns/net", bytes(path), b"none", MS_BIND, None),
                "bind mount",
                name,
            )
        finally:
            _check(_libc.setns(saved, CLONE_NEWNET), "returning from", name)
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    finally:
        os.close(saved)


def attach_netns(name: str, pid: int, sysctls: Mapping[str, str | int] | None = None) -> None:
    """Name the network namespace of process `pid` /run/netns/<name> (what `ip netns
    attach` does: a container's), and write its `sysctls` while inside it.

    Raises:
        FileExistsError: the name is taken.
        OSError: the kernel refused, or `pid` is gone (the mount point is removed again).
    """
    path = _mount_point(name)
    try:
        source = f"/proc/{pid}/ns/net".encode()
        _check(_libc.mount(source, bytes(path), b"none", MS_BIND, None), "bind mount", name)
        if sysctls:
            with entered_netns(name):
                for key, value in sysctls.items():
                    write_sysctl(key, value)
    except BaseException:
        with contextlib.suppress(OSError):
            _libc.umount2(bytes(path), MNT_DETACH)
            path.unlink()
        raise


def remove_netns(name: str) -> bool:
    """Unmount and delete /run/netns/<name>. Returns False if it did not exist.

    The namespace itself disappears once no process is left in it.
    """
    path = NETNS_DIR / name
    if _libc.umount2(bytes(path), MNT_DETACH) != 0:
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOENT):
            raise OSError(code, f"unmounting network namespace {name!r}: {os.strerror(code)}")
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def list_netns() -> list[str]:
    """Names in /run/netns (sorted)."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def netns_id(name: str) -> tuple[int, int]:
    """(st_dev, st_ino) identifying the namespace behind /run/netns/<name>."""
    st = os.stat(NETNS_DIR / name)
    return st.st_dev, st.st_ino


@contextlib.contextmanager
def entered_netns(name: str) -> Iterator[None]:
    """Run the body with the calling thread inside namespace `name`.

    Only this thread moves; sockets opened in the body stay in `name` after.
    """
    saved = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(NETNS_DIR / name, os.O_RDONLY)
    try:
        _check(_libc.setns(target, CLONE_NEWNET), "entering", name)
        try:
            yield
        finally:
            _check(_libc.setns(saved, CLONE_NEWNET), "leaving", name)
    finally:
        os.close(target)
        os.close(saved)


def write_sysctl(key: str, value: str | int) -> None:
    """Write a net sysctl of the namespace the calling thread is in (use inside entered_netns)."""
    path = Path("/proc/sys") / key.replace(".", "/")
    path.write_text(f"{value}\n")


def nsenter_argv(name: str) -> list[str]:
    """argv prefix that runs a program inside namespace `name` (same pid, no extra process)."""
    return ["nsenter", f"--net={NETNS_DIR / name}", "--"]


def pids_in_netns(ids: Iterable[tuple[int, int]]) -> list[int]:
    """Pids of every process whose network namespace is one of `ids` (see netns_id)."""
    wanted = set(ids)
    if not wanted:
        return []
    found = []
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in wanted and int(entry.name) != me:
            found.append(int(entry.name))
    return found


def kill_processes(pids: Iterable[int], *, grace_s: float = 2.0) -> list[int]:
    """SIGTERM the processes, wait up to grace_s, then SIGKILL the rest.

    Returns the pids still alive at the end (normally none).
    """
    alive = set()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            alive.add(pid)
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        alive = {pid for pid in alive if process_alive(pid)}
        if alive:
            time.sleep(0.02)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while alive and time.monotonic() < deadline:
        alive = {pid for pid in alive if process_alive(pid)}
        if alive:
            time.sleep(0.01)
    return sorted(alive)


def process_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (zombies of our children are reaped)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
        return state != b"Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
