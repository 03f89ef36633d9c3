# Machines joined into one Ray cluster: `testbed cluster up | status | down`.
#
# Theory of operation
#   A cluster is a Ray head and a Ray node on every machine, sharing a token
#   that `up` makes (Ray's token authentication: nobody without it may run
#   code there). Its record (testbed.pool.CLUSTERS_DIR/<id>.json: head, token,
#   machines) lets `--ray` connect with the token and `down` stop it.
#
#   Real machines are reached over SSH (paramiko; keys from the user's agent
#   or files). Each is checked first, in one shell script: root, the kernel's
#   veth, VXLAN and NFQUEUE (made for real in a throwaway namespace), the same
#   project sources (testbed.pool.project_fingerprint) and Ray version. The
#   head runs on this machine unless a cluster is already up.
#
#   `up --local N` makes N "machines" on this one for trying it by hand and for
#   the suite: network namespaces tb<id>-m1..mN on a LAN of their own (a
#   bridge in namespace tb<id>-lan, so the root namespace's firewall never
#   sees their traffic; the root namespace joins it at .1 to drive the
#   cluster). m1 runs the head; the others a node each (or nothing, with
#   `ray_on=1`, for joining them over SSH). Every Ray of a cluster keeps its
#   files in /tmp/ray-tb<id>-<machine>, and is stopped by killing the processes
#   that name that folder, never with `ray stop` (which stops every Ray of a
#   machine, other clusters' too).
#
# Rule: `up` is all or nothing: a machine that fails its check or its start
# stops what was started before it, and nothing is recorded.

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from testbed.errors import EmulationError, InputError
from testbed.net._build import ip_batch
from testbed.net._netns import (
    create_netns,
    kill_processes,
    list_netns,
    netns_id,
    nsenter_argv,
    pids_in_netns,
    process_alive,
    remove_netns,
)
from testbed.net._registry import list_runs
from testbed.pool import CLUSTERS_DIR, cluster_records, project_fingerprint, ray_session

__all__ = [
    "CLUSTER_NETNS_RE",
    "Cluster",
    "Machine",
    "SshTarget",
    "cluster_down",
    "cluster_status",
    "find_cluster",
    "leftover_local_clusters",
    "local_cluster_up",
    "parse_target",
    "remove_leftover_cluster",
    "ssh_cluster_up",
]

# Namespaces of a local cluster: tb<id>-m<k> (machines) and tb<id>-lan (their LAN).
CLUSTER_NETNS_RE = re.compile(r"^tb([0-9a-f]{4,8})-(m[0-9]+|lan)$")
RAY_PORT = 6379
LAN_BASE = ipaddress.IPv4Network("100.64.0.0/10")  # shared address space: no one's LAN
START_TIMEOUT_S = 60.0

Say = Callable[[str], None]


def _quiet(_message: str) -> None:
    pass


@dataclass
class Machine:
    """One machine of a cluster: a namespace of this one ("local") or a host over SSH."""

    name: str
    address: str  # where the other machines reach it
    kind: str  # "local" | "ssh" | "head" (this machine, when it runs the head)
    netns: str | None = None
    user: str | None = None
    port: int = 22
    temp_dir: str = ""
    cpus: int | None = None
    host_key: str | None = None  # "type base64" of an SSH machine, as accepted at `up`
    identity: str | None = None  # the key file `up` logged in with (None: the agent's)


@dataclass
class Cluster:
    id: str
    head: str  # HOST:PORT of the Ray head
    token: str
    machines: list[Machine] = field(default_factory=list)
    lan: str | None = None  # a local cluster's LAN namespace
    python: str = sys.executable
    state: str = "starting"  # "up" once every machine runs Ray
    owner: int = field(default_factory=os.getpid)  # the `up` that makes it, while starting

    def starting_elsewhere(self) -> bool:
        """Whether another live process is still bringing it up."""
        return self.state == "starting" and self.owner != os.getpid() and process_alive(self.owner)

    @property
    def record_path(self) -> Path:
        return CLUSTERS_DIR / f"{self.id}.json"

    def save(self) -> None:
        CLUSTERS_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.record_path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(self), out, indent=2)
        tmp.replace(self.record_path)

    @classmethod
    def load(cls, record: dict[str, Any]) -> Cluster:
        machines = [Machine(**m) for m in record.get("machines", [])]
        return cls(**{**record, "machines": machines})


