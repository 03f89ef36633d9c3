# Container hosts: a host of the WAN that is a Docker container.
#
# Theory of operation
#   A container host is a container started with no network of its own
#   (`--network none`: only lo) from a local image (never pulled: `--pull
#   never`), running `sleep infinity`, with the CPU and memory limits asked
#   for. Its network namespace is then given the name the plan has for the
#   host (a bind mount of /proc/<pid>/ns/net on /run/netns/<name>, what
#   `ip netns attach` does), so the rest of the bring-up treats it as any other
#   host: its veth goes in, its address and routes are set, the delay engine
#   delays its packets like everyone's.
#
#   Processes run in it by entering all of its namespaces (mount, UTS, IPC,
#   network, PID) with nsenter from the testbed, not through `docker exec`:
#   they stay the testbed's children (their own session, output in the run
#   folder, signals reach them: crash, freeze and leave work as on namespace
#   hosts), and the first thing each does is join the container's cgroups, so
#   the limits apply to it.
#
#   Every container carries the label org.p2p-testbed.run=<run id>: teardown
#   removes the run's containers, `testbed clean` those of runs whose owner is
#   gone, and nothing else is touched. Docker itself is started here when it is
#   installed but not running (dockerd, its log in /var/log/p2p-testbed-dockerd.log).

from __future__ import annotations

import math
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.errors import EmulationError, InputError
from testbed.net._netns import attach_netns

__all__ = [
    "DEFAULT_IMAGE",
    "RUN_LABEL",
    "ContainerSpec",
    "enter_argv",
    "ensure_docker",
    "cgroup_limits",
    "container_groups",
    "remove_containers",
    "run_containers",
    "start_containers",
]

DEFAULT_IMAGE = "p2p-testbed/debian:bookworm"  # built by `make` (scripts/build-image.sh)
RUN_LABEL = "org.p2p-testbed.run"
HOST_LABEL = "org.p2p-testbed.host"
DOCKERD_LOG = Path("/var/log/p2p-testbed-dockerd.log")
DOCKER_START_TIMEOUT_S = 30.0
STARTS_AT_ONCE = 4


@dataclass(frozen=True)
class ContainerSpec:
    """Which hosts are containers, from which image, with which limits.

    hosts: how many (the last N of the network, so that h1.. stay namespaces),
        or their names, or None for all.
    cpus: CPU limit in cores (0.5: half a core), or None.
    memory_mb: memory limit in MiB, or None.
    """

    image: str = DEFAULT_IMAGE
    hosts: int | Sequence[str] | None = None
    cpus: float | None = None
    memory_mb: int | None = None

    def chosen(self, names: Sequence[str]) -> list[str]:
        """The host names that are containers; InputError for a bad choice."""
        if self.hosts is None:
            return list(names)
        if isinstance(self.hosts, int) and not isinstance(self.hosts, bool):
            if not 0 <= self.hosts <= len(names):
                raise InputError(
                    f"containers.hosts: {self.hosts} containers, but the network has "
                    f"{len(names)} hosts",
                    source="<containers>",
                )
            return list(names[len(names) - self.hosts :])
        if isinstance(self.hosts, str):
            raise InputError(
                "containers.hosts: a count or a list of host names, not a string",
                source="<containers>",
            )
        unknown = [h for h in self.hosts if h not in names]
        if unknown:
            raise InputError(
                f"containers.hosts: no host named {unknown[0]!r} (hosts h1..h{len(names)})",
                source="<containers>",
            )
        return list(dict.fromkeys(self.hosts))

    def check(self) -> None:
        if not isinstance(self.image, str) or not self.image.strip():
            raise InputError("containers.image: name a local image", source="<containers>")
        if self.cpus is not None and not (
            isinstance(self.cpus, int | float) and math.isfinite(self.cpus) and self.cpus > 0
        ):
            raise InputError(
                f"containers.cpus: expected a number of cores > 0 (0.5: half a core), "
                f"not {self.cpus!r}",
                source="<containers>",
            )
        if self.memory_mb is not None and not (
            isinstance(self.memory_mb, int) and not isinstance(self.memory_mb, bool)
            and self.memory_mb >= 6
        ):  # fmt: skip
            raise InputError(
                f"containers.memory_mb: expected a whole number of MiB >= 6 (Docker's least), "
                f"not {self.memory_mb!r}",
                source="<containers>",
            )

    @classmethod
    def of(cls, value: ContainerSpec | Mapping[str, object] | str) -> ContainerSpec:
        """A spec from itself, a mapping of its fields, or an image name (all hosts)."""
        if isinstance(value, ContainerSpec):
            spec = value
        elif isinstance(value, str):
            spec = cls(image=value)
        elif isinstance(value, Mapping):
            unknown = sorted(set(value) - {"image", "hosts", "cpus", "memory_mb"})
            if unknown:
                raise InputError(
                    f"containers: unknown field {unknown[0]!r}; expected image, hosts, cpus, "
                    "memory_mb",
                    source="<containers>",
                )
            spec = cls(**value)  # type: ignore[arg-type]
        else:
            raise InputError(
                "containers: an image name, or a table of image, hosts, cpus, memory_mb",
                source="<containers>",
            )
        spec.check()
        return spec


