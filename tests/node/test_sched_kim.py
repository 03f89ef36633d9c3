# Kim's matchmaking modes in the peer's scheduler (node/sched/placement.py;
# seed 000 §3.1 and §4.1.1) on simulated peers whose CAN dimensions are
# resources: every job runs on a node at least as capable as it asks, basic CAN
# never runs a job on its owner while a capable neighbour exists, and CAN-P
# takes the fastest free capable node.

from __future__ import annotations

import random

import msgspec
import pytest

from node.can.geometry import Dimension, Space
from node.can.overlay import CanConfig
from node.fields import FieldError
from node.peer import NodeConfig
from node.sched.agent import SchedConfig
from node.wire import Codec, JobInfo, LoadedUpdate, NeighbourLoad
from testbed.linkmodel import LinkModel
from testbed.sim import Simulator

SPACE = Space(
    [Dimension("cpu", 0.0, 500.0), Dimension("mem", 0.0, 8192.0), Dimension("v", 0.0, 1.0, True)]
)
N = 16


class KimGrid:
    """N peers of random capabilities, each its own cluster, 10 ms apart."""

    def __init__(self, seed: int = 1, **sched: object) -> None:
        rng = random.Random(seed)
        rtt = [[0.0 if i == j else 0.01 for j in range(N)] for i in range(N)]
        can = CanConfig(SPACE, update_interval_s=1.0, suspect_after_s=3.0, join_timeout_s=4.0)
        config = SchedConfig(**({"beat_s": 1.0, "dead_after_s": 4.0, "balance": "none"} | sched))
        self.sim = Simulator(
            LinkModel(rtt), seed=seed, ips=[f"10.0.0.{k + 1}" for k in range(N)],
            observer=lambda host, record: self.log.append({"host": host, **record}),
        )  # fmt: skip
        self.log: list[dict] = []
        self.points = [
            (rng.choice([100.0, 200.0, 300.0, 400.0]), rng.choice([512.0, 1024.0, 4096.0]), rng.random())
            for _ in range(N)
        ]  # fmt: skip
        for host, point in enumerate(self.points):
            self.sim.start_peer(host, NodeConfig(can, sched=config), point)
        self.sim.join(0, [])
        for host in range(1, N):
            self.sim.at(0.3 * host, lambda h=host: self.sim.join(h, [0]))
        self.sim.run_until(0.3 * N + 15.0)
        assert all(p.member for p in self.sim.peers.values())
        for host in range(N):
            self.sim.set_sched_cluster(host, [host])
        self.sim.run_until(self.sim.now + 3.0)  # a beat or two: loads and aggregates known
        self.log.clear()

    def run_jobs(self, requirements: list[tuple[float, float]], runtime_s: float, gap_s: float):
        rng = random.Random(7)
        for k, (cpu, mem) in enumerate(requirements):
            job = JobInfo(k + 1, 1, runtime_s, self.sim.now, (cpu, mem, rng.random()))
            self.sim.submit(k % N, job)
            self.sim.run_until(self.sim.now + gap_s)
        self.sim.run_until(self.sim.now + runtime_s * len(requirements) + 30.0)
        return {e["job"]: e["host"] for e in self.log if e["kind"] == "job_started"}

    def owner(self, point: tuple[float, ...]) -> int:
        for host, peer in self.sim.peers.items():
            lo, hi = peer.can.lo, peer.can.hi  # the zone holding the point (half-open)
            if all(a <= x < b for a, x, b in zip(lo, point, hi, strict=True)):
                return host
        raise AssertionError(point)


REQUIREMENTS = [(150.0, 600.0), (0.0, 0.0), (250.0, 0.0), (0.0, 2000.0), (350.0, 1000.0)] * 4


@pytest.mark.parametrize("mode", ["parsimony", "can", "can-p"])
def test_every_job_runs_on_a_node_as_capable_as_it_asks(mode):
    grid = KimGrid(matchmaking=mode)
    started = grid.run_jobs(REQUIREMENTS, runtime_s=2.0, gap_s=0.5)
    assert sorted(started) == list(range(1, len(REQUIREMENTS) + 1))
    for job, host in started.items():
        cpu, mem = REQUIREMENTS[job - 1]
        assert grid.points[host][0] >= cpu and grid.points[host][1] >= mem, (mode, job, host)


def test_can_p_takes_the_fastest_free_capable_node_it_sees():
    # Idle grid, jobs far apart: each stops at once on a free node, the fastest of the
    # capable ones its owner sees (itself and its direct neighbours).
    grid = KimGrid(matchmaking="can-p")
    started = grid.run_jobs([(0.0, 0.0)] * 6, runtime_s=1.0, gap_s=4.0)
    assert len(started) == 6
    host_of = {peer.can.id: host for host, peer in grid.sim.peers.items()}
    rng = random.Random(7)
    for job in range(1, 7):
        owner = grid.owner((0.0, 0.0, rng.random()))
        seen = [owner] + [host_of[n["id"]] for n in grid.sim.peers[owner].can.dump()["neighbors"]]
        assert grid.points[started[job]][0] == max(grid.points[h][0] for h in seen), (job, seen)