def find_cluster(cluster_id: str | None) -> Cluster:
    """The recorded cluster `cluster_id`, or the only one if None.

    Raises:
        InputError: none is up, or several and no id given, or no such id.
    """
    records = cluster_records()
    if cluster_id is not None:
        records = [r for r in records if r["id"] == cluster_id]
        if not records:
            raise InputError(f"no cluster {cluster_id!r} is up", source="<flag --id>")
    if not records:
        raise InputError("no cluster is up: `testbed cluster up` starts one", source="<cluster>")
    if len(records) > 1:
        ids = ", ".join(r["id"] for r in records)
        raise InputError(f"several clusters are up ({ids}): say which with --id", source="<--id>")
    return Cluster.load(records[0])


# -- Ray on a machine ----------------------------------------------------------------------------


def _ray_bin(python: str) -> str:
    return str(Path(python).with_name("ray"))


def _ray_start_argv(cluster: Cluster, machine: Machine, head: bool) -> list[str]:
    argv = [
        _ray_bin(cluster.python),
        "start",
        f"--node-ip-address={machine.address}",
        f"--temp-dir={machine.temp_dir}",
        "--disable-usage-stats",
    ]
    if machine.cpus is not None:
        argv.append(f"--num-cpus={machine.cpus}")
    if head:
        argv += ["--head", f"--port={cluster.head.rsplit(':', 1)[1]}", "--include-dashboard=false"]
    else:
        argv.append(f"--address={cluster.head}")
    return argv


def _ray_env(cluster: Cluster) -> dict[str, str]:
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": cluster.token}


def _run_here(argv: list[str], env: dict[str, str], what: str) -> None:
    result = subprocess.run(
        argv,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=START_TIMEOUT_S,
    )
    if result.returncode != 0:
        said = "; ".join((result.stderr or result.stdout).strip().splitlines()[-4:])
        raise EmulationError(f"{what}: exit {result.returncode}: {said}")


def _kill_ray_here(temp_dir: str) -> list[int]:
    """Kill this machine's processes of one Ray (those that name its folder)."""
    if not temp_dir:
        return []
    mine = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
        except OSError:
            continue
        if temp_dir.encode() in cmdline:
            mine.append(int(entry.name))
    kill_processes(mine, grace_s=2.0)
    shutil.rmtree(temp_dir, ignore_errors=True)
    return mine


# -- local "machines": namespaces of this machine ------------------------------------------------


def _lan_subnet(cluster_id: str) -> ipaddress.IPv4Network:
    """A /24 of 100.64.0.0/10 that no address of the root namespace is in."""
    taken = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=False
    ).stdout
    subnets = list(LAN_BASE.subnets(new_prefix=24))
    start = int(cluster_id, 16) % len(subnets)
    for k in range(len(subnets)):
        subnet = subnets[(start + k) % len(subnets)]
        prefix = str(subnet.network_address).rsplit(".", 1)[0] + "."
        if f" {prefix}" not in taken:
            return subnet
    raise EmulationError("no free /24 in 100.64.0.0/10 for the cluster's LAN")