def container_groups(value: Any, names: Sequence[str]) -> list[tuple[ContainerSpec, list[str]]]:
    """open_wan's `containers` (None, one spec, or a list of specs each for its own
    hosts) as (spec, host names) groups; InputError for a host in two groups."""
    if value is None:
        return []
    specs = (
        [ContainerSpec.of(v) for v in value]
        if isinstance(value, list | tuple)
        else [ContainerSpec.of(value)]
    )
    groups, seen = [], {}
    for k, spec in enumerate(specs):
        chosen = spec.chosen(names)
        for host in chosen:
            if host in seen:
                raise InputError(
                    f"containers: {host} is in group {seen[host] + 1} and in group {k + 1}",
                    source="<containers>",
                )
            seen[host] = k
        if chosen:
            groups.append((spec, chosen))
    return groups


def _docker() -> str:
    path = shutil.which("docker")
    if path is None:
        raise EmulationError(
            "container hosts need Docker, which is not installed; `make install` "
            "(scripts/install-system-deps.sh) installs it"
        )
    return path


def _run(argv: Sequence[str], *, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, check=False, timeout=timeout_s
    )


def ensure_docker() -> str:
    """The docker client's path, once the daemon answers (started here if installed
    and not running). Raises EmulationError saying why it cannot be."""
    docker = _docker()
    if _run([docker, "info", "--format", "{{.ServerVersion}}"], timeout_s=20).returncode == 0:
        return docker
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise EmulationError(
            "the Docker daemon is not running and dockerd is not installed; `make install` "
            "installs docker.io"
        )
    # The daemon outlives us: `setsid --fork` makes it init's child in its own session,
    # so it never becomes our zombie and no Popen object of ours is left to warn, when
    # collected, that it is "still running" (a test failed so under -W error).
    with DOCKERD_LOG.open("ab") as log:
        subprocess.run(
            ["setsid", "--fork", dockerd],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            check=True,
            timeout=10,
        )
    deadline = time.monotonic() + DOCKER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if _run([docker, "info", "--format", "{{.ServerVersion}}"], timeout_s=10).returncode == 0:
            return docker
        time.sleep(0.5)
    raise EmulationError(
        f"started dockerd, but it did not answer within {DOCKER_START_TIMEOUT_S:g} s; "
        f"see {DOCKERD_LOG}"
    )


def _check_image(docker: str, image: str) -> None:
    if _run([docker, "image", "inspect", image]).returncode != 0:
        hint = (
            " (`make install` builds it: scripts/build-image.sh)" if image == DEFAULT_IMAGE else ""
        )
        raise EmulationError(
            f"no local Docker image {image!r}{hint}; images are never pulled from a registry"
        )


@dataclass(frozen=True)
class Started:
    name: str  # the host's
    container: str  # Docker's id
    pid: int  # its init process, whose namespaces the host's processes enter
    enter: list[str]  # argv prefix: join its cgroups, enter its namespaces


def start_containers(
    run_id: str, hosts: Mapping[str, str], spec: ContainerSpec, *, mounts: Sequence[str] = ()
) -> dict[str, Started]:
    """Start a container per host (host name -> the netns name the plan gives it) and
    name its network namespace so; `mounts`: folders bind-mounted at the same path
    (the run folder, so that {run} means the same inside). On failure, removes what
    it started and raises."""
    docker = ensure_docker()
    _check_image(docker, spec.image)
    started: dict[str, Started] = {}
    try:
        from concurrent.futures import ThreadPoolExecutor

        def one(item: tuple[str, str]) -> Started:
            host, netns = item
            return _start_one(docker, run_id, host, netns, spec, mounts)

        with ThreadPoolExecutor(STARTS_AT_ONCE) as pool:
            for result in pool.map(one, hosts.items()):
                started[result.name] = result
    except BaseException:
        remove_containers(run_id)  # the names given to their namespaces go with the run's
        raise
    return started


