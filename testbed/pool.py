# Worker processes (predictions, campaign runs), signals, and runs as Ray tasks.
#
# Theory of operation
#   run_tasks(fn, calls, jobs=, ray=) runs fn(*args) for every call and yields
#   (index, result) as each finishes: in this process (jobs 1), in forked
#   processes (jobs > 1), or as Ray tasks on a cluster (ray = an address, or
#   LOCAL for a cluster of this machine started for the occasion and stopped
#   after). The caller sees the same results either way; only the order in
#   which they finish differs.
#
#   A Ray task runs on whatever machine has a free CPU, so it checks first that
#   the project there is this one (project_fingerprint: a hash of the sources of
#   testbed and node) and works in the driver's folder where that exists (spec
#   inputs such as churn scripts are named relative to it). A task lost with its
#   worker (the machine died, the process was killed) is run again, up to
#   `retries` times; an error the task raised itself is the caller's, at once.

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError

__all__ = [
    "CLUSTERS_DIR",
    "LOCAL",
    "RayError",
    "cluster_records",
    "project_fingerprint",
    "ray_get",
    "ray_session",
    "run_tasks",
    "worker_signals",
]

LOCAL = "local"  # `--ray` without an address: a Ray cluster of this machine, for this command
TASK_RETRIES = 3  # a task lost with its worker is run again this often
# The clusters `testbed cluster up` made from this machine: <id>.json each, with the
# head's address and the cluster's token (root only: the token lets anyone run code).
CLUSTERS_DIR = Path("/run/p2p-testbed/clusters")


class RayError(TestbedError):
    """Ray is missing, its cluster cannot be reached, or a machine runs another project version."""


def worker_signals() -> None:
    """A pool initializer: workers leave interruptions to the parent. Ctrl-C
    (sent to the whole process group) is ignored, SIGTERM kills outright.
    Forked workers would otherwise inherit the CLI's SIGTERM-raises-
    KeyboardInterrupt handler and die mid-task in a way the pool's shutdown
    then waits on for ever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@functools.cache
def project_fingerprint() -> str:
    """A hash of this checkout's testbed and node sources: two machines with the
    same fingerprint run the same code."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in ("testbed", "node"):
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def run_tasks(
    fn: Callable[..., Any],
    calls: Sequence[tuple[Any, ...]],
    *,
    jobs: int = 1,
    ray: str | None = None,
    retries: int = TASK_RETRIES,
) -> Iterator[tuple[int, Any]]:
    """fn(*args) for every args of `calls`; yields (index in calls, result) as each ends.

    ray None: in this process if jobs is 1, else in `jobs` forked processes.
    Otherwise as Ray tasks, `jobs` at a time: ray LOCAL on a Ray cluster of this
    machine with `jobs` CPUs, started here and stopped at the end; any other value
    is the address of a running cluster ("auto", "HOST:PORT", "ray://HOST:PORT"). fn must be importable by name
    (a module-level function) for Ray and for processes.

    Raises:
        RayError: Ray is not installed, its cluster cannot be reached, or a
            machine of it runs another version of the project.
        whatever fn raised, for the first call that failed (the others are cancelled).
    """
    if ray is not None:
        yield from _ray_tasks(fn, calls, ray, jobs, retries)
    elif jobs <= 1 or len(calls) <= 1:
        for k, args in enumerate(calls):
            yield k, fn(*args)
    else:
        yield from _process_tasks(fn, calls, jobs)


def _process_tasks(
    fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]], jobs: int
) -> Iterator[tuple[int, Any]]:
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=worker_signals) as pool:
        pending = {pool.submit(fn, *args): k for k, args in enumerate(calls)}
        try:
            for future in as_completed(pending):
                yield pending[future], future.result()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
            raise