def local_cluster_up(
    machines: int, *, cpus: int | None = 1, ray_on: int | None = None, say: Say = _quiet
) -> Cluster:
    """Make `machines` namespaces of this machine into the machines of a cluster:
    Ray's head on m1 and a node on each of the first `ray_on` (all if None).

    Raises:
        InputError: fewer than 1 machine, or ray_on outside 1..machines.
        EmulationError: a namespace, link or Ray failed to start (nothing is left).
    """
    if machines < 1:
        raise InputError(f"--local: at least 1 machine, not {machines}", source="<flag --local>")
    ray_on = machines if ray_on is None else ray_on
    if not 1 <= ray_on <= machines:
        raise InputError(f"Ray runs on 1..{machines} machines, not {ray_on}", source="<ray_on>")
    cluster_id = secrets.token_hex(3)
    subnet = _lan_subnet(cluster_id)
    hosts = list(subnet.hosts())
    lan = f"tb{cluster_id}-lan"
    cluster = Cluster(
        cluster_id, f"{hosts[1]}:{RAY_PORT}", secrets.token_hex(32), lan=lan, python=sys.executable
    )
    for k in range(1, machines + 1):
        cluster.machines.append(
            Machine(
                name=f"m{k}",
                address=str(hosts[k]),
                kind="local",
                netns=f"tb{cluster_id}-m{k}",
                temp_dir=f"/tmp/ray-tb{cluster_id}-m{k}",
                cpus=cpus,
            )
        )
    try:
        cluster.save()  # first: `testbed clean` must know whose namespaces these are
        say(f"cluster {cluster_id}: {machines} machine namespaces on {subnet}")
        create_netns(lan)
        for machine in cluster.machines:
            assert machine.netns is not None
            create_netns(machine.netns, {"net.ipv6.conf.all.disable_ipv6": 1})
        commands = ["link add br0 type bridge", "link set br0 up", "link set lo up"]
        for machine in cluster.machines:
            commands += [
                f"link add {machine.name} type veth peer name eth0 netns {machine.netns}",
                f"link set {machine.name} master br0 up",
            ]
        commands += [f"link add root type veth peer name {lan}", "link set root master br0 up"]
        ip_batch(commands, lan)
        ip_batch([f"link set {lan} netns 1"], lan)
        ip_batch([f"addr add {hosts[0]}/{subnet.prefixlen} dev {lan}", f"link set {lan} up"])
        for machine in cluster.machines:
            ip_batch(
                [
                    "link set lo up",
                    f"addr add {machine.address}/{subnet.prefixlen} dev eth0",
                    "link set eth0 up",
                ],
                machine.netns,
            )
        for k, machine in enumerate(cluster.machines[:ray_on]):
            say(f"cluster {cluster_id}: Ray {'head' if k == 0 else 'node'} on {machine.name}")
            assert machine.netns is not None
            _run_here(
                [*nsenter_argv(machine.netns), *_ray_start_argv(cluster, machine, head=k == 0)],
                _ray_env(cluster),
                f"ray start on {machine.name}",
            )
        cluster.state = "up"
        cluster.save()
    except BaseException:
        _remove_local(cluster)
        with contextlib.suppress(FileNotFoundError):
            cluster.record_path.unlink()
        raise
    return cluster


def _remove_local(cluster: Cluster) -> list[str]:
    names = [m.netns for m in cluster.machines if m.netns] + ([cluster.lan] if cluster.lan else [])
    present = [n for n in names if n in set(list_netns())]
    ids = []
    for name in present:
        with contextlib.suppress(FileNotFoundError):
            ids.append(netns_id(name))
    kill_processes(pids_in_netns(ids), grace_s=2.0)
    for machine in cluster.machines:
        if machine.kind == "local":
            _kill_ray_here(machine.temp_dir)
    return [name for name in present if remove_netns(name)]


# -- machines over SSH ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SshTarget:
    user: str
    host: str
    port: int = 22

    def __str__(self) -> str:
        return f"{self.user}@{self.host}" + (f":{self.port}" if self.port != 22 else "")


def parse_target(text: str) -> SshTarget:
    """USER@HOST[:PORT].

    Raises:
        InputError: anything else.
    """
    match = re.fullmatch(
        r"([A-Za-z_][A-Za-z0-9_.-]{0,31})@([A-Za-z0-9.-]{1,253})(?::(\d{1,5}))?", text
    )
    if match is None or (match[3] is not None and not 0 < int(match[3]) < 65536):
        raise InputError(f"{text!r}: expected USER@HOST or USER@HOST:PORT", source="<machines>")
    return SshTarget(match[1], match[2], int(match[3]) if match[3] else 22)