def _start_one(
    docker: str, run_id: str, host: str, netns: str, spec: ContainerSpec, mounts: Sequence[str]
) -> Started:
    argv = [
        docker, "run", "--detach", "--pull", "never", "--network", "none", "--init",
        "--name", f"p2p-testbed-{run_id}-{host}",
        "--hostname", host,
        "--label", f"{RUN_LABEL}={run_id}",
        "--label", f"{HOST_LABEL}={host}",
    ]  # fmt: skip
    if spec.cpus is not None:
        argv += ["--cpus", f"{spec.cpus:g}"]
    if spec.memory_mb is not None:
        argv += ["--memory", f"{spec.memory_mb}m", "--memory-swap", f"{spec.memory_mb}m"]
    for folder in mounts:
        argv += ["--volume", f"{folder}:{folder}"]
    argv += [spec.image, "sleep", "infinity"]
    result = _run(argv, timeout_s=120)
    if result.returncode != 0:
        said = result.stderr.strip().splitlines()[-1:] or [f"exit {result.returncode}"]
        raise EmulationError(f"cannot start the container of {host}: {said[0]}")
    container = result.stdout.strip()
    inspected = _run([docker, "inspect", "--format", "{{.State.Pid}}", container])
    try:
        pid = int(inspected.stdout.strip())
    except ValueError:
        raise EmulationError(
            f"the container of {host} did not start: {inspected.stderr.strip()}"
        ) from None
    if pid <= 0:
        raise EmulationError(f"the container of {host} exited at once; `docker logs {container}`")
    attach_netns(netns, pid)
    return Started(host, container, pid, enter_argv(pid))


def enter_argv(pid: int) -> list[str]:
    """argv prefix that runs a command in the container whose init is `pid`: a shell
    (in the testbed's namespaces) moves itself into the container's cgroups, so the
    limits apply to what it starts, then execs nsenter into all of the container's
    namespaces (nsenter forks for the PID namespace)."""
    procs = [str(folder / "cgroup.procs") for folder in _cgroup_dirs(pid)]
    script = "for g in " + " ".join(shlex.quote(p) for p in procs) + '; do echo $$ > "$g"; done; '
    script += 'exec "$0" "$@"'
    nsenter = ["nsenter", f"--target={pid}", "--mount", "--uts", "--ipc", "--net", "--pid", "--"]
    return ["/bin/sh", "-c", script, *nsenter] if procs else nsenter


def _cgroup_dirs(pid: int) -> list[Path]:
    """The cgroup directories of process `pid` (v1: one per hierarchy; v2: one)."""
    dirs = []
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base = Path("/sys/fs/cgroup")
        else:
            names = [c for c in controllers.split(",") if c]
            candidates = [Path("/sys/fs/cgroup") / controllers]
            candidates += [Path("/sys/fs/cgroup") / c.removeprefix("name=") for c in names]
            base = next((c for c in candidates if c.is_dir()), candidates[0])
        folder = base / path.lstrip("/")
        if (folder / "cgroup.procs").exists():
            dirs.append(folder)
    return dirs


def cgroup_limits(container_pid: int) -> dict[str, float | None]:
    """The CPU (cores) and memory (MiB) limits of the container's cgroups."""
    out: dict[str, float | None] = {"cpus": None, "memory_mb": None}
    for folder in _cgroup_dirs(container_pid):
        quota, period = folder / "cpu.cfs_quota_us", folder / "cpu.cfs_period_us"
        if quota.exists() and period.exists():
            q = int(quota.read_text())
            out["cpus"] = None if q < 0 else q / int(period.read_text())
        cpu_max = folder / "cpu.max"
        if cpu_max.exists():
            q_text, p_text = cpu_max.read_text().split()
            out["cpus"] = None if q_text == "max" else int(q_text) / int(p_text)
        for name in ("memory.limit_in_bytes", "memory.max"):
            limit = folder / name
            if limit.exists():
                text = limit.read_text().strip()
                value = None if text == "max" else int(text)
                out["memory_mb"] = None if value is None or value >= 1 << 60 else value / 2**20
    return out


def run_containers(run_id: str | None = None) -> dict[str, list[str]]:
    """Our containers on this machine (running or not), by run id."""
    try:
        docker = _docker()
    except EmulationError:
        return {}
    label = RUN_LABEL if run_id is None else f"{RUN_LABEL}={run_id}"
    result = _run(
        [docker, "ps", "--all", "--filter", f"label={label}", "--format",
         f'{{{{.ID}}}} {{{{.Label "{RUN_LABEL}"}}}}'],
        timeout_s=20,
    )  # fmt: skip
    if result.returncode != 0:
        return {}
    found: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        container, _, rid = line.partition(" ")
        found.setdefault(rid, []).append(container)
    return found


def remove_containers(run_id: str) -> list[str]:
    """Remove the run's containers (killing what runs in them). Returns problems."""
    ids = run_containers(run_id).get(run_id, [])
    if not ids:
        return []
    result = _run([_docker(), "rm", "--force", *ids], timeout_s=120)
    if result.returncode != 0:
        return [f"docker rm: {result.stderr.strip() or result.returncode}"]
    return []