def test_basic_can_never_runs_a_job_on_its_owner_when_a_neighbour_can():
    grid = KimGrid(matchmaking="can")
    requirements = [(0.0, 0.0)] * 8
    started = grid.run_jobs(requirements, runtime_s=1.0, gap_s=2.0)
    assert len(started) == 8
    rng = random.Random(7)
    owners = [grid.owner((0.0, 0.0, rng.random())) for _ in requirements]
    assert all(started[k + 1] != owners[k] for k in range(8)), (started, owners)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("matchmaking", "kim", "expected one of"),
        ("stopping_factor", -1.0, "must be a number >= 0"),
        ("stopping_factor", float("nan"), "must be a number >= 0"),
    ],
)
def test_bad_matchmaking_settings_are_refused_naming_the_field(field, value, message):
    with pytest.raises(FieldError, match=f"{field}.*{message}"):
        SchedConfig(**{field: value})


def test_an_unknown_speed_dimension_is_refused_naming_the_field():
    with pytest.raises(FieldError, match="speed_dimension.*'gpu'.*one of \\['cpu', 'mem'\\]"):
        KimGrid(matchmaking="can-p", speed_dimension="gpu")


def waits(grid: KimGrid) -> list[float]:
    submitted = {e["job"]: e["t"] for e in grid.log if e["kind"] == "job_submitted"}
    return [e["t"] - submitted[e["job"]] for e in grid.log if e["kind"] == "job_started"]


@pytest.mark.parametrize("how", ["pull", "push"])
def test_kims_dynamic_balancing_moves_queued_jobs_to_capable_idle_nodes(how):
    # Basic CAN piles a burst of unconstrained jobs on the owners' neighbours; PULL
    # (idle nodes ask loaded neighbours) and PUSH (loaded nodes offer to idle ones)
    # move queued jobs away: every job runs once on a node that can run it, sooner.
    burst = [(0.0, 0.0)] * 40
    still = KimGrid(matchmaking="can", balance="none")
    alone = still.run_jobs(burst, runtime_s=6.0, gap_s=0.05)
    grid = KimGrid(matchmaking="can", balance=how, balance_s=1.0, neighbours="indirect")
    started = grid.run_jobs(burst, runtime_s=6.0, gap_s=0.05)
    assert sorted(started) == sorted(alone) == list(range(1, 41))
    moved = [e for e in grid.log if e["kind"] == "job_moved"]
    assert moved and all(e["by"] == how for e in moved)
    assert sum(waits(grid)) < 0.8 * sum(waits(still)), (sum(waits(grid)), sum(waits(still)))
    ends = [e for e in grid.log if e["kind"] == "job_finished" and e["ok"]]
    assert sorted(e["job"] for e in ends) == list(range(1, 41))  # each ran once


def test_a_malformed_dlb_request_is_refused_and_counted():
    grid = KimGrid(matchmaking="can", balance="pull")
    peer = grid.sim.peers[0]
    from node.wire import Codec, DlbReply, DlbRequest

    codec = Codec(None)
    bad = [
        DlbRequest(5, 0, (1.0, 1.0, 0.5)),  # no such kind
        DlbRequest(0, 0, (1.0, 0.5)),  # a point of the wrong dimension
        DlbReply(0, False),  # an answer to a PULL we did not send
        DlbReply(1, True),  # an answer to a PUSH we did not send
    ]
    for k, message in enumerate(bad):
        data = codec.encode(message, sender=99, seq=k + 1)
        peer.receive_datagram(data, ("10.0.0.2", 7000), grid.sim.now)
    assert peer.stats()["drop.invalid"] == 4


def test_kims_aggregates_count_every_node_and_queued_job_once():
    # Seed 000 eq. 4.1-4.2 in a static grid after convergence: for every dimension d,
    # the nodes with nothing below them in d, each counting itself plus what it
    # aggregates above, add up to the whole grid, and so do their queues.
    grid = KimGrid(matchmaking="can", balance="none")
    rng = random.Random(3)
    for k in range(40):  # long jobs: the queues stay as they are while we look
        grid.sim.submit(k % N, JobInfo(k + 1, 1, 1e4, grid.sim.now, (0.0, 0.0, rng.random())))
    grid.sim.run_until(grid.sim.now + 20.0)  # placed, and beats enough to converge
    peers = grid.sim.peers
    queued = sum(p.sched.member.load() for p in peers.values())
    assert queued == 40
    for d in range(SPACE.n):
        bottom = [p for p in peers.values() if p.can.lo[d] == SPACE.dims[d].lo]
        nodes = sum(p.sched._live.above[2 * d] + 1 for p in bottom)
        jobs = sum(p.sched._live.above[2 * d + 1] + p.sched.member.load() for p in bottom)
        assert nodes == pytest.approx(N, rel=1e-9), (d, nodes)
        assert jobs == pytest.approx(queued, rel=1e-9), (d, jobs)


