# Test layout: tests/node (the peer), tests/testbed (the testbed's packages) and
# tests/integration (whole runs; tests/integration/netns builds real namespaces as root and
# is marked `netns`) mirror the code; helpers shared by several test modules live in the
# conftest.py files. After the whole session we check that no namespace, registry record or
# process of the runs this session made is left on the machine, and remove any we find, so a
# failing test cannot poison the next run (runs of other processes are left alone).

from __future__ import annotations

import contextlib
import fcntl
import itertools
import math
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from xdist.scheduler import LoadScopeScheduling

from testbed.pytest_plugin import require_netns

# pytester: the failure report of the `wan` fixture is tested on a test that fails.
pytest_plugins = ["pytester"]


# The longest work first: under pytest-xdist (`make test`) the behaviour digests' runs (2-3
# min of both cores) start at once on one worker and the namespace tests on the other,
# instead of one of them last with the other worker idle.
NETNS = "tests/integration/netns/"
FIRST = ("tests/integration/test_behaviour_unchanged.py", NETNS)


def _rank(item: pytest.Item) -> int:
    nodeid = item.nodeid
    return next((k for k, prefix in enumerate(FIRST) if nodeid.startswith(prefix)), len(FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)
    for item in items:
        if item.nodeid.startswith(NETNS):
            item.add_marker(pytest.mark.netns)


class _ByModuleNamespacesTogether(LoadScopeScheduling):
    """Under pytest-xdist (`make test`: -n 2 --dist loadscope --no-loadscope-reorder) a
    module's tests run on one worker, so its module fixtures (a Ray cluster, a shared WAN)
    start once, and the namespace tests all on one worker, one after another: they measure
    delays against bounds, and two of them at once on two cores would measure each other.
    (xdist_group marks with --dist loadgroup did this until pytest 9.2, whose node ids
    xdist 3.8 can no longer suffix with the group: pytest-xdist issue 1386. Every test went
    to whichever worker was free.)"""

    def _split_scope(self, nodeid: str) -> str:
        return NETNS if nodeid.startswith(NETNS) else nodeid.split("::", 1)[0]


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    if config.getvalue("dist") != "loadscope":
        return None
    return _ByModuleNamespacesTogether(config, log)


# Simulations run in virtual time: a lower CPU priority costs them only speed. The namespace
# tests measure real time (joins within their timeouts, churn actions on time, delays within
# bounds), so under pytest-xdist they keep the normal priority while the other worker's
# simulations, which inherit this nice value, yield to them; two suites side by side (two
# clones' `make test`) then each still give their namespace tests a core. Set before each
# test's fixtures (a module's Ray cluster inherits it too). Raising it back needs root, which
# the namespace tests need anyway.
SIMULATION_NICE = 10


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    wanted = 0 if item.get_closest_marker("netns") is not None else SIMULATION_NICE
    if os.getpriority(os.PRIO_PROCESS, 0) != wanted:
        with contextlib.suppress(PermissionError):  # not root: stays as it is
            os.setpriority(os.PRIO_PROCESS, 0, wanted)


# One namespace test at a time on this machine, whichever suite runs it. Two clones' `make
# test` side by side (serial, 2026-11-30 at 052623c) each failed a two-machine test while
# the other suite's namespace tests ran at the same moment: two Ray clusters, two WANs and
# their delay engines on two cores (a partition across the machines applied in 142 ms against
# 50; a program's view late at a check 2.5 s after churn). Nice values do not help across
# suites: each is its own autogroup to the scheduler. A test of tests/integration/netns waits
# for its turn around its whole protocol (set-up, call, tear-down), outside pytest-timeout's
# clock (the holder's own timeout bounds the wait): first come, first served (a flock grants no
# order: a worker that asks again at once could keep the machine from the other suite); a
# place held by a process that is gone is dropped. A test that waited says how
# long in its report. TESTBED_TEST_QUEUE names another queue folder (the queue's own test).
MACHINE_QUEUE = Path(os.environ.get("TESTBED_TEST_QUEUE", "/run/lock/p2p-grid-testbed-netns-tests"))


def _started(pid: int) -> str | None:
    """A process's start time (clock ticks since boot), None once it is gone: with the pid,
    it names the process for good (pids are reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


@contextlib.contextmanager
def machine_turn(queue: Path) -> Iterator[float]:
    """Wait until every process queued in `queue` before this one has left or is gone;
    yields the seconds waited."""
    queue.mkdir(parents=True, exist_ok=True)
    with (queue / "order.lock").open("a") as order:
        fcntl.flock(order, fcntl.LOCK_EX)  # tickets in the order they are taken
        try:
            last = max((int(p.name.split("-")[0]) for p in queue.glob("*-*")), default=0)
            ticket = queue / f"{last + 1:012d}-{os.getpid()}"
            draft = queue / f"draft{os.getpid()}"  # whole when it appears under its name
            draft.write_text(_started(os.getpid()) or "")
            draft.replace(ticket)
        finally:
            fcntl.flock(order, fcntl.LOCK_UN)
    began = time.monotonic()
    try:
        while True:
            ahead = 0
            for place in queue.glob("*-*"):
                if place.name >= ticket.name:
                    continue
                try:
                    held = place.read_text()
                except FileNotFoundError:
                    continue  # it left meanwhile
                if held == _started(int(place.name.split("-")[1])):
                    ahead += 1
                else:
                    place.unlink(missing_ok=True)  # its process is gone
            if not ahead:
                break
            time.sleep(0.1)
        yield time.monotonic() - began
    finally:
        ticket.unlink(missing_ok=True)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    if "/netns/" not in str(item.path) or os.geteuid() != 0:
        yield
        return
    with machine_turn(MACHINE_QUEUE) as waited:
        if waited >= 1.0:
            item.user_properties.append(("machine_turn_wait_s", round(waited, 1)))
        yield


@pytest.fixture(autouse=True)
def _netns_guard(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("netns") is not None:
        require_netns()


@pytest.fixture(scope="session", autouse=True)
def _nothing_left_behind() -> object:
    # Only runs made by this session are ours to judge and remove: a user's
    # live run on the same machine (an experiment in another shell) is not.
    if os.geteuid() != 0:
        yield
        return
    from testbed.net import clean, list_runs, netns_of_run

    before = set(netns_of_run())
    yield
    runs = list_runs()
    ours = {r.run_id for r in runs if r.owner_pid == os.getpid()}
    # Namespaces that appeared meanwhile are ours unless a live process of someone
    # else registered them (a run started beside the tests, another suite's): the
    # runs listed before and after the namespaces, so one starting or ending
    # meanwhile is known either way.
    others = {r.run_id for r in runs if r.owner_pid != os.getpid() and r.owner_alive()}
    appeared = set(netns_of_run()) - before
    others |= {r.run_id for r in list_runs() if r.owner_pid != os.getpid() and r.owner_alive()}
    ours |= appeared - others
    reports = [clean(force=True, run_id=rid) for rid in sorted(ours)]
    assert not ours, f"runs left behind by the tests (now removed): {sorted(ours)}; {reports}"


# Matrices whose embedding is known (the predictors' tests in tests/node and the prediction
# specs' in tests/testbed): points in a Euclidean space, and a tree metric.


def euclidean(n: int, dims: int, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    points = [[rng.uniform(0, 100) for _ in range(dims)] for _ in range(n)]
    return [[math.dist(a, b) for b in points] for a in points]


def tree_metric(n: int, seed: int) -> np.ndarray:
    """Path lengths between n random vertices of a random weighted tree (a tree metric)."""
    rng = random.Random(seed)
    parent, weight = [-1], [0.0]
    for v in range(1, 3 * n):
        parent.append(rng.randrange(v))
        weight.append(rng.uniform(1, 10))
    return path_lengths(parent, weight, rng.sample(range(3 * n), n))


def path_lengths(parent: list[int], weight: list[float], hosts: list[int]) -> np.ndarray:
    """Tree path lengths between `hosts` (vertices of the tree given by parent and edge weight)."""
    depth = [0.0] * len(parent)
    for v in range(1, len(parent)):  # parents come first
        depth[v] = depth[parent[v]] + weight[v]

    def ancestors(v):
        out = []
        while v >= 0:
            out.append(v)
            v = parent[v]
        return out

    chains = [ancestors(h) for h in hosts]
    d = np.zeros((len(hosts), len(hosts)))
    for i, j in itertools.product(range(len(hosts)), repeat=2):
        lca = next(v for v in chains[j] if v in set(chains[i]))
        d[i, j] = depth[hosts[i]] + depth[hosts[j]] - 2 * depth[lca]
    return d