# The check each machine runs (sh): one "key=value" line per finding.
CHECK_SCRIPT = r"""
echo "uid=$(id -u)"
echo "kernel=$(uname -r)"
for tool in ip nsenter iptables; do command -v $tool >/dev/null 2>&1 || echo "missing=$tool"; done
ns=tbcheck-$$
if ip netns add $ns 2>/dev/null; then
  ip -n $ns link add tbv0 type veth peer name tbv1 >/dev/null 2>&1 || echo "feature=veth"
  ip -n $ns link add tbx0 type vxlan id 42 dstport 4789 >/dev/null 2>&1 || echo "feature=vxlan"
  nsenter --net=/run/netns/$ns iptables -w -A FORWARD -j NFQUEUE --queue-num 0 >/dev/null 2>&1 \
    || echo "feature=nfqueue"
  ip netns del $ns
else
  echo "feature=netns"
fi
PYTHON -c 'import ray, testbed.pool as p; print("project=" + p.project_fingerprint()); print("ray=" + ray.__version__)' 2>&1 | sed 's/^\([^pr]\)/error=\1/'
"""


def _connect(
    target: SshTarget, identity: str | None, accept_new: bool, host_key: str | None = None
) -> Any:
    """An SSH connection; host_key: the machine's key as `up` accepted it (trusted)."""
    import paramiko

    client = paramiko.SSHClient()
    client.load_system_host_keys()
    if host_key is not None:
        kind, data = host_key.split(" ", 1)
        name = target.host if target.port == 22 else f"[{target.host}]:{target.port}"
        client.get_host_keys().add(
            name, kind, paramiko.PKey.from_type_string(kind, base64.b64decode(data))
        )
    known = os.path.expanduser("~/.ssh/known_hosts")
    if os.path.exists(known):  # (then a key accepted as new is added to it, as ssh does)
        client.load_host_keys(known)
    client.set_missing_host_key_policy(
        paramiko.AutoAddPolicy() if accept_new else paramiko.RejectPolicy()
    )
    try:
        client.connect(
            target.host,
            port=target.port,
            username=target.user,
            key_filename=identity,
            allow_agent=True,
            look_for_keys=identity is None,
            timeout=15,
        )
    except (paramiko.SSHException, OSError) as exc:
        raise EmulationError(f"{target}: cannot connect over SSH: {exc}") from None
    return client


def _ssh(client: Any, command: str, target: SshTarget, env: dict[str, str] | None = None) -> str:
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    _, stdout, stderr = client.exec_command(
        f"{prefix} {command}" if prefix else command, timeout=90
    )
    out = stdout.read().decode(errors="replace")
    status = stdout.channel.recv_exit_status()
    if status != 0:
        said = "; ".join(stderr.read().decode(errors="replace").strip().splitlines()[-4:])
        raise EmulationError(f"{target}: `{command.split()[0]}` exited {status}: {said}")
    return out


def check_machine(client: Any, target: SshTarget, python: str) -> dict[str, Any]:
    """Run CHECK_SCRIPT there; returns its findings; raises EmulationError on any problem."""
    script = CHECK_SCRIPT.replace("PYTHON", shlex.quote(python))
    stdin, stdout, _ = client.exec_command("sh -s", timeout=90)
    stdin.write(script)
    stdin.channel.shutdown_write()
    findings: dict[str, list[str]] = {}
    for line in stdout.read().decode(errors="replace").splitlines():
        key, _, value = line.partition("=")
        findings.setdefault(key, []).append(value)
    problems = []
    if findings.get("uid") != ["0"]:
        problems.append(f"not root (uid {findings.get('uid', ['?'])[0]})")
    problems += [f"{t} is not installed" for t in findings.get("missing", [])]
    problems += [f"the kernel lacks {f}" for f in findings.get("feature", [])]
    mine = project_fingerprint()
    theirs = findings.get("project", [""])[0]
    if theirs != mine:
        said = "; ".join(findings.get("error", []))[:300] or theirs
        problems.append(f"runs other project sources ({said or 'none found'}; here {mine})")
    import ray

    if findings.get("ray", [""])[0] not in ("", ray.__version__):
        problems.append(f"runs Ray {findings['ray'][0]} (here {ray.__version__})")
    if problems:
        raise EmulationError(f"{target} cannot join the cluster: " + "; ".join(problems))
    return {"kernel": findings.get("kernel", ["?"])[0], "ray": findings.get("ray", ["?"])[0]}