def crash_an_entry(recovery: str) -> tuple[KimGrid, int, dict[int, tuple[float, ...]]]:
    """Twenty long jobs submitted through one peer, which crashes 3 s later while
    most of them wait in queues; the run goes on for 60 s."""
    grid = KimGrid(matchmaking="can", owner_recovery=recovery)
    entry, rng = 5, random.Random(11)
    points = {k + 1: (cpu, mem, rng.random()) for k, (cpu, mem) in enumerate(REQUIREMENTS)}
    for job, point in points.items():
        grid.sim.submit(entry, JobInfo(job, 1, 15.0, grid.sim.now, point))
    grid.sim.run_until(grid.sim.now + 3.0)
    grid.sim.crash(entry)
    grid.sim.run_until(grid.sim.now + 60.0)
    return grid, entry, points


def test_an_owner_that_crashes_is_replaced_by_routing_to_the_jobs_point():
    # Seed 000 §2.1: the run node finds the job's new owner by re-routing to its
    # coordinates. Every job whose attempt was not on the crashed peer itself is
    # adopted by the owner of its point, completes once and is reported once, by
    # that owner; none is dropped.
    grid, entry, points = crash_an_entry("reroute")
    kinds = lambda kind: [e for e in grid.log if e["kind"] == kind]  # noqa: E731
    adopted = {e["job"]: e for e in kinds("job_adopted")}
    done = [e["job"] for e in kinds("job_finished") if e["ok"]]
    ended = {e["job"]: e for e in kinds("job_ended")}
    assert len(adopted) >= len(REQUIREMENTS) // 2, adopted
    assert len(done) == len(set(done)), done  # nothing ran twice
    for job, adoption in adopted.items():
        assert adoption["host"] == grid.owner(points[job]) != entry
        assert job in done and ended[job]["ok"] and ended[job]["host"] == adoption["host"]
    assert not [e for e in kinds("job_finished") if not e["ok"]]  # no attempt dropped
    assert all(e["host"] in {a["host"] for a in adopted.values()} for e in ended.values())


def test_without_rerouting_the_waiting_attempts_of_a_crashed_owner_are_dropped():
    # The "client" recovery: the client submits such jobs again (testbed/experiments).
    grid, _, _ = crash_an_entry("client")
    assert not [e for e in grid.log if e["kind"] in ("job_adopted", "job_ended")]
    dropped = [e for e in grid.log if e["kind"] == "job_finished" and not e["ok"]]
    assert dropped and all(e["reason"] == "its entry went silent" for e in dropped)


def test_an_unknown_owner_recovery_is_refused_naming_the_field():
    with pytest.raises(FieldError, match="owner_recovery.*'owner'.*expected one of"):
        SchedConfig(owner_recovery="owner")  # type: ignore[arg-type]


def test_the_load_rides_the_overlays_updates_and_adds_no_messages():
    # Seed 000 §4.1.1: Kim's figures ride the periodic neighbour update. Peers that share
    # no job send no SchedBeat at all, and each knows its neighbours' load from their
    # last update (one update period old at most).
    grid = KimGrid(matchmaking="can", balance="none")
    grid.sim.run_until(grid.sim.now + 5.0)
    for peer in grid.sim.peers.values():
        stats = peer.stats()
        assert stats.get("tx.SchedBeat", 0) == 0 and stats["tx.LoadedUpdate"] > 0
        assert peer.sched is not None
        for i in peer.can.direct:
            info = peer.can.known[i].info
            heard = peer.sched.state_of[(info.host, info.port)]
            assert heard.at >= grid.sim.now - 1.0 - 0.05 and heard.size == 1


def test_an_update_with_unbelievable_load_figures_is_refused_whole():
    grid = KimGrid(matchmaking="can", balance="none")
    peer = grid.sim.peers[0]
    assert peer.sched is not None
    i = min(peer.can.direct)
    info = peer.can.known[i].info
    addr = (info.host, info.port)
    heard, seen = peer.sched.state_of[addr], peer.can._table.seen.get(i)
    invalid = peer.stats().get("drop.invalid", 0)
    zone = msgspec.structs.replace(info, instance=info.instance + 1)  # news to the overlay
    bad = LoadedUpdate(zone, (), (), None, 0, NeighbourLoad(0, 1, 1, 0, (1e300,) * 6))
    data = Codec(None).encode(bad, sender=i, seq=2**40)
    peer.receive_datagram(data, addr, grid.sim.now)
    assert peer.stats()["drop.invalid"] == invalid + 1
    assert peer.sched.state_of[addr] is heard  # neither the figures believed
    assert peer.can._table.seen.get(i) is seen and peer.can.known[i].info == info  # nor the update