def _ray_tasks(
    fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]], address: str, jobs: int, retries: int
) -> Iterator[tuple[int, Any]]:
    with ray_session(address, jobs) as ray:
        import ray.exceptions

        task = ray.remote(max_retries=retries, num_cpus=1)(_call_checked)
        where, version = os.getcwd(), project_fingerprint()
        waiting = iter(enumerate(calls))
        pending: dict[Any, int] = {}

        def submit() -> None:
            for k, args in waiting:
                pending[task.remote(fn, args, where, version)] = k
                return

        for _ in range(max(jobs, 1)):  # at most `jobs` at once
            submit()
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                k = pending.pop(done[0])
                try:
                    (result,) = ray_get(ray, [done[0]])
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError) as exc:
                    raise RayError(
                        f"task {k + 1} of {len(calls)} was lost with its worker {retries + 1} "
                        f"times: {exc}"
                    ) from None
                submit()
                yield k, result
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)


def ray_get(ray: Any, refs: list[Any]) -> list[Any]:
    """ray.get(refs), but an error a task raised comes back as itself, not wrapped
    in Ray's RayTaskError."""
    try:
        return list(ray.get(refs))
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        raise (cause if isinstance(cause, BaseException) else exc) from None


def cluster_records() -> list[dict[str, Any]]:
    """The clusters `testbed cluster up` started from this machine (oldest first)."""
    try:
        paths = sorted(CLUSTERS_DIR.glob("*.json"), key=lambda p: p.stat().st_mtime)
    except FileNotFoundError:
        return []
    records = []
    for path in paths:
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # being written or removed
    return records


def _cluster_of(address: str) -> tuple[str, dict[str, Any] | None]:
    """The address to connect to, and the testbed cluster it names: "auto" names the
    one `testbed cluster up` started here, if there is exactly one."""
    records = cluster_records()
    if address == "auto" and len(records) == 1:
        return records[0]["head"], records[0]
    for record in records:
        if address.removeprefix("ray://").split(":")[0] == record["head"].split(":")[0]:
            return address, record
    return address, None


@contextlib.contextmanager
def ray_session(address: str, jobs: int = 1) -> Iterator[Any]:
    """The ray module, connected to `address` (LOCAL: a cluster of this machine with
    `jobs` CPUs, started here); disconnected (and a local cluster stopped) at the
    end unless it was connected before.

    Raises:
        RayError: Ray is not installed or the cluster cannot be started or reached.
    """
    try:
        import ray
    except ImportError:
        raise RayError(
            "--ray needs Ray: `make install` installs it (the `cluster` extra of the project)"
        ) from None
    started = not ray.is_initialized()
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    try:
        if started:
            _ray_init(ray, address, jobs)
        yield ray
    finally:
        if started:
            ray.shutdown()
        if any(os.environ.get(k) != v for k, v in saved.items()):
            for key, value in saved.items():  # a cluster's token is not left to the next one
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            _ray_auth_changed()


def _ray_init(ray: Any, address: str, jobs: int) -> None:
    options: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "configure_logging": False,
    }
    try:
        if address == LOCAL:
            # Token authentication, said explicitly: Ray turns it on for a local cluster
            # anyway, and warns on every command when it has to decide by itself.
            os.environ["RAY_AUTH_MODE"] = "token"
            _ray_auth_changed()
            ray.init(address="local", num_cpus=max(jobs, 1), **options)
        else:
            address, record = _cluster_of(address)
            if record is not None:  # its token
                os.environ["RAY_AUTH_MODE"] = "token"
                os.environ["RAY_AUTH_TOKEN"] = record["token"]
                _ray_auth_changed()
            ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = "a local cluster" if address == LOCAL else f"the cluster at {address}"
        raise RayError(f"cannot start or reach {where}: {exc}") from None


def _ray_auth_changed() -> None:
    """Make Ray read RAY_AUTH_MODE and RAY_AUTH_TOKEN again: it reads them when it is
    imported (as Ray itself does when it turns token authentication on)."""
    with contextlib.suppress(ImportError, AttributeError):
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def _call_checked(fn: Callable[..., Any], args: Iterable[Any], where: str, version: str) -> Any:
    """A Ray task: fn(*args), on a machine that runs the driver's project version,
    in the driver's folder where it exists here."""
    mine = project_fingerprint()
    if mine != version:
        raise RayError(
            f"{os.uname().nodename} runs another version of the project ({mine}, the driver "
            f"{version}): install the same checkout on every machine (docs/beyond-one-machine.md)"
        )
    if os.path.isdir(where):
        os.chdir(where)
    return fn(*args)