def _local_address_towards(host: str) -> str:
    out = subprocess.run(
        ["ip", "-o", "route", "get", host], capture_output=True, text=True, check=False
    ).stdout
    match = re.search(r"\bsrc (\S+)", out)
    if match is None:
        raise EmulationError(f"this machine has no route to {host}")
    return match[1]


def ssh_cluster_up(
    targets: Sequence[SshTarget],
    *,
    identity: str | None = None,
    accept_new_host_keys: bool = False,
    cluster_id: str | None = None,
    cpus: int | None = None,
    python: str | None = None,
    say: Say = _quiet,
) -> Cluster:
    """Join machines over SSH to the cluster `cluster_id` (or the only one up), or to
    a new one whose head runs on this machine.

    Raises:
        EmulationError: a machine cannot be reached, fails its check or its start
            (the machines started by this call are stopped again).
    """
    if not targets:
        raise InputError("name at least one USER@HOST", source="<machines>")
    new = not cluster_records() if cluster_id is None else False
    if new:
        cid = secrets.token_hex(3)
        address = _local_address_towards(targets[0].host)
        cluster = Cluster(cid, f"{address}:{RAY_PORT}", secrets.token_hex(32))
        cluster.machines.append(
            Machine("head", address, "head", temp_dir=f"/tmp/ray-tb{cid}-head", cpus=cpus)
        )
    else:
        cluster = find_cluster(cluster_id)
    python = python or cluster.python
    if new:
        cluster.save()
    clients = []
    started: list[tuple[Any, SshTarget, Machine]] = []
    try:
        for target in targets:
            say(f"{target}: connecting and checking")
            client = _connect(target, identity, accept_new_host_keys)
            clients.append(client)
            check_machine(client, target, python)
        if new:
            say(f"cluster {cluster.id}: Ray head on this machine ({cluster.head})")
            _run_here(
                _ray_start_argv(cluster, cluster.machines[0], head=True),
                _ray_env(cluster),
                "ray start (head, this machine)",
            )
        taken = {m.name for m in cluster.machines}
        for client, target in zip(clients, targets, strict=True):
            name = target.host if target.host not in taken else str(target)
            machine = Machine(
                name,
                target.host,
                "ssh",
                user=target.user,
                port=target.port,
                identity=None if identity is None else os.path.abspath(identity),
                temp_dir=f"/tmp/ray-tb{cluster.id}-{len(cluster.machines) + 1}",
                cpus=cpus,
            )
            say(f"{target}: starting Ray, joining {cluster.head}")
            argv = _ray_start_argv(cluster, machine, head=False)
            argv[0] = _ray_bin(python)
            _ssh(client, shlex.join(argv), target, _ray_env(cluster))
            key = client.get_transport().get_remote_server_key()
            machine.host_key = f"{key.get_name()} {key.get_base64()}"  # pinned for `down`
            started.append((client, target, machine))
            cluster.machines.append(machine)
        cluster.state = "up"
        cluster.save()
    except BaseException:
        for client, target, machine in started:
            with contextlib.suppress(Exception):
                _ssh_kill(client, machine.temp_dir, target)
        if new:
            _kill_ray_here(cluster.machines[0].temp_dir)
            with contextlib.suppress(FileNotFoundError):
                cluster.record_path.unlink()
        raise
    finally:
        for client in clients:
            client.close()
    return cluster


def _kill_commands(temp_dir: str) -> list[str]:
    """Kill the processes that name `temp_dir`, then remove it: two commands, and a
    pattern whose first character is a class ([/]), so that the shell running the
    first does not match it."""
    pattern = shlex.quote(f"[{temp_dir[0]}]{re.escape(temp_dir[1:])}")
    return [f"pkill -9 -f -- {pattern}; true", f"rm -rf -- {shlex.quote(temp_dir)}"]


def _ssh_kill(client: Any, temp_dir: str, target: SshTarget) -> None:
    for command in _kill_commands(temp_dir):
        _ssh(client, command, target)


# -- status and down -----------------------------------------------------------------------------


def cluster_status(cluster: Cluster) -> list[dict[str, Any]]:
    """Each machine: its address, whether its Ray node is alive, CPUs, memory and load."""
    with ray_session(cluster.head) as ray:  # the same connection `--ray` makes
        nodes = {n["NodeManagerAddress"]: n for n in ray.nodes() if n.get("Alive")}
        loads = _loads(ray, list(nodes.values()))
    rows = []
    for machine in cluster.machines:
        node = nodes.get(machine.address)
        resources = node.get("Resources", {}) if node else {}
        rows.append(
            {
                "machine": machine.name,
                "address": machine.address,
                "kind": machine.kind,
                "ray": "alive" if node else "absent",
                "cpus": resources.get("CPU"),
                "memory_gb": round(resources.get("memory", 0) / 2**30, 1) if node else None,
                "load_1m": loads.get(machine.address, (None, None))[0],
                "hosts": loads.get(machine.address, (None, None))[1],
            }
        )
    return rows


def _loads(ray: Any, nodes: list[dict[str, Any]]) -> dict[str, tuple[float, int]]:
    """Each node's 1-minute load and the emulated hosts built there, by address."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0)(_machine_figures)
    refs = {
        node["NodeManagerAddress"]: task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        ).remote()
        for node in nodes
    }
    out = {}
    for address, ref in refs.items():
        with contextlib.suppress(Exception):
            out[address] = ray.get(ref, timeout=20)
    return out


def _machine_figures() -> tuple[float, int]:
    """(1-minute load, emulated hosts) of the machine this runs on: the hosts of the
    live runs whose owner runs in this machine's network (on a machine of its own:
    every live run; on a namespace "machine": the runs its agents made)."""
    here = os.stat("/proc/self/ns/net").st_ino
    hosts = 0
    for record in list_runs():
        try:
            if record.owner_alive() and os.stat(f"/proc/{record.owner_pid}/ns/net").st_ino == here:
                hosts += sum(1 for name in record.netns if re.search(r"-h[0-9]+$", name))
        except OSError:
            continue
    return round(os.getloadavg()[0], 2), hosts


def cluster_down(
    cluster: Cluster, *, identity: str | None = None, say: Say = _quiet
) -> dict[str, Any]:
    """Stop Ray on every machine, remove a local cluster's namespaces and the record."""
    stopped, problems = [], []
    for machine in cluster.machines:
        if machine.kind == "ssh":
            target = SshTarget(machine.user or "root", machine.address, machine.port)
            try:
                client = _connect(
                    target,
                    identity or machine.identity,
                    accept_new=False,
                    host_key=machine.host_key,
                )
                try:
                    _ssh_kill(client, machine.temp_dir, target)
                finally:
                    client.close()
                stopped.append(machine.name)
            except Exception as exc:  # whatever one machine says, the others are stopped
                problems.append(f"{target}: {type(exc).__name__}: {exc}")
        elif machine.kind == "head":
            _kill_ray_here(machine.temp_dir)
            stopped.append(machine.name)
    removed = _remove_local(cluster)
    stopped += [m.name for m in cluster.machines if m.kind == "local"]
    say(f"cluster {cluster.id}: stopped on {', '.join(stopped) or 'nothing'}")
    with contextlib.suppress(FileNotFoundError):
        cluster.record_path.unlink()
    return {"id": cluster.id, "stopped": stopped, "netns_removed": removed, "problems": problems}


def leftover_local_clusters() -> dict[str, list[str]]:
    """Namespaces of local clusters that no record names (a killed `cluster up`)."""
    recorded = {r["id"] for r in cluster_records()}
    found: dict[str, list[str]] = {}
    for name in list_netns():
        match = CLUSTER_NETNS_RE.match(name)
        if match and match[1] not in recorded:
            found.setdefault(match[1], []).append(name)
    return found


def remove_leftover_cluster(cluster_id: str, netns: list[str]) -> list[str]:
    """Remove a local cluster's namespaces with everything in them, and its Ray folders."""
    cluster = Cluster(cluster_id, "", "", lan=None)
    for name in netns:
        match = CLUSTER_NETNS_RE.match(name)
        if match and match[2].startswith("m"):
            cluster.machines.append(
                Machine(
                    match[2],
                    "",
                    "local",
                    netns=name,
                    temp_dir=f"/tmp/ray-tb{cluster_id}-{match[2]}",
                )
            )
        else:
            cluster.lan = name
    return _remove_local(cluster)
